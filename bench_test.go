package dlock_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/memlock"
	"github.com/dlock/dlock/internal/testenv"
)

// BenchmarkUncontendedLockUnlock is the portable layer's own cost of a
// Lock and Unlock, on the in-process backend: without hooks, the path
// every program without telemetry takes, and with hooks that do nothing.
func BenchmarkUncontendedLockUnlock(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts []dlock.Option
	}{
		{"NoHooks", nil},
		{"AttemptHooks", []dlock.Option{dlock.WithHooks(dlock.Hooks{Attempt: func(context.Context, dlock.LockAttempt) *dlock.Hooks {
			return &dlock.Hooks{Acquired: func(string, uint64, time.Duration) {}, Released: func(string, uint64, time.Duration) {}}
		}})}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := dlock.New(memlock.New(memlock.NewServer()), bc.opts...)
			defer c.Close()
			m := c.Mutex("bench")
			ctx := context.Background()
			for b.Loop() {
				l, err := m.Lock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkHeldLeases is the client's heap and goroutines per held lease on
// the in-process backend (whose own state per lock is included): what
// holding many locks at once costs beyond the backend's share.
func BenchmarkHeldLeases(b *testing.B) {
	const n = 10000
	ctx := context.Background()
	for b.Loop() {
		c := dlock.New(memlock.New(memlock.NewServer()))
		heap0, g0 := testenv.LiveHeap()
		held := make([]*dlock.Lease, 0, n)
		for i := range n {
			l, err := c.Mutex(fmt.Sprintf("held/%d", i)).Lock(ctx)
			if err != nil {
				b.Fatal(err)
			}
			held = append(held, l)
		}
		heap1, g1 := testenv.LiveHeap()
		b.ReportMetric(float64(heap1-heap0)/n, "B/held-lease")
		b.ReportMetric(float64(g1-g0)/n, "goroutines/held-lease")
		runtime.KeepAlive(held)
		c.Close()
	}
}
