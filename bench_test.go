package dlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/memlock"
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
