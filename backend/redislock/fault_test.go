package redislock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock"
	_ "github.com/dlock/dlock/backend/redislock"
	"github.com/dlock/dlock/internal/testenv"
)

// A Redis without persistence forgets its fence counters when it restarts:
// tokens start again at 1. The package documentation says so, and that is
// why Capabilities().DurableFencing is false unless declared.
func TestRestartWithoutPersistenceRestartsTokens(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := open(t, "redis://"+srv.Addr)
	if c.Capabilities().DurableFencing {
		t.Fatal("DurableFencing claimed by default")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last uint64
	for range 3 {
		l, err := c.Mutex("k").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		last = l.Token()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	srv.Restart()
	l, err := c.Mutex("k").Lock(ctx)
	if err != nil {
		t.Fatalf("Lock after restart: %v", err)
	}
	defer l.Unlock(ctx)
	if l.Token() != 1 {
		t.Errorf("token after a restart without persistence = %d (before: %d); the documented behaviour is a restart at 1", l.Token(), last)
	}
}

// The environment of a fair waiter run as a child process, so that it can
// be killed for real.
const envFairWaiter = "REDISLOCK_TEST_FAIR_WAITER_URL"

func init() {
	if u := os.Getenv(envFairWaiter); u != "" {
		os.Exit(fairWaiter(u))
	}
}

func fairWaiter(u string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := dlock.Open(ctx, u)
	if err != nil {
		fmt.Println("ERROR", err)
		return 2
	}
	fmt.Println("WAITING")
	l, err := c.Mutex("fair/killed", dlock.WithFair()).Lock(ctx)
	if err != nil {
		fmt.Println("ERROR", err)
		return 2
	}
	fmt.Println("ACQUIRED", l.Token())
	return 0
}

func waitWaiters(t *testing.T, c *dlock.Client, name string, n int) {
	t.Helper()
	ctx := context.Background()
	testenv.Eventually(t, 30*time.Second, fmt.Sprintf("%d waiters on %q", n, name), func() error {
		in, err := c.Inspect(ctx, name)
		if err == nil && len(in.Waiters) != n {
			err = fmt.Errorf("%d waiters", len(in.Waiters))
		}
		return err
	})
}

// procChannels counts the subscribed process channels of fair waiters'
// drivers, to see when the server has noticed a process's death.
func procChannels(t *testing.T, addr string) int {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	chans, err := rdb.PubSubChannels(context.Background(), "dlock:proc:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(chans)
}

// A fair waiter that is killed is skipped by the next release: its process
// no longer receives on its channel. The waiter TTL and the lease TTL are
// both far longer than the waiting waiter's context, so the grant cannot
// have come from either expiring.
func TestKilledFairWaiterDoesNotBlockQueue(t *testing.T) {
	srv := testenv.StartRedis(t)
	u := "redis://" + srv.Addr + "?waiter_ttl=1m"
	c := open(t, u, dlock.WithFair(), dlock.WithTTL(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const name = "fair/killed"
	holder, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), envFairWaiter+"="+u)
	out, _ := child.StdoutPipe()
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "WAITING" {
		t.Fatalf("waiter process: %q", lines.Text())
	}
	waitWaiters(t, c, name, 1)

	got := make(chan error, 1)
	var next *dlock.Lease
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second) // < waiter TTL and lease TTL
		defer cancel()
		var err error
		next, err = c.Mutex(name).Lock(wctx)
		got <- err
	}()
	waitWaiters(t, c, name, 2) // behind the child

	procs := procChannels(t, srv.Addr)
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	waitProcChannels(t, srv.Addr, procs-1) // the server noticed the waiter process's death
	released := time.Now()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter behind a killed waiter: %v", err)
	}
	t.Logf("granted %v after the release, past a killed waiter", time.Since(released).Round(time.Millisecond))
	defer next.Unlock(ctx)
	if next.Token() <= holder.Token() {
		t.Errorf("token %d, want > %d", next.Token(), holder.Token())
	}
	in, err := c.Inspect(ctx, name)
	if err != nil || len(in.Waiters) != 0 {
		t.Errorf("after the grant: waiters %v, %v; want none", in.Waiters, err)
	}
}

