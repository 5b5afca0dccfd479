package redislock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock/dlock/backend/internal/redisscript"
	"github.com/dlock/dlock/driver"
)

// setnx is the driver in compat=setnx, as a driver.Retrier: there is no
// queue, since a foreign client's release would not serve it; waiters
// retry when woken.
type setnx struct{ *Driver }

func (d *Driver) acquireSetNX(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if req.Fair {
		return driver.Grant{}, fmt.Errorf("%w: redis compat=setnx has no fair queue (other libraries' clients would not keep it)", driver.ErrUnsupported)
	}
	if err := d.layout.CheckName(d.prefix, req.Name); err != nil {
		return driver.Grant{}, err
	}
	return driver.AcquireByRetry(ctx, req, setnx{d})
}

// TryAcquire is one acquire.lua: INCR of the fence counter and SET NX PX
// of the key, in one round trip.
func (s setnx) TryAcquire(ctx context.Context, req driver.Request) (driver.Grant, time.Duration, error) {
	k := s.keys(req.Name)
	granted, n, err := k.Acquire(ctx, s.rdb, req.Owner, req.TTL, req.Holder, redisscript.Incr, s.wake)
	switch {
	case err != nil:
		return driver.Grant{}, 0, s.unavailable(ctx, err)
	case granted:
		return driver.Grant{Token: uint64(n)}, 0, nil
	}
	return driver.Grant{}, time.Duration(max(n, 0)) * time.Millisecond, driver.ErrNotAcquired
}

// Subscribe wakes the waiters of name on dlock's releases (published on
// the lock's channel) and, if the server announces them, on the key's
// deletion or expiry, whoever held it; otherwise it polls, every
// redisscript.SetNXPoll.
func (s setnx) Subscribe(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	k := s.keys(name)
	wake := make(chan struct{}, 1)
	channels := []string{k.Channel}
	if s.keyspace {
		channels = append(channels, redisscript.KeyspaceChannel(s.db, k.Lock))
	}
	var stops []func()
	stop := func() {
		for _, f := range stops {
			f()
		}
	}
	for _, c := range channels {
		ready, unsub, err := s.hub.Subscribe(ctx, c, "", wake)
		if err != nil {
			stop()
			return nil, nil, s.unavailable(ctx, err)
		}
		stops = append(stops, unsub)
		if err := redisscript.WaitReady(ctx, subscribeTimeout, ready); err != nil {
			stop()
			return nil, nil, s.unavailable(ctx, err)
		}
	}
	if !s.keyspace {
		stops = append(stops, redisscript.PollWake(wake, redisscript.SetNXPoll))
	}
	return wake, stop, nil
}

func (d *Driver) inspectSetNX(ctx context.Context, name string) (driver.Info, error) {
	if err := d.layout.CheckName(d.prefix, name); err != nil {
		return driver.Info{}, err
	}
	st, err := d.keys(name).ReadSetNX(ctx, d.rdb)
	if err != nil {
		return driver.Info{}, d.unavailable(ctx, err)
	}
	return infoFrom(name, st), nil
}

// listSetNX lists the held locks among the string keys that begin with
// prefix, or, without a prefix, among the names dlock has locked (see
// redisscript.ScanSetNX).
func (d *Driver) listSetNX(ctx context.Context, prefix string) ([]driver.Info, error) {
	names, err := redisscript.ScanSetNX(ctx, d.rdb, d.prefix, prefix)
	if err != nil {
		return nil, d.unavailable(ctx, err)
	}
	return driver.ListByInspect(ctx, names, d.Inspect)
}

var (
	_ driver.Retrier    = setnx{}
	_ driver.Subscriber = setnx{}
)
