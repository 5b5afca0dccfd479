package redislock

import (
	"context"
	"time"

	"github.com/dlock/dlock/backend/internal/redisscript"
	"github.com/dlock/dlock/driver"
)

// attempt is the outcome of one fair_acquire.lua call.
type attempt struct {
	sent    time.Time
	granted bool
	n       int64 // the token, or the holder's PTTL in ms
	err     error
}

// acquireFair waits its turn in the name's FIFO queue. Every attempt is
// one round trip that either grants the lock (this owner is the first live
// waiter and the lock is free) or renews the owner's place in the queue;
// attempts run when the previous holder's release names this owner, when
// the holder's lease would have expired, and every third of the waiter TTL
// as the heartbeat. When ctx ends, the owner leaves the queue (or gives
// back a grant that raced with the cancellation) before Acquire returns.
func (d *Driver) acquireFair(ctx context.Context, req driver.Request) (driver.Grant, error) {
	k := d.keys(req.Name)
	if !req.Wait {
		ok, n, err := k.FairAcquire(ctx, d.rdb, req.Owner, req.TTL, req.Holder, false, d.waiterTTL)
		switch {
		case err != nil:
			return driver.Grant{}, d.unavailable(ctx, err)
		case !ok:
			return driver.Grant{}, driver.ErrNotAcquired
		}
		return driver.Grant{Token: uint64(n)}, nil
	}
	wake := make(chan struct{}, 1)
	stop, err := d.subscribe(ctx, req.Name, req.Owner, wake)
	if err != nil {
		return driver.Grant{}, err
	}
	defer stop()

	heartbeat := d.waiterTTL / 3
	for {
		done := make(chan attempt, 1)
		go func() {
			// Detached from ctx, so that its outcome is always known.
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.waiterTTL)
			defer cancel()
			a := attempt{sent: time.Now()}
			a.granted, a.n, a.err = k.FairAcquire(actx, d.rdb, req.Owner, req.TTL, req.Holder, true, d.waiterTTL)
			done <- a
		}()
		var a attempt
		select {
		case a = <-done:
		case <-ctx.Done():
			d.giveUp(ctx, k, req.Owner, done)
			return driver.Grant{}, ctx.Err()
		}
		switch {
		case a.err != nil:
			d.giveUp(ctx, k, req.Owner, settled())
			return driver.Grant{}, d.unavailable(ctx, a.err)
		case a.granted:
			return driver.Grant{Token: uint64(a.n), Since: a.sent}, nil
		}
		wait := heartbeat
		if left := time.Duration(a.n) * time.Millisecond; a.n > 0 && left < wait {
			wait = left + time.Millisecond // an expiry publishes nothing: look then
		}
		timer := time.NewTimer(driver.Jitter(wait))
		select {
		case <-ctx.Done():
			timer.Stop()
			d.giveUp(ctx, k, req.Owner, settled())
			return driver.Grant{}, ctx.Err()
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// giveUp takes the owner out of the queue once the attempt on done has
// finished — or releases the lock that attempt was granted — and waits a
// little for that, so that a cancelled Lock normally returns with nothing
// left behind. (If Redis cannot be reached, the place expires after the
// waiter TTL, and a lock after its TTL.)
func (d *Driver) giveUp(ctx context.Context, k redisscript.Keys, owner string, done <-chan attempt) {
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		a := <-done
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.waiterTTL)
		defer cancel()
		if a.granted {
			_, _ = k.Release(cctx, d.rdb, owner)
		} else {
			_ = k.LeaveQueue(cctx, d.rdb, owner)
		}
	}()
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-finished:
	case <-t.C:
	}
}

// settled is a done channel for giveUp when no attempt is in flight.
func settled() <-chan attempt {
	c := make(chan attempt, 1)
	c <- attempt{}
	return c
}
