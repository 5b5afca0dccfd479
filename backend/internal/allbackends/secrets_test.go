// Package allbackends_test checks what every backend shares: that no secret
// of a backend URL reaches the caller in an error, and that every backend
// parses its URL parameters with the same rules.
package allbackends_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock/dlock"
	_ "github.com/dlock/dlock/backend/etcdlock"
	_ "github.com/dlock/dlock/backend/mysqllock"
	_ "github.com/dlock/dlock/backend/pglock"
	_ "github.com/dlock/dlock/backend/redislock"
	_ "github.com/dlock/dlock/backend/redlock"
	_ "github.com/dlock/dlock/backend/temporallock"
	_ "github.com/dlock/dlock/backend/zklock"
	"github.com/dlock/dlock/internal/testenv"
)

// openFails opens raw, where nothing listens, and returns Open's error.
func openFails(t *testing.T, raw string, opts ...dlock.Option) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := dlock.Open(ctx, raw, opts...)
	if err == nil {
		c.Close()
		t.Fatal("Open succeeded with nothing listening")
	}
	return err
}

// pw is distinctive, so that finding it in a message can only mean a leak;
// its '+' and '@' are encoded differently in user info and in a query.
const pw = "Zq7+Secret@Pw"

// TestOpenErrorsShowNoSecret opens every backend with each form of secret
// its URL takes — the user-info password (an API key for Temporal), and
// PostgreSQL's password= and sslpassword= — at a port where nothing
// listens, and with a parameter the parser refuses. No error, nor any
// error it wraps, may show the secret in any encoding.
func TestOpenErrorsShowNoSecret(t *testing.T) {
	t.Parallel()
	port := testenv.FreePort(t) // free: nothing listens there
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	user := "u:" + strings.NewReplacer("+", "%2B", "@", "%40").Replace(pw) + "@"
	query := strings.NewReplacer("+", "%2B", "@", "%40").Replace(pw)
	var urls []string
	for _, base := range []struct{ scheme, rest, bad string }{
		{"postgres", "/db?connect_timeout=2", "sslmode=bogus"},
		{"postgresql", "/db?sslmode=disable", "connect_timeout=x"},
		{"mysql", "/db?timeout=2s", "tls=nonsense"},
		{"mariadb", "/db?timeout=2s", "readTimeout=x"},
		{"redis", "/0?dial_timeout=2s", "db=x"},
		{"rediss", "/0?dial_timeout=2s", "db=x"},
		{"redlock", "/0?dial_timeout=2s", "db=x"},
		{"etcd", "/?dial-timeout=2s", "nosuch=1"},
		{"zk", "/locks?connect-timeout=2s", "nosuch=1"},
		{"temporal", "/default?tls=false", "nosuch=1"},
	} {
		urls = append(urls,
			base.scheme+"://"+user+addr+base.rest,
			base.scheme+"://"+user+addr+base.rest+"&"+base.bad,
			base.scheme+"://"+user+addr+"/%zz?"+base.bad) // unparseable
		if strings.HasPrefix(base.scheme, "postgres") {
			for _, k := range []string{"password", "sslpassword"} {
				urls = append(urls,
					base.scheme+"://u@"+addr+base.rest+"&"+k+"="+query,
					base.scheme+"://u@"+addr+base.rest+"&"+k+"="+query+"&"+base.bad)
			}
		}
	}
	for _, raw := range urls {
		t.Run(dlock.Redact(raw), func(t *testing.T) {
			t.Parallel()
			err := openFails(t, raw)
			for e := err; e != nil; e = errors.Unwrap(e) {
				for _, form := range []string{pw, strings.ReplaceAll(pw, "+", "%2B"), strings.ReplaceAll(pw, "@", "%40"), "Zq7"} {
					if strings.Contains(e.Error(), form) {
						t.Fatalf("error shows the secret (as %q): %v", form, e)
					}
				}
			}
			if got := dlock.Redact(raw); strings.Contains(got, "Zq7") {
				t.Errorf("Redact = %q shows the secret", got)
			}
		})
	}
}