// A waiter that is cut off while its connection stays open (here: a proxy
// that holds its traffic back) cannot be told apart from a live one: a
// release hands it the lock, which it cannot use. The package documents
// that this holds up the queue for at most one lease TTL, after which the
// lock expires and the next waiter is granted it.
func TestCutOffWaiterIsHandedLockThatExpiresToNextWaiter(t *testing.T) {
	srv := testenv.StartRedis(t)
	proxy := testenv.NewProxy(t, srv.Addr)
	const ttl = time.Second
	c := open(t, "redis://"+srv.Addr, dlock.WithTTL(ttl))
	cutOff := open(t, "redis://"+proxy.Addr(), dlock.WithTTL(ttl))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const name = "queue/cut-off"
	holder, err := c.Mutex(name).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	cutOffDone := make(chan *dlock.Lease, 1)
	go func() {
		l, _ := cutOff.Mutex(name).Lock(cctx)
		cutOffDone <- l
	}()
	waitWaiters(t, c, name, 1)
	got := make(chan error, 1)
	var next *dlock.Lease
	go func() {
		var err error
		next, err = c.Mutex(name).Lock(ctx)
		got <- err
	}()
	waitWaiters(t, c, name, 2)

	proxy.Block()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter behind a cut-off waiter: %v", err)
	}
	defer next.Unlock(ctx)
	// The cut-off waiter was handed a token in between.
	if next.Token() < holder.Token()+2 {
		t.Errorf("token %d after %d: the lock was not handed to the cut-off waiter first", next.Token(), holder.Token())
	}
	proxy.Unblock()
	ccancel()
	if l := <-cutOffDone; l != nil {
		select {
		case <-l.Done():
		case <-time.After(10 * time.Second):
			t.Errorf("the cut-off waiter was given a lease (token %d) that it still believes it holds", l.Token())
		}
	}
}

// A Lock or TryLock whose ctx ends while its first attempt — the one that
// takes a free lock without queueing — is on the wire returns ctx's error
// and leaves the lock free: the attempt runs to its end, and a grant that
// comes back after the cancellation is released at once. The proxy holds
// the attempt back until after the cancellation, so the grant always
// arrives late.
func TestCancelDuringFirstAttemptLeavesLockFree(t *testing.T) {
	srv := testenv.StartRedis(t)
	proxy := testenv.NewProxy(t, srv.Addr)
	direct := open(t, "redis://"+srv.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name string
		opts []dlock.Option
		try  bool
	}{
		{"Lock", nil, false},
		{"LockFair", []dlock.Option{dlock.WithFair()}, false},
		{"TryLock", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := open(t, "redis://"+proxy.Addr(), tc.opts...)
			name := "cancel/first/" + tc.name
			// A lock and unlock first, so that the client's connection is
			// open and the scripts are loaded: the attempt is one request.
			l, err := c.Mutex(name).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			proxy.Block()
			actx, acancel := context.WithCancel(ctx)
			got := make(chan error, 1)
			go func() {
				m := c.Mutex(name)
				var l *dlock.Lease
				var err error
				if tc.try {
					l, err = m.TryLock(actx)
				} else {
					l, err = m.Lock(actx)
				}
				if l != nil {
					err = fmt.Errorf("granted token %d after the cancellation (err %v)", l.Token(), err)
					_ = l.Unlock(ctx)
				}
				got <- err
			}()
			time.Sleep(200 * time.Millisecond) // the attempt waits in the proxy
			acancel()
			time.Sleep(50 * time.Millisecond)
			proxy.Unblock()
			if err := <-got; !errors.Is(err, context.Canceled) {
				t.Fatalf("%s cancelled during its first attempt: %v, want context.Canceled", tc.name, err)
			}
			// The attempt did take the lock on the server (its token was
			// used); the release that followed must have freed it.
			in, err := direct.Inspect(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if in.Held || len(in.Waiters) > 0 {
				t.Fatalf("after the cancelled %s: held=%v token=%d waiters=%d, want free", tc.name, in.Held, in.Token, len(in.Waiters))
			}
			next, err := direct.Mutex(name).TryLock(ctx)
			if err != nil {
				t.Fatalf("TryLock after the cancelled %s: %v", tc.name, err)
			}
			if next.Token() <= l.Token()+1 {
				t.Errorf("token %d after %d: the cancelled attempt did not reach the server", next.Token(), l.Token())
			}
			if err := next.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
