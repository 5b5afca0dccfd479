package etcdlock

import (
	"cmp"
	"context"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock/dlock/driver"
)

var _ driver.Watcher = (*Driver)(nil)

// WatchHolder implements driver.Watcher: it reads the lock's queue, then
// watches its prefix from the revision after that read, and replays every
// event on its copy of the queue, one revision at a time (a transaction's
// events together), reporting the holder after each revision that changed
// it. etcd delivers every event from a start revision on, in order, so no
// holder is left out, however briefly it held. A watch that breaks is
// started again from the revision after the last one replayed; if etcd
// has compacted that revision away, the events are lost and the channel
// is closed.
func (d *Driver) WatchHolder(ctx context.Context, name string) (<-chan driver.Info, error) {
	pfx := d.namePrefix(name)
	resp, err := d.cli.Get(ctx, pfx, clientv3.WithPrefix())
	if err != nil {
		return nil, unavailable(ctx, "get", err)
	}
	queue := map[string]*mvccpb.KeyValue{}
	for _, kv := range resp.Kvs {
		queue[string(kv.Key)] = kv
	}
	ch := make(chan driver.Info)
	go func() {
		defer close(ch)
		last := holderInfo(name, queue)
		select {
		case ch <- last:
		case <-ctx.Done():
			return
		}
		rev := resp.Header.Revision
		for failures := 0; ctx.Err() == nil; failures++ {
			if failures > 0 {
				if err := pauseQueued(ctx, nil, failures); err != nil {
					return
				}
			}
			for wr := range d.cli.Watch(d.watchCtx(ctx), pfx, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
				if wr.CompactRevision != 0 {
					return // the events after rev are gone: nothing can tell what happened
				}
				if wr.Err() != nil || wr.Canceled {
					break
				}
				failures = 0
				for i := 0; i < len(wr.Events); {
					// The events of one revision (one transaction) are applied
					// together: a holder never seen by anyone is not reported.
					at := wr.Events[i].Kv.ModRevision
					for ; i < len(wr.Events) && wr.Events[i].Kv.ModRevision == at; i++ {
						ev := wr.Events[i]
						if ev.Type == mvccpb.DELETE {
							delete(queue, string(ev.Kv.Key))
						} else {
							queue[string(ev.Kv.Key)] = ev.Kv
						}
					}
					rev = at
					now := holderInfo(name, queue)
					if now.Held == last.Held && now.Token == last.Token {
						continue
					}
					last = now
					select {
					case ch <- now:
					case <-ctx.Done():
						return
					}
				}
			}
		}
	}()
	return ch, nil
}

// holderInfo is the lock's Info as its queue says: its first holder, with
// no waiters and no expiry (a watch knows neither without more reads).
func holderInfo(name string, queue map[string]*mvccpb.KeyValue) driver.Info {
	kvs := make([]*mvccpb.KeyValue, 0, len(queue))
	for _, kv := range queue {
		kvs = append(kvs, kv)
	}
	slices.SortFunc(kvs, func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.CreateRevision, b.CreateRevision) })
	holders, _, _ := permits(kvs)
	if len(holders) == 0 {
		return driver.Info{Name: name}
	}
	h := holders[0]
	return driver.Info{Name: name, Held: true, Token: uint64(h.CreateRevision), Holder: holderOf(h)}
}
