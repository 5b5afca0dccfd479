package etcdlock_test

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock/dlock"
)

// puts watches the keys put under prefix and sends each put's key-value.
func puts(ctx context.Context, t *testing.T, cli *clientv3.Client, prefix string) <-chan *mvccpb.KeyValue {
	t.Helper()
	wch := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithFilterDelete(), clientv3.WithCreatedNotify())
	if wr := <-wch; !wr.Created {
		t.Fatalf("watch %q: %v", prefix, wr.Err())
	}
	out := make(chan *mvccpb.KeyValue, 1000)
	go func() {
		defer close(out)
		for wr := range wch {
			for _, ev := range wr.Events {
				select {
				case out <- ev.Kv:
				default: // the test reads fewer
				}
			}
		}
	}()
	return out
}

// A client that locks and unlocks one name in a loop writes one key over
// and over: etcd keeps deleted keys in its index until compaction, and a
// fresh key per lock would make every acquire's queue read walk all of
// them.
func TestRelockingReusesTheKey(t *testing.T) {
	srv := startServer(t)
	ctx := testContext(t)
	raw := newClient(t, srv.Endpoints())
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	kvs := puts(wctx, t, raw, "dlock/again/")
	c := newLocker(t, srv.Endpoints(), dlock.WithTTL(5*time.Second))
	const n = 20
	for range n {
		l, err := c.Mutex("again").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	keys := map[string]int{}
	for range n {
		select {
		case kv := <-kvs:
			keys[string(kv.Key)]++
		case <-ctx.Done():
			t.Fatalf("saw %d puts of %d", len(keys), n)
		}
	}
	if len(keys) != 1 {
		t.Fatalf("%d lock+unlock of one name on one client wrote %d distinct keys, want 1: %v", n, len(keys), keys)
	}
}

// Should a pooled lease have a key under the name already (a put that
// reached the server late), Lock must not put over it — the key would keep
// its older create revision and the lock would queue behind itself — but
// take a fresh lease, and grant the lock.
func TestLeftoverKeyOfPooledLeaseIsNotReused(t *testing.T) {
	srv := startServer(t)
	ctx := testContext(t)
	raw := newClient(t, srv.Endpoints())
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	kvs := puts(wctx, t, raw, "dlock/left/")
	c := newLocker(t, srv.Endpoints(), dlock.WithTTL(5*time.Second))
	l, err := c.Mutex("left").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	kv := <-kvs
	// The lease is back in the pool; put its key again behind its back.
	pr, err := raw.Put(ctx, string(kv.Key), "late", clientv3.WithLease(clientv3.LeaseID(kv.Lease)))
	if err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	l, err = c.Mutex("left").Lock(lctx)
	if err != nil {
		t.Fatalf("Lock with a leftover key on the pooled lease: %v", err)
	}
	if l.Token() <= uint64(pr.Header.Revision) {
		t.Fatalf("token %d, not after the leftover key's revision %d", l.Token(), pr.Header.Revision)
	}
	info, err := c.Inspect(ctx, "left")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Token != l.Token() || len(info.Waiters) != 0 {
		t.Fatalf("Inspect = %+v; want held by token %d and nobody else queued", info, l.Token())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
