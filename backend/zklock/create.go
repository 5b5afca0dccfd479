package zklock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock/dlock/driver"
)

// created is the outcome of create.
type created struct {
	path           string
	session, czxid int64 // czxid 0: not known (a compat create, or the node was found after a lost reply)
	only           bool  // it was its parent's only child: the holder
}

// create adds a node for us to parent's queue. The node's name carries a
// fresh GUID (Curator's protected mode): after a create whose reply was lost
// with the connection, create looks for its GUID before trying again, so
// that it never leaves a node behind. A missing parent (never created, or
// deleted by the server as an empty container) is created and the create
// retried.
func (d *Driver) create(ctx context.Context, parent, guid string, data []byte) (created, error) {
	prefix := parent + "/" + d.nodePrefix(guid)
	session := d.conn.SessionID()
	unknown := false // a create may have succeeded without our learning it
	fail := func(err error) (created, error) {
		if unknown {
			go d.removeGUID(parent, guid, session)
		}
		return created{}, err
	}
	give := time.Now().Add(d.session())
	for try := 0; ; try++ {
		if time.Now().After(give) || d.isClosed() {
			return fail(fmt.Errorf("%w: zookeeper: create %s: no connection within the session timeout", driver.ErrUnavailable, prefix))
		}
		if unknown {
			p, err := d.findGUID(ctx, parent, guid)
			switch {
			case err == nil && p != "":
				return created{path: p, session: session}, nil
			case err == nil:
				unknown = false // it was not applied: create again
			case ctx.Err() != nil || !transient(err):
				return fail(d.fail(ctx, "find "+prefix, err))
			}
		}
		if !unknown {
			session = d.conn.SessionID()
			c, err := d.createOnce(ctx, prefix, data, parent, guid, session)
			switch {
			case err == nil:
				return c, nil
			case errors.Is(err, zk.ErrNoNode):
				if err := d.makeParent(ctx, parent); err != nil && !transient(err) {
					return fail(d.fail(ctx, "create "+parent, err))
				}
				continue
			case ctx.Err() != nil:
				return fail(ctx.Err()) // createOnce cleans up after a create in flight
			case !transient(err):
				return fail(d.fail(ctx, "create "+prefix, err))
			}
			unknown = true
		}
		if err := requestRetry.Wait(ctx, try); err != nil {
			return fail(err)
		}
	}
}

// createOnce sends one create, in a transaction with an empty write to the
// parent: go-zookeeper returns neither the zxid nor the stat of a create,
// but the parent's stat after that write carries the transaction's zxid —
// the new node's czxid, the token — and the number of children, which is 1
// when the new node is the only one: the lock is ours without a listing. If
// ctx ends first, the outcome is awaited in the background and any node the
// create made is deleted.
func (d *Driver) createOnce(ctx context.Context, prefix string, data []byte, parent, guid string, session int64) (created, error) {
	type result struct {
		c   created
		err error
	}
	ch := make(chan result, 1)
	sent := driver.Now()
	go func() {
		if d.compat != "" {
			// A compat lock path is the application's node, whose data
			// the empty write below would erase: a plain create, whose
			// czxid enqueue reads.
			p, err := d.conn.Create(prefix, data, zk.FlagEphemeralSequential, d.acl)
			ch <- result{c: created{path: p, session: session}, err: err}
			return
		}
		res, err := d.conn.Multi(
			&zk.CreateRequest{Path: prefix, Data: data, Acl: d.acl, Flags: zk.FlagEphemeralSequential},
			&zk.SetDataRequest{Path: parent, Version: -1})
		if err == nil && len(res) != 2 {
			err = fmt.Errorf("a transaction of 2 operations got %d results", len(res))
		}
		for _, r := range res {
			if r.Error != nil {
				err = r.Error // the first operation's failure, not its effect on the second
				break
			}
		}
		if err != nil {
			ch <- result{err: err}
			return
		}
		st := res[1].Stat
		ch <- result{c: created{path: res[0].String, session: session, czxid: st.Mzxid, only: st.NumChildren == 1}}
	}()
	select {
	case r := <-ch:
		if r.err == nil || answered(r.err) {
			d.confirm(sent)
		}
		if r.err == nil && d.conn.SessionID() != session {
			r.c.session = d.conn.SessionID()
		}
		return r.c, r.err
	case <-ctx.Done():
		go func() {
			switch r := <-ch; {
			case r.err == nil:
				d.remove(r.c.path, session)
			case transient(r.err):
				d.removeGUID(parent, guid, session)
			}
		}()
		return created{}, ctx.Err()
	}
}

// findGUID looks for the node with guid among parent's children, after a
// sync so that the server answering has applied every write the leader
// committed — including a create of ours that the leader accepted before
// the connection dropped. It returns "" if there is none.
func (d *Driver) findGUID(ctx context.Context, parent, guid string) (string, error) {
	kids, err := roundTrip(ctx, d, func() ([]string, error) { return d.syncedChildren(parent) })
	if errors.Is(err, zk.ErrNoNode) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	want := d.nodePrefix(guid)
	for _, k := range kids {
		if strings.HasPrefix(k, want) {
			return parent + "/" + k, nil
		}
	}
	return "", nil
}

// removeGUID deletes the node with guid, if a create of ours made it after
// all, for as long as its session lives.
func (d *Driver) removeGUID(parent, guid string, session int64) {
	for try := 0; ; try++ {
		p, err := d.findGUID(context.Background(), parent, guid)
		if err == nil {
			if p != "" {
				d.remove(p, session)
			}
			return
		}
		if !transient(err) || d.conn.SessionID() != session {
			return
		}
		select {
		case <-d.closed:
			return
		case <-time.After(cleanupRetry.Delay(try)):
		}
	}
}

// makeParent creates a lock's parent: in dlock's layout a container node,
// and the root first if it is missing; in a compat layout the lock path
// and its ancestors, as the foreign recipe's clients do (see makePath).
func (d *Driver) makeParent(ctx context.Context, parent string) error {
	switch d.compat {
	case Kazoo:
		return d.makePath(ctx, parent, 0)
	case Curator:
		return d.makePath(ctx, parent, zk.FlagContainer)
	}
	_, err := roundTrip(ctx, d, func() (string, error) { return d.conn.CreateContainer(parent, nil, zk.FlagContainer, d.acl) })
	if errors.Is(err, zk.ErrNoNode) {
		if err = d.makePath(ctx, d.root, 0); err == nil {
			_, err = roundTrip(ctx, d, func() (string, error) { return d.conn.CreateContainer(parent, nil, zk.FlagContainer, d.acl) })
		}
	}
	if errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return err
}
