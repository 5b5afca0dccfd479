package dlock_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
)

// A backend that quotes its whole URL, password included, in its error:
// Open must still not let the password out.
func init() {
	dlock.Register("fuzzecho", func(_ context.Context, u *url.URL) (driver.Driver, error) {
		return nil, errors.New("cannot reach " + u.String() + " (" + u.User.String() + ")")
	})
}

// secret returns the password url.Parse finds in raw, if it is one whose
// absence from a redacted string can be checked: long enough, not made of
// the mask's x's, and appearing nowhere else in raw.
func secret(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return "", false
	}
	pw, ok := u.User.Password()
	if !ok || len(pw) < 4 || strings.Trim(pw, "x") == "" || strings.Count(raw, pw) != 1 {
		return "", false
	}
	return pw, true
}

// FuzzRedact: whatever the URL, Redact never panics, and a password the URL
// parser finds never appears in its output.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{
		"redis://user:hunter22@127.0.0.1:6379/0",
		"mysql://root:s3cr3t!@db:3306/app",
		"etcd://u:p%40ss%3Aword@h1:2379,h2:2379/?prefix=x",
		"postgres://app:pw@@host/db",
		"redis://:onlypass@host",
		"zk://h:2181/chroot",
		"::not a url::",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		out := dlock.Redact(raw)
		if pw, ok := secret(raw); ok && strings.Contains(out, pw) {
			t.Fatalf("Redact(%q) = %q shows the password %q", raw, out, pw)
		}
	})
}

// FuzzOpenNeverLeaksPassword: Open of any string returns (never panics),
// and neither its error nor a backend's error that quotes the URL shows the
// password.
func FuzzOpenNeverLeaksPassword(f *testing.F) {
	for _, s := range []string{
		"fuzzecho://user:hunter22@127.0.0.1:6379/0",
		"fuzzecho://:p%40ssw0rd@host",
		"nosuch://user:hunter22@host",
		"user:hunter22@host",
		"fuzzecho://u:pw:with:colons@host",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := dlock.Open(context.Background(), raw)
		if err == nil {
			c.Close()
			return
		}
		pw, ok := secret(raw)
		if !ok {
			return
		}
		if strings.Contains(err.Error(), pw) {
			t.Fatalf("Open(%q): error %q shows the password %q", raw, err, pw)
		}
	})
}
