package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
)

// TestRedactHidesEverySecretForm: the user-info password and the values of
// secret query parameters (PostgreSQL's password= and sslpassword=, and
// any parameter named like a password, secret or token) are masked, in
// URLs, broken URLs and keyword/value strings; everything else is kept.
func TestRedactHidesEverySecretForm(t *testing.T) {
	const pw = "Hunter2Secret"
	for _, tc := range []struct {
		in   string
		keep []string // parts that must survive
	}{
		{"postgres://app:" + pw + "@db:5432/app?sslmode=verify-full", []string{"app:xxxxx@db:5432", "sslmode=verify-full"}},
		{"postgres://app@db/app?password=" + pw + "&table=locks", []string{"table=locks", "password=xxxxx"}},
		{"postgres://app@db/app?sslkey=/k.pem&sslpassword=" + pw, []string{"sslkey=/k.pem", "sslpassword=xxxxx"}},
		{"postgres://app@db/app?pass%77ord=" + pw, []string{"db/app"}},                        // an encoded key is still password
		{"postgres://app@db/app?password=" + strings.ToLower(pw) + "%21", []string{"db/app"}}, // an encoded value
		{"mysql://root:" + pw + "@db:3306/app?tls=true", []string{"root:xxxxx@db:3306", "tls=true"}},
		{"mysql://root@db/app?pwd=" + pw, []string{"root@db/app"}},
		{"redis://:" + pw + "@127.0.0.1:6379/0", []string{"127.0.0.1:6379/0"}},
		{"redlock://u:" + pw + "@h1:6379,h2:6379,h3:6379", []string{"h1:6379,h2:6379,h3:6379"}},
		{"etcd://root:" + pw + "@h1:2379/?cacert=/ca.pem&key=/client.key", []string{"cacert=/ca.pem", "key=/client.key"}},
		{"zk://digest:" + pw + "@h:2181/locks", []string{"h:2181/locks"}},
		{"temporal://:" + pw + "@ns.tmprl.cloud:7233/ns?api-key-env=TEMPORAL_KEY&tls-key=/k.pem", []string{"api-key-env=TEMPORAL_KEY", "tls-key=/k.pem"}},
		{"redis://h?auth_token=" + pw + "&client_secret=" + pw + "x", []string{"redis://h?"}},
		{"host=db user=app password=" + pw + " dbname=app", []string{"host=db", "dbname=app"}},
		{"host=db password='" + pw + " with space' dbname=app", []string{"dbname=app"}},
		{"postgres://app:" + pw + "@db:5432/app?password=" + pw + "%", []string{"postgres://"}}, // unparseable
		{"::bad::?password=" + pw, []string{"::bad::"}},
	} {
		got := dlock.Redact(tc.in)
		if strings.Contains(got, pw) || strings.Contains(strings.ToLower(got), strings.ToLower(pw)) {
			t.Errorf("Redact(%q) = %q shows the secret", tc.in, got)
		}
		for _, k := range tc.keep {
			if !strings.Contains(got, k) {
				t.Errorf("Redact(%q) = %q lost %q", tc.in, got, k)
			}
		}
	}
	for _, plain := range []string{"mem://", "mem://shared", "etcd://h:2379/?prefix=x&dial-timeout=5s", "redis://h:6379/0?waiter_ttl=10s"} {
		if got := dlock.Redact(plain); got != plain {
			t.Errorf("Redact(%q) = %q, want it unchanged", plain, got)
		}
	}
}

// TestOpenErrorHidesQuotedSecrets: a backend's error that quotes its URL,
// secret parameters and all, reaches the caller masked; the error still
// matches what it wrapped, and no error reachable by unwrapping shows the
// secret.
func TestOpenErrorHidesQuotedSecrets(t *testing.T) {
	const pw = "Qu0tedSecretValue"
	for _, raw := range []string{
		"fuzzecho://user:" + pw + "@h:1/db",
		"fuzzecho://user@h:1/db?password=" + pw,
		"fuzzecho://user@h:1/db?sslpassword=" + pw + "%2B",
		"fuzzecho://:" + pw + "%40x@h:1",
	} {
		_, err := dlock.Open(context.Background(), raw)
		if err == nil {
			t.Fatalf("Open(%q) succeeded", dlock.Redact(raw))
		}
		for e := err; e != nil; e = errors.Unwrap(e) {
			if strings.Contains(e.Error(), pw) {
				t.Errorf("Open(%q): error %q shows the secret", dlock.Redact(raw), e)
			}
		}
	}
	_, err := dlock.Open(context.Background(), "redactwrap://h/db?password="+pw)
	if !errors.Is(err, dlock.ErrUnavailable) || strings.Contains(err.Error(), pw) {
		t.Errorf("Open: %v; want ErrUnavailable without the secret", err)
	}
}

func init() {
	dlock.Register("redactwrap", func(_ context.Context, u *url.URL) (driver.Driver, error) {
		return nil, fmt.Errorf("%w: cannot reach %s", dlock.ErrUnavailable, u)
	})
}
