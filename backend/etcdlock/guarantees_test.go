package etcdlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/etcdlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// failedExtends counts the renewals through a driver that failed.
type failedExtends struct {
	driver.Driver
	n atomic.Int32
}

func (f *failedExtends) Extend(ctx context.Context, h driver.Held, ttl time.Duration) error {
	err := f.Driver.Extend(ctx, h, ttl)
	if err != nil {
		f.n.Add(1)
	}
	return err
}

// TestServerRestartWithinTTLKeepsTheLock: the package doc's "Server
// restart" guarantee. etcd keeps leases in its database and gives each a
// full TTL again once a leader is elected, so a holder whose server is
// killed and started again within its TTL keeps its lock: its lease is
// renewed after the restart, nobody else is granted the lock, and Inspect
// shows the same token. The server stays down until a renewal has failed,
// so that the driver's handling of an unreachable server is part of it.
func TestServerRestartWithinTTLKeepsTheLock(t *testing.T) {
	srv := startServer(t)
	ctx := testContext(t)
	const ttl = 15 * time.Second // outlasts a failed renewal and the restart
	d, err := etcdlock.New(newClient(t, srv.Endpoints()))
	if err != nil {
		t.Fatal(err)
	}
	fd := &failedExtends{Driver: d}
	holder := dlock.New(fd, dlock.WithTTL(ttl))
	t.Cleanup(func() { _ = holder.Close() })
	l, err := holder.Mutex("restart/held").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	killed := time.Now()
	testenv.Eventually(t, ttl, "a renewal to fail while the server is down", func() error {
		if fd.n.Load() == 0 {
			return errors.New("no failed renewal yet")
		}
		return nil
	})
	t.Logf("first failed renewal %v after the kill", time.Since(killed).Round(time.Millisecond))
	if err := testenv.StartEtcdAgain(srv); err != nil {
		t.Fatal(err)
	}
	// A renewal confirmed after the restart moves the lease's deadline.
	restarted := time.Now()
	testenv.Eventually(t, ttl, "a renewal confirmed after the restart", func() error {
		select {
		case <-l.Done():
			t.Fatalf("the holder lost its lock across a restart within its TTL: %v", l.Err())
		default:
		}
		if !l.Expires().After(restarted.Add(ttl / 2)) {
			return errors.New("no renewal since the restart")
		}
		return nil
	})
	other := newLocker(t, srv.Endpoints())
	if _, err := other.Mutex("restart/held").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock by another client after the restart: got %v, want ErrNotAcquired", err)
	}
	in, err := other.Inspect(ctx, "restart/held")
	if err != nil {
		t.Fatal(err)
	}
	if !in.Held || in.Token != l.Token() {
		t.Fatalf("Inspect after the restart: held=%v token=%d, want held with token %d", in.Held, in.Token, l.Token())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after the restart: %v", err)
	}
}
