package etcdlock_test

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/etcdlock"
)

func TestParseURL(t *testing.T) {
	for _, c := range []struct {
		url  string
		want etcdlock.Config
		tls  bool
	}{
		{"etcd://127.0.0.1:2379", etcdlock.Config{Endpoints: []string{"127.0.0.1:2379"}, Prefix: "dlock/", DialTimeout: 5 * time.Second}, false},
		{"etcd://h1:1,h2:2,h3:3/", etcdlock.Config{Endpoints: []string{"h1:1", "h2:2", "h3:3"}, Prefix: "dlock/", DialTimeout: 5 * time.Second}, false},
		{"etcd://h1,h2", etcdlock.Config{Endpoints: []string{"h1:2379", "h2:2379"}, Prefix: "dlock/", DialTimeout: 5 * time.Second}, false},
		{"etcd://[::1]:2380", etcdlock.Config{Endpoints: []string{"[::1]:2380"}, Prefix: "dlock/", DialTimeout: 5 * time.Second}, false},
		{"etcd://u:p%40ss@h:1?prefix=app/locks/&dial-timeout=250ms", etcdlock.Config{Endpoints: []string{"h:1"}, Prefix: "app/locks/", Username: "u", Password: "p@ss", DialTimeout: 250 * time.Millisecond}, false},
		{"etcd://h:1?prefix=", etcdlock.Config{Endpoints: []string{"h:1"}, Prefix: "", DialTimeout: 5 * time.Second}, false},
		{"etcds://h:1", etcdlock.Config{Endpoints: []string{"h:1"}, Prefix: "dlock/", DialTimeout: 5 * time.Second}, true},
		{"etcd://h:1?tls=1&server-name=etcd.example", etcdlock.Config{Endpoints: []string{"h:1"}, Prefix: "dlock/", DialTimeout: 5 * time.Second}, true},
		{"etcd://h:1?compat=etcdctl", etcdlock.Config{Endpoints: []string{"h:1"}, Prefix: "dlock/", Compat: "etcdctl", DialTimeout: 5 * time.Second}, false},
	} {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		got, err := etcdlock.ParseURL(u)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", c.url, err)
			continue
		}
		if (got.TLS != nil) != c.tls {
			t.Errorf("ParseURL(%q): TLS = %v, want %v", c.url, got.TLS != nil, c.tls)
		}
		got.TLS = nil
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseURL(%q) = %+v, want %+v", c.url, got, c.want)
		}
	}
}

func TestParseURLRejectsBadInputWithoutPassword(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.pem")
	notPEM := filepath.Join(t.TempDir(), "bad.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ url, says string }{
		{"etcd://u:hunter2@h:1/some/path", "path"},
		{"etcd://u:hunter2@h:1?colour=blue", "colour"},
		{"etcd://u:hunter2@h:1?dial-timeout=soon", "dial-timeout"},
		{"etcd://u:hunter2@h:1?dial-timeout=-1s", "dial-timeout"},
		{"etcd://u:hunter2@h:1?tls=maybe", "tls"},
		{"etcd://u:hunter2@h:1?cacert=" + missing, "ca="},
		{"etcd://u:hunter2@h:1?ca=" + notPEM, "ca="},
		{"etcd://u:hunter2@h:1?cert=" + notPEM, "cert and key"},
		{"etcd://u:hunter2@h:1?cert=" + notPEM + "&key=" + notPEM, "cert="},
		{"etcd://u:hunter2@h:1,,h:2", "empty host"},
		{"etcd://:hunter2@h:1", "user name"},
		{"etcd://u:hunter2@", "no host"},
		{"redis://u:hunter2@h:1", "scheme"},
		{"etcd://u:hunter2@h:1?compat=kazoo", `compat="kazoo": want one of etcdctl`},
		{"etcd://u:hunter2@h:1?compat=etcdctl&prefix=app/", "prefix does not apply with compat=etcdctl"},
	} {
		u, err := url.Parse(c.url)
		if err != nil {
			t.Fatal(err)
		}
		_, err = etcdlock.ParseURL(u)
		if err == nil {
			t.Errorf("ParseURL(%q) accepted it", c.url)
			continue
		}
		if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("ParseURL(%q) = %v; want ErrInvalidOption naming %q", c.url, err, c.says)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("ParseURL(%q) error shows the password: %v", c.url, err)
		}
	}
}

func TestWithCompatTakesOnlyKnownLayouts(t *testing.T) {
	cli := newClient(t, []string{"127.0.0.1:1"}) // not dialled
	if _, err := etcdlock.New(cli, etcdlock.WithCompat("etcdctl")); err != nil {
		t.Errorf("WithCompat(etcdctl): %v", err)
	}
	_, err := etcdlock.New(cli, etcdlock.WithCompat("kazoo"))
	if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "want one of etcdctl") {
		t.Errorf("WithCompat(kazoo): %v; want ErrInvalidOption naming etcdctl", err)
	}
}

func TestOpenUnreachableIsUnavailableWithoutPassword(t *testing.T) {
	ctx := testContext(t)
	// A port nobody listens on: a free one, closed again.
	e := startServer(t)
	addr := e.Endpoints()[0]
	e.Stop()
	_, err := dlock.Open(ctx, "etcd://user:hunter2@"+addr+"?dial-timeout=300ms")
	if !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatalf("Open of a stopped server: %v, want ErrUnavailable", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error shows the password: %v", err)
	}
}

// TestAuthUserLocksAndWrongOrNoPasswordIsRefused enables etcd's authentication: the URL's user and
// password open a working client; a wrong password is refused, and no error
// shows it.
func TestAuthUserLocksAndWrongOrNoPasswordIsRefused(t *testing.T) {
	srv := startServer(t)
	ctx := testContext(t)
	cli := newClient(t, srv.Endpoints())
	const pw = "s3cret-Pa55"
	for _, step := range []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "root", pw); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("enabling auth: %v", err)
		}
	}
	addr := srv.Endpoints()[0]

	// Authenticating runs bcrypt on the server: slow under the race detector.
	c, err := dlock.Open(ctx, "etcd://root:"+pw+"@"+addr+"?dial-timeout=45s")
	if err != nil {
		t.Fatalf("Open with the right password: %v", err)
	}
	defer c.Close()
	l, err := c.Mutex("auth").Lock(ctx)
	if err != nil {
		t.Fatalf("Lock with auth: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	_, err = dlock.Open(ctx, "etcd://root:wrong-"+pw+"@"+addr+"?dial-timeout=2s")
	if err == nil {
		t.Fatal("Open with a wrong password succeeded")
	}
	if strings.Contains(err.Error(), pw) {
		t.Errorf("error shows the password: %v", err)
	}
	if c2, err := dlock.Open(ctx, "etcd://"+addr+"?dial-timeout=2s"); err == nil {
		defer c2.Close()
		if _, err := c2.Mutex("auth").TryLock(ctx); err == nil {
			t.Error("an unauthenticated client took a lock on a server with auth enabled")
		}
	}
}
