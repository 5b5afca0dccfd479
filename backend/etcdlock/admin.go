package etcdlock

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock/dlock/driver"
)

// Inspect reads the lock's queue: the key with the lowest create revision
// is the holder (a semaphore's: the first keys, see permits), the others
// wait in order.
func (d *Driver) Inspect(ctx context.Context, name string) (driver.Info, error) {
	resp, err := d.cli.Get(ctx, d.namePrefix(name), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return driver.Info{}, unavailable(ctx, "get", err)
	}
	return d.info(ctx, name, resp.Kvs)
}

// info describes one lock from its queue, in create-revision order.
func (d *Driver) info(ctx context.Context, name string, queue []*mvccpb.KeyValue) (driver.Info, error) {
	in := driver.Info{Name: name}
	holders, waiters, semaphore := permits(queue)
	for i, h := range holders {
		p := driver.Permit{Token: uint64(h.CreateRevision), Holder: holderOf(h)}
		if h.Lease != 0 {
			ttl, err := d.cli.TimeToLive(ctx, clientv3.LeaseID(h.Lease))
			if err != nil {
				return driver.Info{}, unavailable(ctx, "lease time-to-live", err)
			}
			p.ExpiresIn = max(time.Duration(ttl.TTL)*time.Second, 0)
		}
		if i == 0 {
			in.Held, in.Token, in.Holder, in.ExpiresIn = true, p.Token, p.Holder, p.ExpiresIn
		}
		if semaphore {
			in.Permits = append(in.Permits, p)
		}
	}
	for _, w := range waiters {
		in.Waiters = append(in.Waiters, holderOf(w))
	}
	return in, nil
}

// List reads every queue whose name starts with prefix in one range read
// (see the key layout in keys.go).
func (d *Driver) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	if d.compat == CompatEtcdctl {
		return d.listMutexes(ctx, prefix)
	}
	resp, err := d.cli.Get(ctx, d.prefix+escapeName(prefix), clientv3.WithPrefix())
	if err != nil {
		return nil, unavailable(ctx, "get", err)
	}
	queues := map[string][]*mvccpb.KeyValue{}
	for _, kv := range resp.Kvs {
		if name, _, ok := d.splitKey(string(kv.Key)); ok {
			queues[name] = append(queues[name], kv)
		}
	}
	names := make([]string, 0, len(queues))
	for n := range queues {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]driver.Info, 0, len(names))
	for _, n := range names {
		q := queues[n]
		sort.Slice(q, func(i, j int) bool { return q[i].CreateRevision < q[j].CreateRevision })
		in, err := d.info(ctx, n, q)
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, nil
}

// Break deletes the holder's key (a semaphore's: every holder's key, in
// one transaction). Its lease stays alive, but the holder's watch on its
// key sees the deletion at once and its next Extend fails; the next
// waiter's key, created later, carries a higher token.
func (d *Driver) Break(ctx context.Context, name string) error {
	pfx := d.namePrefix(name)
	for range 5 {
		resp, err := d.cli.Get(ctx, pfx, clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			return unavailable(ctx, "get", err)
		}
		holders, _, _ := permits(resp.Kvs)
		if len(holders) == 0 {
			return fmt.Errorf("%w: %q is free", driver.ErrNotHeld, name)
		}
		var same []clientv3.Cmp
		var del []clientv3.Op
		for _, h := range holders {
			same = append(same, clientv3.Compare(clientv3.CreateRevision(string(h.Key)), "=", h.CreateRevision))
			del = append(del, clientv3.OpDelete(string(h.Key)))
		}
		tresp, err := d.cli.Txn(ctx).If(same...).Then(del...).Commit()
		if err != nil {
			return unavailable(ctx, "delete", err)
		}
		if tresp.Succeeded {
			return nil
		}
		// A holder released meanwhile: break whoever holds it now.
	}
	return fmt.Errorf("%w: etcd: %q changed hands too often to break", driver.ErrUnavailable, name)
}

// listMutexes is List in compat=etcdctl, where a lock's keys are not
// under a prefix of dlock's: it reads the names of the keys that begin
// with prefix (every key in the cluster for an empty prefix), keeps those
// of concurrency.Mutex's layout, and inspects each of their locks.
func (d *Driver) listMutexes(ctx context.Context, prefix string) ([]driver.Info, error) {
	resp, err := d.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, unavailable(ctx, "get", err)
	}
	seen := map[string]bool{}
	var names []string
	for _, kv := range resp.Kvs {
		if name, ok := mutexName(kv); ok && strings.HasPrefix(name, prefix) && !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return driver.ListByInspect(ctx, names, d.Inspect)
}
