package etcdlock

import (
	"context"
	"fmt"
	"io"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock/dlock/driver"
)

// maxTxnGets is the most reads one transaction of ExtendBatch carries:
// etcd's default limit of operations per transaction (--max-txn-ops).
const maxTxnGets = 128

// ExtendBatch implements driver.BatchExtender, as Extend does for each
// lease: the keep-alives of all the leases go out on one lease stream,
// opened for the batch (where Extend's KeepAliveOnce opens one each), and
// the reads of their keys in read-only transactions of up to 128 reads,
// beside the keep-alives.
func (d *Driver) ExtendBatch(ctx context.Context, b []driver.Extension) []error {
	errs := make([]error, len(b))
	hds := make([]*holding, 0, len(b))
	idx := make([]int, 0, len(b))
	for i, e := range b {
		hd, ok := e.Held.Handle.(*holding)
		if !ok {
			errs[i] = fmt.Errorf("%w: not a grant of this driver", driver.ErrNotHeld)
			continue
		}
		hds = append(hds, hd)
		idx = append(idx, i)
	}
	if len(hds) == 0 {
		return errs
	}
	kaErrs := make(chan []error, 1)
	go func() { kaErrs <- d.keepAliveMany(ctx, hds) }()
	getErrs := d.stillOurs(ctx, hds)
	kas := <-kaErrs
	for k, i := range idx {
		if kas[k] != nil {
			errs[i] = kas[k] // the keep-alive's answer first, as in Extend
		} else {
			errs[i] = getErrs[k]
		}
	}
	return errs
}

// keepAliveMany renews the leases of hds on one keep-alive stream and
// returns an error for each that was not renewed: ErrLeaseLost for a
// lease the server no longer has, ErrUnavailable when the stream failed
// before it answered.
func (d *Driver) keepAliveMany(ctx context.Context, hds []*holding) []error {
	errs := make([]error, len(hds))
	answered := map[clientv3.LeaseID]bool{}
	fail := func(op string, err error) []error {
		for i, hd := range hds {
			if !answered[hd.lease.id] {
				errs[i] = unavailable(ctx, op, err)
			}
		}
		return errs
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := etcdserverpb.NewLeaseClient(d.cli.ActiveConnection()).LeaseKeepAlive(sctx)
	if err != nil {
		return fail("keepalive", err)
	}
	waiting := make(map[clientv3.LeaseID][]int, len(hds))
	for i, hd := range hds {
		waiting[hd.lease.id] = append(waiting[hd.lease.id], i)
	}
	sent := driver.Now()
	sendErr := make(chan error, 1)
	go func() {
		for id := range waiting {
			if err := stream.Send(&etcdserverpb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- stream.CloseSend()
	}()
	for len(answered) < len(waiting) {
		resp, err := stream.Recv()
		if err != nil {
			if err == io.EOF {
				err = fmt.Errorf("the keep-alive stream ended with %d of %d leases unanswered", len(waiting)-len(answered), len(waiting))
			}
			cancel()
			<-sendErr
			return fail("keepalive", err)
		}
		id := clientv3.LeaseID(resp.ID)
		is, ok := waiting[id]
		if !ok || answered[id] {
			continue
		}
		answered[id] = true
		for _, i := range is {
			if resp.TTL <= 0 {
				errs[i] = fmt.Errorf("%w: etcd keepalive: lease %x not found", driver.ErrLeaseLost, resp.ID)
			} else {
				hds[i].lease.confirmed(sent)
			}
		}
	}
	<-sendErr // every lease was answered: a failed close changes nothing
	return errs
}

// stillOurs reads the keys of hds, in read-only transactions of at most
// maxTxnGets reads, and returns ErrLeaseLost for each key that is gone or
// was made again (a Break deletes the key but leaves the lease alive).
func (d *Driver) stillOurs(ctx context.Context, hds []*holding) []error {
	errs := make([]error, len(hds))
	for from := 0; from < len(hds); from += maxTxnGets {
		part := hds[from:min(from+maxTxnGets, len(hds))]
		ops := make([]clientv3.Op, len(part))
		for i, hd := range part {
			ops[i] = clientv3.OpGet(hd.key)
		}
		resp, err := d.cli.Txn(ctx).Then(ops...).Commit()
		for i, hd := range part {
			switch {
			case err != nil:
				errs[from+i] = unavailable(ctx, "get", err)
			case !createdAt(resp.Responses[i].GetResponseRange(), hd.rev):
				errs[from+i] = fmt.Errorf("%w: the key %q was deleted (broken)", driver.ErrLeaseLost, hd.key)
			}
		}
	}
	return errs
}

// createdAt reports whether a read found its key, created at rev.
func createdAt(r *etcdserverpb.RangeResponse, rev int64) bool {
	return r != nil && len(r.Kvs) == 1 && r.Kvs[0].CreateRevision == rev
}
