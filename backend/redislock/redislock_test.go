package redislock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/redislock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

func TestMain(m *testing.M) { dlocktest.Main(m) }

// harness runs the conformance suite against srv, each driver with its own
// client, as a separate process would have.
func harness(srv *testenv.Redis, fair bool, opts ...redislock.Option) dlocktest.Harness {
	return dlocktest.Harness{
		Open: func(ctx context.Context, addrs []string) (driver.Driver, error) {
			addr := srv.Addr
			if addrs != nil {
				addr = addrs[0]
			}
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			if err := rdb.Ping(ctx).Err(); err != nil {
				rdb.Close()
				return nil, err
			}
			d, err := redislock.New(rdb, opts...)
			if err != nil {
				rdb.Close()
				return nil, err
			}
			return closing{d, rdb}, nil
		},
		Endpoints: []string{srv.Addr},
		URL:       "redis://" + srv.Addr,
		Fair:      fair,
	}
}

// closing closes the client it was given along with the driver.
type closing struct {
	*redislock.Driver
	rdb *redis.Client
}

func (c closing) Close() error { c.Driver.Close(); return c.rdb.Close() }

func TestConformance(t *testing.T) {
	dlocktest.Run(t, harness(testenv.StartRedis(t), false))
}

func TestConformanceFair(t *testing.T) {
	dlocktest.Run(t, harness(testenv.StartRedis(t), true, redislock.WithWaiterTTL(600*time.Millisecond)))
}

// As on Redis Cluster, where releases cannot hand the lock over.
func TestConformanceFairWithoutHandoff(t *testing.T) {
	dlocktest.Run(t, harness(testenv.StartRedis(t), true, redislock.WithWaiterTTL(600*time.Millisecond), redislock.WithoutHandoff()))
}

// With appendonly and appendfsync always, a declared durable fencing holds
// across a restart of the server; the suite checks it with Restart.
func TestConformanceDurableFencing(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.RedisAOF())
	h := harness(srv, false, redislock.WithDurableFencing())
	h.URL += "?durable_fencing=true"
	h.Restart = func(testing.TB) { srv.Restart() }
	dlocktest.Run(t, h)
}

// compat=setnx keeps dlock's contract among dlock's clients, with the
// waiters woken by keyspace events and, without them, by polling.
func TestConformanceSetNX(t *testing.T) {
	h := harness(testenv.StartRedis(t, testenv.RedisArgs("--notify-keyspace-events", "Kgx")), false, redislock.WithCompat("setnx"), redislock.WithKeyspaceEvents())
	h.URL += "?compat=setnx"
	dlocktest.Run(t, h)
}

func TestConformanceSetNXPolling(t *testing.T) {
	h := harness(testenv.StartRedis(t), false, redislock.WithCompat("setnx"))
	h.URL += "?compat=setnx"
	dlocktest.Run(t, h)
}

func open(t *testing.T, rawURL string, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := dlock.Open(ctx, rawURL, opts...)
	if err != nil {
		t.Fatalf("Open(%s): %v", dlock.Redact(rawURL), err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestPasswordOrACLUserLocksAndWrongCredentialsAreRefused: the server's
// password and an ACL user each open a client that locks; a wrong
// password, or none, is ErrUnavailable without the password in it.
func TestPasswordOrACLUserLocksAndWrongCredentialsAreRefused(t *testing.T) {
	srv := testenv.StartRedis(t, testenv.RedisPassword("s3cret"),
		testenv.RedisUser("locker", "pw-of-locker", "~dlock:*", "&dlock:*", "+@all"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, u := range []string{"redis://:s3cret@" + srv.Addr + "/0", "redis://locker:pw-of-locker@" + srv.Addr} {
		c := open(t, u)
		l, err := c.Mutex("acl/" + u).Lock(ctx)
		if err != nil {
			t.Fatalf("%s: Lock: %v", dlock.Redact(u), err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatalf("%s: Unlock: %v", dlock.Redact(u), err)
		}
	}
	for _, u := range []string{"redis://:bad-pw@" + srv.Addr, "redis://locker:bad-pw@" + srv.Addr, "redis://" + srv.Addr} {
		_, err := dlock.Open(ctx, u)
		if !errors.Is(err, dlock.ErrUnavailable) {
			t.Fatalf("Open(%s) = %v, want ErrUnavailable", dlock.Redact(u), err)
		}
		if strings.Contains(err.Error(), "bad-pw") {
			t.Errorf("error quotes the password: %v", err)
		}
		t.Logf("Open(%s): %v", dlock.Redact(u), err)
	}
}

func TestOpenRejectsUnfoundedOrBadOptions(t *testing.T) {
	srv := testenv.StartRedis(t) // no persistence
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, q := range []string{"durable_fencing=true", "durable_fencing=maybe", "waiter_ttl=soon", "waiter_ttl=1ms", "prefix=a{b"} {
		c, err := dlock.Open(ctx, "redis://"+srv.Addr+"?"+q)
		if err == nil {
			c.Close()
		}
		if !errors.Is(err, dlock.ErrInvalidOption) {
			t.Errorf("Open(?%s) = %v, want ErrInvalidOption", q, err)
			continue
		}
		t.Logf("?%s: %v", q, err)
	}
}

// newDriver returns a driver over rdb, failing tb if New refuses the
// options.
func newDriver(tb testing.TB, rdb redis.UniversalClient, opts ...redislock.Option) *redislock.Driver {
	tb.Helper()
	d, err := redislock.New(rdb, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}
