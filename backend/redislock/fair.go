package redislock

import (
	"context"
	"errors"
	"time"

	"github.com/dlock/dlock/backend/internal/redisscript"
	"github.com/dlock/dlock/driver"
)

// attempt is the outcome of one fair_acquire.lua call.
type attempt struct {
	sent    time.Time
	outcome int   // redisscript.NotGranted, Granted or HandedOff
	n       int64 // the token, or the holder's PTTL in ms
	err     error
}

// acquireQueued waits its turn in the name's FIFO queue (a plain Lock
// first tries to take the lock outright, as an unfair mutex lets an
// arriving goroutine do). Every attempt is
// one round trip that either grants the lock (this owner is the first live
// waiter and the lock is free) or renews the owner's place in the queue;
// attempts run when the previous holder's release names this owner, when
// the holder's lease would have expired, and every third of the waiter TTL
// as the heartbeat. When ctx ends, the owner leaves the queue (or gives
// back a grant that raced with the cancellation) before Acquire returns.
func (d *Driver) acquireQueued(ctx context.Context, req driver.Request) (driver.Grant, error) {
	k := d.keys(req.Name)
	if !req.Wait || !d.hub.Subscribed(k.Channel) {
		// One attempt that does not queue: a TryLock, or the first attempt
		// of a Lock of a name this process has not waited for lately. A
		// free lock is then taken in one round trip, without subscribing
		// first; a Lock that finds it held subscribes and queues (the name
		// then stays subscribed for a while, so a busy lock's Locks queue
		// at once, in one attempt).
		g, err := d.tryOnce(ctx, k, req)
		if err == nil || !errors.Is(err, driver.ErrNotAcquired) || !req.Wait {
			return g, err
		}
	}
	wake := make(chan struct{}, 1)
	stop, err := d.subscribe(ctx, req.Name, req.Owner, wake)
	if err != nil {
		return driver.Grant{}, err
	}
	defer stop()

	heartbeat := d.waiterTTL / 3
	// The send time of the last attempt that found the lock held: a
	// hand-off to this owner happened after it.
	var notGrantedAt time.Time
	// handedOff turns a hand-off into a grant. confirmed says the server
	// reported it in an attempt's reply (the attempt saw the lock as this
	// owner's); a hand-off learnt from a message is checked first.
	//
	// The hand-off came after the last attempt that found the lock held
	// (that attempt would have reported it otherwise), so the lease runs
	// at least until that attempt's send time plus the TTL, on the
	// server's clock: it is counted from there.
	handedOff := func(token uint64, confirmed bool) (driver.Grant, bool) {
		recent := driver.Since(notGrantedAt) < req.TTL/2
		if confirmed && recent {
			return driver.Grant{Token: token, Since: notGrantedAt}, true
		}
		// A message may have been delayed, and the lock broken and granted
		// to another since: one GET shows whether the lock still holds
		// this owner's grant, with this token.
		if recent {
			ok, err := k.HeldBy(ctx, d.rdb, req.Owner, token)
			if err != nil || !ok {
				return driver.Grant{}, false
			}
			return driver.Grant{Token: token, Since: notGrantedAt}, true
		}
		// This waiter was held up (frozen, or cut off with its connection
		// open) long enough for most of the lease to be gone. An
		// owner-checked renewal settles both questions, and starts the
		// lease afresh.
		sent := driver.Now()
		if ok, err := k.Extend(ctx, d.rdb, req.Owner, req.TTL); err != nil || !ok {
			return driver.Grant{}, false
		}
		return driver.Grant{Token: token, Since: sent}, true
	}
	barge := !req.Fair // a plain Lock's first attempt takes a free lock whoever waits
	for {
		// The attempt runs detached from ctx, so that its outcome is always
		// known; it is one round trip, after which a cancelled ctx is seen.
		// (It runs on this goroutine: a hand-off to another would delay
		// every grant.)
		actx, cancel := d.attemptContext(ctx)
		a := attempt{sent: driver.Now()}
		a.outcome, a.n, a.err = k.FairAcquire(actx, d.rdb, req.Owner, req.TTL, req.Holder, d.waiterTTL, d.proc, d.wake, barge)
		barge = false
		cancel()
		if ctx.Err() != nil {
			d.giveUp(ctx, k, req.Owner)
			return driver.Grant{}, ctx.Err()
		}
		switch {
		case a.err != nil:
			d.giveUp(ctx, k, req.Owner)
			return driver.Grant{}, d.unavailable(ctx, a.err)
		case a.outcome == redisscript.Granted:
			return driver.Grant{Token: uint64(a.n), Since: a.sent}, nil
		case a.outcome == redisscript.HandedOff:
			if g, ok := handedOff(uint64(a.n), true); ok {
				return g, nil
			}
		}
		notGrantedAt = a.sent
		// a.n is the PTTL of the lock key: -1 if it has no expiry, -2 if
		// there is none to wait for (a new waiter behind others is handed
		// the lock in turn; its heartbeat looks again).
		timer := time.NewTimer(driver.LookAgain(heartbeat, time.Duration(a.n)*time.Millisecond, a.n >= 0))
		select {
		case <-ctx.Done():
			timer.Stop()
			d.giveUp(ctx, k, req.Owner)
			return driver.Grant{}, ctx.Err()
		case <-wake:
			if token, ok := d.hub.TakeHandoff(req.Owner); ok {
				if g, ok := handedOff(token, false); ok {
					timer.Stop()
					return g, nil
				}
			}
		case <-timer.C:
		}
		timer.Stop()
	}
}

