package verify

import (
	"context"
	"errors"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dlock/dlock"
)

// FuzzNameMapping checks each backend's mapping of lock names onto its key
// space (escaping, hashing) through the public API: two different names
// are two independent locks, and Inspect reports a held lock under exactly
// the name it was taken with. It runs against the single-server entries of
// the verification table (etcd, redis).
func FuzzNameMapping(f *testing.F) {
	f.Add("orders/42", "orders%2F42")
	f.Add("a/b", "a\x00b")
	f.Add("名前", "名前/")
	f.Add("x", "x/")
	f.Add("\"quoted\" {tag}", "'quoted' {tag}")
	f.Add("trailing/", "trailing//")
	type target struct {
		name string
		c    *dlock.Client
	}
	var targets []target
	for _, be := range backends {
		if be.name != "etcd" && be.name != "redis" {
			continue
		}
		dep := be.start(f)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c, err := dlock.Open(ctx, dep.URL(dep.Endpoints), dlock.WithTTL(5*time.Second))
		cancel()
		if err != nil {
			f.Fatalf("%s: %v", be.name, err)
		}
		f.Cleanup(func() { c.Close() })
		targets = append(targets, target{be.name, c})
	}
	valid := func(s string) bool { return len(s) >= 1 && len(s) <= dlock.MaxNameLen && utf8.ValidString(s) }
	f.Fuzz(func(t *testing.T, a, b string) {
		if !valid(a) || !valid(b) || a == b {
			return
		}
		for _, tg := range targets {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			la, err := tg.c.Mutex(a).TryLock(ctx)
			if err != nil {
				cancel()
				t.Fatalf("%s: TryLock(%q): %v", tg.name, a, err)
			}
			lb, err := tg.c.Mutex(b).TryLock(ctx)
			if errors.Is(err, dlock.ErrNotAcquired) {
				t.Errorf("%s: %q and %q map to the same lock", tg.name, a, b)
			} else if err != nil {
				t.Errorf("%s: TryLock(%q): %v", tg.name, b, err)
			}
			if info, err := tg.c.Inspect(ctx, a); err != nil || !info.Held || info.Name != a || info.Token != la.Token() {
				t.Errorf("%s: Inspect(%q) = %+v, %v; want held under that name with token %d", tg.name, a, info, err, la.Token())
			}
			_ = la.Unlock(ctx)
			if lb != nil {
				_ = lb.Unlock(ctx)
			}
			cancel()
		}
	})
}
