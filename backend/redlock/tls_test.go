package redlock_test

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/internal/testenv"
)

// redlocks:// speaks TLS to every node, with the ACL user and password of
// the URL on each, and checks each node's certificate against the CAs of
// ca= (here a bundle of the three nodes' CAs). A node whose certificate
// the client cannot verify, a wrong password and a plain-text URL with
// ca= are clear errors that do not quote the password.
func TestTLSWithACLUserLocksAndMisconfigurationIsAClearError(t *testing.T) {
	var nodes []*testenv.Redis
	var bundle []byte
	for range 3 {
		n := testenv.StartRedis(t, testenv.RedisTLS(), testenv.RedisUser("locker", "pw-of-locker", "~dlock:*", "&dlock:*", "+@all"))
		nodes = append(nodes, n)
		pem, err := os.ReadFile(n.TLS.CA)
		if err != nil {
			t.Fatal(err)
		}
		bundle = append(bundle, pem...)
	}
	caFile := filepath.Join(t.TempDir(), "cas.pem")
	if err := os.WriteFile(caFile, bundle, 0o600); err != nil {
		t.Fatal(err)
	}
	hosts := strings.Join(addrs(nodes), ",")
	ctx := testenv.Context(t, time.Minute)

	c, err := dlock.Open(ctx, "redlocks://locker:pw-of-locker@"+hosts+"?ca="+url.QueryEscape(caFile))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var last uint64
	for range 2 {
		l, err := c.Mutex("tls", dlock.WithTTL(2*time.Second)).Lock(ctx)
		if err != nil {
			t.Fatalf("Lock over TLS: %v", err)
		}
		if l.Token() <= last {
			t.Errorf("token %d, want > %d", l.Token(), last)
		}
		last = l.Token()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		url  string
		want error
		says string
	}{
		// Only the first node's CA: the two others cannot be verified.
		{"redlocks://locker:pw-of-locker@" + hosts + "?ca=" + url.QueryEscape(nodes[0].TLS.CA), dlock.ErrUnavailable, "certificate"},
		{"redlocks://locker:bad-pw@" + hosts + "?ca=" + url.QueryEscape(caFile), dlock.ErrUnavailable, "authentication failed"},
		{"redlock://locker:pw-of-locker@" + hosts + "?ca=" + url.QueryEscape(caFile), dlock.ErrInvalidOption, "redlocks://"},
	} {
		c, err := dlock.Open(ctx, tc.url)
		if err == nil {
			c.Close()
		}
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Open(%s) = %v; want %v saying %q", dlock.Redact(tc.url), err, tc.want, tc.says)
		}
		if strings.Contains(err.Error(), "pw-of-locker") || strings.Contains(err.Error(), "bad-pw") {
			t.Errorf("the error quotes the password: %v", err)
		}
	}
}
