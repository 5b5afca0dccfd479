package redislock

import (
	"context"
	"time"

	"github.com/dlock/dlock/backend/internal/redisscript"
	"github.com/dlock/dlock/driver"
)

// permit is the handle of a semaphore's grant or a reader's: it tells
// Extend and Release to use the permit scripts (Held carries neither
// Limit nor Shared), and whether as a reader.
type permit struct {
	k      *redisscript.Keys
	reader bool
}

// acquirePermit takes one of req.Limit permits of a semaphore, or a
// reader's lease of a read-write lock (req.Shared; see permits.lua in
// package redisscript). It waits as acquireQueued does for a mutex: a
// first attempt that does not queue, then attempts that queue and serve
// as the heartbeat. There is no hand-off: a release publishes the first
// waiter's owner key on the name's channel, and that waiter tries; an
// expired permit (or writer's lease) publishes nothing, so a waiter also
// looks when the first permit held (the writer's lease) would expire. A
// reader never barges: a reader that passed a waiting writer would starve
// it.
func (d *Driver) acquirePermit(ctx context.Context, req driver.Request) (driver.Grant, error) {
	k := d.keys(req.Name)
	if !req.Wait || !d.hub.Subscribed(k.Channel) {
		// A TryAcquire, or the first attempt of an Acquire of a name this
		// process has not waited for lately: a free permit costs one
		// round trip and no subscription. A plain one takes a free permit
		// whoever waits, a fair one (or a reader) only if nobody live is
		// queued.
		g, granted, _, err := d.permitAttempt(ctx, k, req, !req.Fair && !req.Shared, false)
		if err != nil || granted || !req.Wait {
			if err == nil && !granted {
				err = driver.ErrNotAcquired
			}
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
	barge := !req.Fair && !req.Shared // a plain Acquire's first attempt takes a free permit whoever waits
	for {
		g, granted, left, err := d.permitAttempt(ctx, k, req, barge, true)
		barge = false
		switch {
		case err != nil:
			return driver.Grant{}, err
		case granted:
			return g, nil
		}
		timer := time.NewTimer(driver.LookAgain(heartbeat, left, left >= 0))
		select {
		case <-ctx.Done():
			timer.Stop()
			d.leavePermitQueue(ctx, k, req)
			return driver.Grant{}, ctx.Err()
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// permitAttempt is one attempt at a permit, queueing the owner if queue
// and it is not granted; left is then the time until the first permit
// held (or a writer's lease) expires, negative if none is held. Like every attempt it runs detached from
// ctx, so that its outcome is known: when ctx ended meanwhile, or the
// attempt failed, the owner leaves the queue and gives back a permit the
// attempt may have been granted, before ctx's error (or ErrUnavailable) is
// returned.
func (d *Driver) permitAttempt(ctx context.Context, k *redisscript.Keys, req driver.Request, barge, queue bool) (g driver.Grant, granted bool, left time.Duration, err error) {
	actx, cancel := d.attemptContext(ctx)
	var wttl time.Duration
	if queue {
		wttl = d.waiterTTL
	}
	sent := driver.Now()
	granted, n, err := k.AcquirePermit(actx, d.rdb, req.Owner, req.TTL, req.Limit, req.Shared, req.Holder, barge, wttl)
	cancel()
	switch {
	case err != nil:
		d.leavePermitQueue(ctx, k, req)
		return driver.Grant{}, false, 0, d.unavailable(ctx, err)
	case ctx.Err() != nil:
		if granted || queue {
			d.leavePermitQueue(ctx, k, req)
		}
		return driver.Grant{}, false, 0, ctx.Err()
	case granted:
		return driver.Grant{Token: uint64(n), Since: sent, Handle: permit{k, req.Shared}}, true, 0, nil
	}
	return driver.Grant{}, false, time.Duration(n) * time.Millisecond, nil
}

// leavePermitQueue is giveUp for a semaphore's or a reader's waiter.
func (d *Driver) leavePermitQueue(ctx context.Context, k *redisscript.Keys, req driver.Request) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveUpTimeout)
	defer cancel()
	_ = k.LeavePermitQueue(cctx, d.rdb, req.Owner, req.Shared)
}
