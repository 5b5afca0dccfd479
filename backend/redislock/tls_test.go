package redislock_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/redislock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// The suite over rediss://, the server's CA given by the URL's ca=. The
// partition test's proxies relay the TLS stream as it is.
func TestTLSConformance(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.RedisTLS(), testenv.RedisPassword("tls-s3cret"))
	rawURL := func(addr string) string {
		return "rediss://:tls-s3cret@" + addr + "?ca=" + url.QueryEscape(srv.TLS.CA)
	}
	dlocktest.Run(t, dlocktest.Harness{
		Open: func(ctx context.Context, addrs []string) (driver.Driver, error) {
			addr := srv.Addr
			if addrs != nil {
				addr = addrs[0]
			}
			u, err := url.Parse(rawURL(addr))
			if err != nil {
				return nil, err
			}
			return redislock.Open(ctx, u)
		},
		Endpoints: []string{srv.Addr},
		URL:       rawURL(srv.Addr),
	})
}

// A server whose certificate the client cannot verify is a clear error
// that says so, without the password; so is a ca= file that is not one.
func TestTLSWrongCAIsClearError(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.RedisTLS(), testenv.RedisPassword("tls-s3cret"))
	other := testenv.GenerateCert(t, t.TempDir()) // a CA that did not sign the server's certificate
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, ca := range []string{other.CA, ""} { // "": the system's CAs
		u := "rediss://:tls-s3cret@" + srv.Addr
		if ca != "" {
			u += "?ca=" + url.QueryEscape(ca)
		}
		c, err := dlock.Open(ctx, u)
		if err == nil {
			c.Close()
			t.Fatalf("Open(%s) with a CA that did not sign the server's certificate succeeded", dlock.Redact(u))
		}
		if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("Open(%s) = %v, want ErrUnavailable about the certificate", dlock.Redact(u), err)
		}
		if strings.Contains(err.Error(), "tls-s3cret") {
			t.Errorf("error quotes the password: %v", err)
		}
		t.Logf("Open(%s): %v", dlock.Redact(u), err)
	}
	for _, q := range []string{"ca=" + url.QueryEscape(other.Key), "ca=" + url.QueryEscape(other.CA+".missing")} {
		c, err := dlock.Open(ctx, "rediss://:tls-s3cret@"+srv.Addr+"?"+q)
		if err == nil {
			c.Close()
		}
		if !errors.Is(err, dlock.ErrInvalidOption) || !strings.Contains(err.Error(), "ca=") || strings.Contains(err.Error(), "tls-s3cret") {
			t.Errorf("Open(?%s) = %v, want ErrInvalidOption naming ca=, without the password", q, err)
		}
	}
	// ca= on a plain-text URL would silently not be used.
	if c, err := dlock.Open(ctx, "redis://"+srv.Addr+"?ca="+url.QueryEscape(srv.TLS.CA)); !errors.Is(err, dlock.ErrInvalidOption) {
		if err == nil {
			c.Close()
		}
		t.Errorf("Open(redis://…?ca=) = %v, want ErrInvalidOption", err)
	}
}

// A Lock whose context ends during a TLS handshake (here: the first Lock
// that waits opens the pub/sub connection) returns the context's error, as
// any other cancelled Lock does, not ErrUnavailable.
func TestTLSCancelledDuringHandshakeIsContextError(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.RedisTLS())
	u := "rediss://" + srv.Addr + "?ca=" + url.QueryEscape(srv.TLS.CA)
	holder := open(t, u)
	ctx := testenv.Context(t, time.Minute)
	l, err := holder.Mutex("handshake").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	for i := range 20 {
		c := open(t, u)
		wctx, cancel := context.WithTimeout(ctx, time.Duration(1+i%5)*time.Millisecond)
		_, err := c.Mutex("handshake").Lock(wctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock with a %v deadline: %v, want context.DeadlineExceeded", time.Duration(1+i%5)*time.Millisecond, err)
		}
		c.Close()
	}
}
