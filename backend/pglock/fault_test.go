package pglock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/pglock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// TestServerCrashWhileLocksAreHeld crashes the server (SIGKILL) while one
// lock is held and renewed and another's lease is running out with no one
// renewing it. After recovery: the due lease is granted anew with a token
// above every token before the crash; the renewed lock is never granted to
// anyone while its holder still believes it holds it; tokens keep
// increasing.
func TestServerCrashWhileLocksAreHeld(t *testing.T) {
	srv := testenv.StartPostgres(t)
	u := srv.URL(srv.Addr, "")
	ctx := testenv.Context(t, 120*time.Second)

	holder := newClient(t, u)
	held, err := holder.Mutex("held", dlock.WithTTL(5*time.Second)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A lease that nobody renews: its holder "crashed" just before the server.
	raw := newDriver(t, u)
	due, err := raw.Acquire(ctx, driver.Request{Name: "due", Owner: "gone", TTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	maxBefore := max(held.Token(), due.Token)
	// A session-lock driver whose released connection waits for reuse.
	sessions := newClient(t, u, pglock.WithSessionLocks())
	if l, err := sessions.Mutex("session").TryLock(ctx); err != nil {
		t.Fatal(err)
	} else if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	srv.Restart(t)

	// The idle session connection died with the server: a new one is used.
	if l, err := sessions.Mutex("session").TryLock(ctx); err != nil {
		t.Errorf("session lock after the restart: %v", err)
	} else if err := l.Unlock(ctx); err != nil {
		t.Error(err)
	}

	other := newClient(t, u)
	// The due lease is granted anew, once the server is back.
	var got *dlock.Lease
	testenv.Eventually(t, 60*time.Second, "the due lease to be granted after the restart", func() (err error) {
		got, err = other.Mutex("due").Lock(testenv.Context(t, 30*time.Second))
		return err
	})
	if got.Token() <= maxBefore {
		t.Errorf("token after the crash %d, want above %d", got.Token(), maxBefore)
	}
	// The held lock: either its holder kept it (renewals resumed), or it
	// saw the loss before anyone else was granted it.
	for i := 0; i < 20; i++ {
		l, err := other.Mutex("held").TryLock(ctx)
		if errors.Is(err, dlock.ErrNotAcquired) {
			if held.Err() != nil {
				t.Fatalf("the holder lost its lease (%v) but the lock is still held", held.Err())
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-held.Done():
		default:
			t.Fatalf("granted (token %d) while the holder (token %d) still believed it held the lock", l.Token(), held.Token())
		}
		if l.Token() <= maxBefore {
			t.Errorf("token after the crash %d, want above %d", l.Token(), maxBefore)
		}
		t.Logf("the holder lost its lease across the restart: %v", held.Err())
		return
	}
	in, err := other.Inspect(ctx, "held")
	if err != nil || !in.Held || in.Token != held.Token() {
		t.Errorf("Inspect after restart: %+v, %v; want held with token %d", in, err, held.Token())
	}
	if err := held.Unlock(ctx); err != nil {
		t.Errorf("Unlock after the restart: %v", err)
	}
	l, err := other.Mutex("held").TryLock(ctx)
	if err != nil || l.Token() <= got.Token() {
		t.Fatalf("TryLock after release: %v, token %v; want a token above %d", err, l, got.Token())
	}
}

// TestCutConnectionSeesLossBeforeOthersAcquire closes the holder's
// connections and keeps it from making new ones: its Done closes before
// another client is granted the lock. With session locks the server frees
// the lock as soon as the connection ends, and the holder sees the loss by
// watching its connection (at its next renewal at the latest).
func TestCutConnectionSeesLossBeforeOthersAcquire(t *testing.T) {
	srv := testenv.StartPostgres(t)
	for _, mode := range []string{"lease", "session"} {
		t.Run(mode, func(t *testing.T) {
			var opts []pglock.Option
			if mode == "session" {
				opts = append(opts, pglock.WithSessionLocks())
			}
			proxy := testenv.NewProxy(t, srv.Addr)
			ctx := testenv.Context(t, 120*time.Second)
			ttl := 3 * time.Second
			holder := newClient(t, srv.URL(proxy.Addr(), ""), opts...)
			l, err := holder.Mutex("cut", dlock.WithTTL(ttl)).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(ttl / 2) // past one renewal
			proxy.Block()
			proxy.Cut()
			cut := time.Now()
			defer proxy.Unblock()

			other := newClient(t, srv.URL(srv.Addr, ""), opts...)
			if mode == "session" {
				// The server ended the session: the lock is free at once,
				// and the holder learns of it at its next renewal.
				select {
				case <-l.Done():
				case <-ctx.Done():
					t.Fatal("the holder never saw its session end")
				}
				t.Logf("Done closed %v after the cut (TTL %v)", time.Since(cut).Round(time.Millisecond), ttl)
			}
			l2, err := other.Mutex("cut", dlock.WithTTL(ttl)).Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-l.Done():
			default:
				t.Fatalf("another client was granted the lock %v after the cut while the holder still believed it held it", time.Since(cut))
			}
			if !errors.Is(l.Err(), dlock.ErrLeaseLost) {
				t.Errorf("Err = %v, want ErrLeaseLost", l.Err())
			}
			if l2.Token() <= l.Token() {
				t.Errorf("token %d after the cut, want above %d", l2.Token(), l.Token())
			}
			if err := l2.Unlock(ctx); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestKilledSessionHolderFreesAtOnce: a process holding a session lock with
// a one-minute TTL is killed with SIGKILL; the lock is granted to another
// client well before that TTL could have run out, because the server ends
// the session when the connection drops.
func TestKilledSessionHolderFreesAtOnce(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	u := srv.URL(srv.Addr, "mode=session")
	const ttl = time.Minute
	cmd, tok := dlocktest.StartHolder(t, u, "job", ttl)
	c := newClient(t, srv.URL(srv.Addr, ""), pglock.WithSessionLocks())
	if _, err := c.Mutex("job").TryLock(testenv.Context(t, 30*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock while the child holds the lock: %v, want ErrNotAcquired", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	l, err := c.Mutex("job").Lock(testenv.Context(t, ttl/2))
	if err != nil {
		t.Fatalf("the killed holder's session lock was not freed within half its TTL: %v", err)
	}
	t.Logf("freed %v after SIGKILL (TTL %v)", time.Since(killed).Round(time.Millisecond), ttl)
	if l.Token() <= tok {
		t.Errorf("token %d after the crash, want above %d", l.Token(), tok)
	}
	if err := l.Unlock(testenv.Context(t, 30*time.Second)); err != nil {
		t.Error(err)
	}
}

// TestFrozenServerIsUnavailableNotAHang freezes the server (SIGSTOP, all
// its processes) while locks are held and waited for, in lease and in
// session mode. With the caller's context live and an operation timeout of
// one second, every call — TryLock, Lock, a Lock already waiting (in the
// server's lock queue, for a session lock), Inspect, Unlock, and the
// driver's Acquire — returns an error wrapping ErrUnavailable (not a bare
// context.DeadlineExceeded, and not a hang until the caller's context
// ends). Once the server thaws, locking works again.
func TestFrozenServerIsUnavailableNotAHang(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	ctx := testenv.Context(t, 120*time.Second)
	type client struct {
		mode    string
		c       *dlock.Client
		l       *dlock.Lease
		waiting chan error // the outcome of a Lock of the held lock
	}
	var clients []client
	for _, mode := range []string{"lease", "session"} {
		d, err := openDriver(ctx, srv.URL(srv.Addr, "op_timeout=1s&table=frozen_"+mode+"&mode="+mode))
		if err != nil {
			t.Fatal(err)
		}
		// No renewal falls due during the test: one would time out too,
		// and end a session lock's connection (and with it the lock).
		c := dlock.New(d, dlock.WithTTL(10*time.Minute))
		t.Cleanup(func() { c.Close() })
		l, err := c.Mutex("held").TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		waiting := make(chan error, 1)
		go func() {
			_, err := c.Mutex("held").Lock(ctx)
			waiting <- err
		}()
		clients = append(clients, client{mode, c, l, waiting})
	}
	// Let the session lock's waiter queue on the server.
	for range 200 {
		if strings.TrimSpace(srv.Exec(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`)) != "0" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	srv.Pause()
	defer srv.Resume()
	for _, x := range clients {
		_, err := x.c.Mutex("other").TryLock(ctx)
		testenv.WantUnavailable(t, ctx, x.mode+": TryLock", err)
		_, err = x.c.Mutex("other").Lock(ctx)
		testenv.WantUnavailable(t, ctx, x.mode+": Lock", err)
		_, err = x.c.Inspect(ctx, "held")
		testenv.WantUnavailable(t, ctx, x.mode+": Inspect", err)
		_, err = x.c.Driver().Acquire(ctx, driver.Request{Name: "other", Owner: "o", TTL: time.Minute})
		testenv.WantUnavailable(t, ctx, x.mode+": driver Acquire", err)
		testenv.WantUnavailable(t, ctx, x.mode+": Unlock", x.l.Unlock(ctx))
		testenv.WantUnavailable(t, ctx, x.mode+": a waiting Lock", <-x.waiting)
	}
	srv.Resume()
	for _, x := range clients {
		var err error
		for range 50 { // the pool replaces the connections the timeouts closed
			var l *dlock.Lease
			if l, err = x.c.Mutex("after").TryLock(ctx); err == nil {
				_ = l.Unlock(ctx)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("%s: TryLock after the server thawed: %v", x.mode, err)
		}
	}
}