// tryOnce makes one attempt that does not queue: a plain one takes a free
// lock whoever waits, a fair TryLock only if nobody live is queued, a fair
// Lock only if nobody is queued (one script, acquire.lua, with two
// commands, three if fair, when the lock is free and nobody queued). Like
// every attempt it runs detached from ctx, so that its
// outcome is known: a grant that ctx's end overtook is given back before
// tryOnce returns ctx's error, rather than left to its TTL.
func (d *Driver) tryOnce(ctx context.Context, k *redisscript.Keys, req driver.Request) (driver.Grant, error) {
	actx, cancel := d.attemptContext(ctx)
	defer cancel()
	mode := redisscript.Incr
	switch {
	case req.Fair && req.Wait:
		// A Lock queues if not granted, and its queued attempt looks at
		// the queue: this one only asks whether there is one.
		mode = redisscript.FairFirst
	case req.Fair:
		mode = redisscript.Fair
	}
	granted, n, err := k.Acquire(actx, d.rdb, req.Owner, req.TTL, req.Holder, mode, d.wake)
	switch {
	case err != nil:
		return driver.Grant{}, d.unavailable(ctx, err)
	case granted && ctx.Err() != nil:
		_, _ = k.Release(actx, d.rdb, req.Owner, d.wake)
		return driver.Grant{}, ctx.Err()
	case granted:
		// No Since: one round trip, so the lease is counted from the
		// portable layer's reading of the clock before Acquire, which
		// saves a reading here.
		return driver.Grant{Token: uint64(n)}, nil
	}
	return driver.Grant{}, driver.ErrNotAcquired
}

// attemptContext is ctx without its cancellation, so that an attempt's
// outcome is always known; it is bounded by the waiter TTL unless the
// client's own read and write timeouts bound it already (go-redis's
// default: 5s).
func (d *Driver) attemptContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil && d.boundedIO {
		return ctx, func() {} // nothing to detach from
	}
	if d.boundedIO {
		return context.WithoutCancel(ctx), func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), d.waiterTTL)
}

// giveUpTimeout bounds leaving the queue after the caller's context ended:
// one script call, so a second is ample; past it the place expires on its
// own after the waiter TTL.
const giveUpTimeout = time.Second

// giveUp takes the owner out of the queue, passing on a lock that was
// granted or handed to it meanwhile, so that a cancelled Lock leaves
// nothing behind. If Redis cannot be reached, the place expires after the
// waiter TTL, and a lock after its TTL.
func (d *Driver) giveUp(ctx context.Context, k *redisscript.Keys, owner string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveUpTimeout)
	defer cancel()
	_ = k.LeaveQueue(cctx, d.rdb, owner, d.wake)
}
