package pglock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlock/dlock/driver"
)

// The outcomes of an attempt of a queued acquire (queueAcquireSQL,
// queueCountedSQL).
const (
	notGranted = 0
	granted    = 1
	handedOff  = 2 // a release handed the lock to this owner before the attempt
)

// queueReply is what one attempt of a queued acquire learnt.
type queueReply struct {
	sent      time.Time
	outcome   int
	token     int64 // the grant's, or the name's latest when not granted
	recovered bool
	left      time.Duration // the holder's remaining TTL (a semaphore's: its soonest permit's)
}

// fastAcquire is the fast path of a mutex's or a writer's acquire
// (fastAcquireSQL): one statement, which takes a free lock that nobody
// live waits for (a plain Lock's: any free lock) and changes nothing
// otherwise. It returns driver.ErrNotAcquired and the holder's remaining
// TTL when the lock is held; a remaining TTL of 0 means the lock may be
// free, and only the queue can tell whose it is.
func (d *Driver) fastAcquire(ctx context.Context, req driver.Request) (driver.Grant, time.Duration, error) {
	return d.tryStatement(ctx, d.pool, d.fastAcquireSQL, req, !req.Fair)
}

// acquireQueued waits in the name's queue, after the fast path
// (fastAcquire) for a mutex or a writer — unless this driver's last
// release of the name handed the lock to a waiter: the fast path would
// then find it held (or, were the holder quick, waiters queued behind
// it), and the queue's first attempt takes a free lock as the fast path
// does, in the one round trip it costs anyway. The first attempt of a plain
// Lock of a mutex takes a free lock whoever waits, as an unfair mutex lets
// an arriving goroutine do; a fair one never passes a live waiter. Every
// attempt is one round trip that either grants
// the lock (this owner is first among the live waiters and the lock is
// free) or renews the owner's place in the queue; attempts run when the
// name's channel says the lock was freed, when the holder's lease would
// run out, and every third of the waiter TTL as the heartbeat. A release
// hands the lock to the first live waiter itself and tells it on its
// driver's reply channel: the waiter then holds it without another round
// trip. When ctx ends, the owner leaves the queue, passing on a lock
// handed to it meanwhile, before Acquire returns.
func (d *Driver) acquireQueued(ctx context.Context, req driver.Request) (driver.Grant, error) {
	// held: the lock is believed held by another owner, so the first
	// attempt tries to join the queue in one statement (joinQueueAlone).
	held := false
	if !counted(req) {
		held = d.wasHandedOff(req.Name)
	}
	if !counted(req) && !held {
		// Detached from ctx, as an attempt below, so that its outcome is
		// known.
		g, left, err := d.fastAcquire(context.WithoutCancel(ctx), req)
		g, err = driver.GiveBackIfEnded(ctx, g, err, func(rctx context.Context) {
			_ = d.releaseQueued(rctx, driver.Held{Name: req.Name, Owner: req.Owner, Token: g.Token})
		})
		if !errors.Is(err, driver.ErrNotAcquired) {
			return g, err
		}
		// Held, or free with someone queued, or the queue changed as the
		// statement ran: the queue.
		held = left > 0
	}
	wake, stop, err := d.listen.subscribe(ctx, payload(d.key(req.Name)))
	if err != nil {
		return driver.Grant{}, err
	}
	defer stop()
	handOff, stopHandOff := d.listen.awaitHandOff(req.Owner)
	defer stopHandOff()

	var (
		notGrantedAt time.Time // the send time of the last attempt that found the lock held
		seen         int64     // the name's token that attempt saw
	)
	barge := !req.Fair && req.Limit <= 1 // a plain Lock's first attempt takes a free lock whoever waits
	for {
		// Detached from ctx, so that its outcome is known; it is one round
		// trip, after which a cancelled ctx is seen.
		var (
			a      queueReply
			err    error
			joined bool
		)
		if held {
			a, joined, err = d.joinQueueAlone(context.WithoutCancel(ctx), req)
			held = false
		}
		if !joined && err == nil {
			a, err = d.queueAttempt(context.WithoutCancel(ctx), req, barge, true)
		}
		barge = false
		if ctx.Err() != nil {
			d.giveUp(ctx, req)
			return driver.Grant{}, ctx.Err()
		}
		switch {
		case err != nil:
			d.giveUp(ctx, req)
			return driver.Grant{}, err
		case a.outcome == granted || a.outcome == handedOff:
			return d.queueGrant(req, a.token, a.recovered, a.sent), nil
		}
		notGrantedAt, seen = a.sent, a.token
		// a.left is 0 when no lease is in the way (or one ran out as it
		// was read): then a notification, or the heartbeat, wakes it.
		timer := time.NewTimer(driver.LookAgain(d.waiterTTL/3, a.left, a.left > 0))
		select {
		case <-ctx.Done():
			timer.Stop()
			d.giveUp(ctx, req)
			return driver.Grant{}, ctx.Err()
		case token := <-handOff:
			// Tokens of a name increase in grant order, and every grant
			// after the last attempt has a token above the one it saw: a
			// lower one is an older hand-off's late message (the lock was
			// since broken and granted again), and not believed. The
			// hand-off came after that attempt's send time, and its lease
			// runs from the hand-off: counting it from that send time
			// errs on the safe side.
			if int64(token) > seen {
				timer.Stop()
				return d.queueGrant(req, int64(token), false, notGrantedAt), nil
			}
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

func (d *Driver) queueGrant(req driver.Request, token int64, recovered bool, since time.Time) driver.Grant {
	g := driver.Grant{Token: uint64(token), Recovered: recovered, Since: since, Handle: queued{}}
	if counted(req) {
		g.Handle = permit{}
	}
	return g
}

// queued is the Handle of a lease granted from the queue: others were
// waiting for the name, so its release goes straight to the hand-off
// (releaseQueued) rather than first trying the release for an empty
// queue, which would most likely find the queue in use and cost a round
// trip for nothing.
type queued struct{}

// counted reports whether req asks for a permit of the permits table: a
// semaphore's, or a reader's of a read-write lock.
func counted(req driver.Request) bool {
	return req.Limit > 1 || req.Shared
}

// queueAttempt is one attempt of a queued acquire: one round trip,
// lockNameSQL then queueAcquireSQL (for a mutex or a writer;
// queueCountedSQL for a semaphore or a reader) in one transaction.
// Without queue, a waiter that is not granted is not queued (a fair
// TryLock).
func (d *Driver) queueAttempt(ctx context.Context, req driver.Request, barge, queue bool) (queueReply, error) {
	a := queueReply{sent: driver.Now()}
	var (
		token  *int64
		took   *bool
		leftUS *int64
	)
	err := d.underNameLock(ctx, req.Name, func(b *pgx.Batch) {
		key := d.listen.liveKey()
		if counted(req) {
			sql, limit := d.queuePermitSQL, int64(req.Limit)
			if req.Shared {
				sql, limit = d.queueReaderSQL, 0
			}
			b.Queue(sql, []byte(req.Name), req.Owner, req.Holder, req.TTL.Microseconds(), limit,
				d.channel, payload(d.key(req.Name)), d.waiterTTL.Microseconds(), d.reply, key, queue)
		} else {
			b.Queue(d.queueAcquireSQL, []byte(req.Name), req.Owner, req.Holder, req.TTL.Microseconds(), d.waiterTTL.Microseconds(),
				d.reply, key, barge, queue, d.channel, payload(d.key(req.Name)))
		}
	}, func(br pgx.BatchResults) error {
		return br.QueryRow().Scan(&a.outcome, &token, &took, &leftUS, nil)
	})
	if err != nil {
		return a, d.fail(ctx, err)
	}
	if token != nil {
		a.token = *token
	}
	a.recovered = took != nil && *took
	if leftUS != nil {
		a.left = max(time.Duration(*leftUS)*time.Microsecond, 0)
	}
	return a, nil
}

// joinQueueAlone is the first attempt of a queued acquire of a mutex or
// a writer when the lock is believed held by another owner: one
// statement (joinQueueAloneSQL) that joins the queue if the lock is so,
// without the transaction of queueAttempt. It reports false, and changes
// nothing, when the lock is not so: the caller then makes the attempt
// under the row lock, which may grant.
func (d *Driver) joinQueueAlone(ctx context.Context, req driver.Request) (queueReply, bool, error) {
	a := queueReply{sent: driver.Now()}
	octx, cancel := d.bound(ctx)
	defer cancel()
	var leftUS int64
	err := readCommitted{d.pool}.QueryRow(octx, d.joinQueueAloneSQL, []byte(req.Name), req.Owner, req.Holder, req.TTL.Microseconds(),
		d.waiterTTL.Microseconds(), d.reply, d.listen.liveKey()).Scan(&a.outcome, &a.token, nil, &leftUS, nil)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return a, false, nil
	case err != nil:
		return a, false, d.fail(ctx, err)
	}
	a.left = time.Duration(leftUS) * time.Microsecond
	return a, true, nil
}

// tryQueued is a fair TryLock: one attempt that grants a free lock only if
// nobody live is queued, and does not queue.
func (d *Driver) tryQueued(ctx context.Context, req driver.Request) (driver.Grant, time.Duration, error) {
	if !counted(req) {
		g, left, err := d.fastAcquire(ctx, req)
		if !errors.Is(err, driver.ErrNotAcquired) || left > 0 {
			return g, left, err
		}
	}
	a, err := d.queueAttempt(ctx, req, false, false)
	switch {
	case err != nil:
		return driver.Grant{}, 0, err
	case a.outcome == notGranted:
		return driver.Grant{}, a.left, driver.ErrNotAcquired
	}
	return d.queueGrant(req, a.token, a.recovered, a.sent), 0, nil
}

// giveUp takes a waiter whose caller stopped waiting out of the queue, and
// passes on a lock that was handed to it meanwhile, or gives back a permit
// its last attempt was granted, so that a cancelled Lock leaves nothing
// behind. If the server cannot be reached, the place runs out after the
// waiter TTL, and a lock or permit granted after its TTL.
func (d *Driver) giveUp(ctx context.Context, req driver.Request) {
	cctx, cancel := driver.CleanupContext(ctx)
	defer cancel()
	args := []any{[]byte(req.Name), req.Owner, d.channel, payload(d.key(req.Name))}
	pass := d.handOffSQL
	if counted(req) {
		pass = d.permitReleaseSQL
	}
	_ = d.underNameLock(cctx, req.Name, func(b *pgx.Batch) {
		b.Queue(d.leaveSQL, args...)
		b.Queue(pass, args...)
	}, func(br pgx.BatchResults) error {
		_, err := br.Exec()
		if err == nil {
			_, err = br.Exec()
		}
		return err
	})
}

// releaseQueued releases a lease and hands the lock to the first live
// waiter of the queue. A lease granted without the queue (its Handle is
// not queued) is first released by freeSQL, one statement, which frees
// it if nobody is queued for the name. Otherwise (or if the lease was
// granted from the queue) handOffSQL alone, one statement; if the queue
// changed as it ran (a waiter's attempt held the name's row), again after
// lockNameSQL in one transaction, which is one more round trip.
func (d *Driver) releaseQueued(ctx context.Context, h driver.Held) error {
	if _, ok := h.Handle.(queued); !ok {
		octx, cancel := d.bound(ctx)
		err := readCommitted{d.pool}.QueryRow(octx, d.freeSQL, d.releaseArgs(h)...).Scan(nil)
		cancel()
		if !errors.Is(err, pgx.ErrNoRows) {
			if err == nil {
				d.noteRelease(h.Name, false)
			}
			return d.released(ctx, h, err)
		}
		// Someone is queued, or the lease is not the owner's: the hand-off
		// tells which.
	}
	var done, handed bool
	octx, cancel := d.bound(ctx)
	err := readCommitted{d.pool}.QueryRow(octx, d.handOffSQL, d.releaseArgs(h)...).Scan(&done, &handed, nil)
	cancel()
	if err == nil && !done {
		err = d.underNameLock(ctx, h.Name, func(b *pgx.Batch) {
			b.Queue(d.handOffSQL, d.releaseArgs(h)...)
		}, func(br pgx.BatchResults) error {
			return br.QueryRow().Scan(&done, &handed, nil)
		})
		if err == nil && !done { // cannot be: under the row lock the row is this transaction's
			err = fmt.Errorf("%w: pglock: the release of %q did not take effect", driver.ErrUnavailable, h.Name)
		}
	}
	if err == nil {
		d.noteRelease(h.Name, handed)
	}
	return d.released(ctx, h, err)
}

// noteRelease remembers whether this driver's release of name handed the
// lock to a waiter (see wasHandedOff). One name is remembered: the hint
// costs no memory per name, and a wrong one costs only the fast path's
// saving.
func (d *Driver) noteRelease(name string, handed bool) {
	if handed {
		d.handedOff.Store(&name)
		return
	}
	if p := d.handedOff.Load(); p != nil && *p == name {
		d.handedOff.CompareAndSwap(p, nil)
	}
}

// wasHandedOff reports whether this driver's last release of name handed
// the lock to a waiter, as far as the driver remembers.
func (d *Driver) wasHandedOff(name string) bool {
	p := d.handedOff.Load()
	return p != nil && *p == name
}

// underNameLock runs, in one round trip and one READ COMMITTED transaction
// (whatever the server's default: under REPEATABLE READ the statements
// would see the database as of before the lock was granted),
// lockNameSQL for name and then the statements queue adds; read reads
// their results (inReadCommitted).
func (d *Driver) underNameLock(ctx context.Context, name string, queue func(*pgx.Batch), read func(pgx.BatchResults) error) error {
	octx, cancel := d.bound(ctx)
	defer cancel()
	return inReadCommitted(octx, d.pool, func(b *pgx.Batch) {
		b.Queue(d.lockNameSQL, []byte(name))
		queue(b)
	}, func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return err
		}
		return read(br)
	})
}

// waitersReady reports whether the queue can be used: the permits and
// waiters tables exist and this role may use them. As permitsReady, a
// driver that found one missing or forbidden looks again (and tries to
// make it) at each request that needs it.
func (d *Driver) waitersReady(ctx context.Context) error {
	// A waiting writer of a read-write lock looks at the permits table for
	// readers, and its request is a fair mutex's: the queue needs both.
	if err := d.permitsReady(ctx); err != nil {
		return err
	}
	return d.sideTableReady(ctx, &d.waitersOK, func(r resolved) bool { return r.waitersOK }, d.waitersError)
}

// waitersError explains that the role may not make or use the waiters
// table, and what to run.
func (d *Driver) waitersError(ctx context.Context, cause error) error {
	role := d.role(ctx)
	return fmt.Errorf("%w: pglock: role %s may not use fair waiting: its waiters table %s is missing or not granted (%v); run Migrate once as the schema's owner, then GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO %s",
		driver.ErrUnavailable, role, d.waiters, cause, d.waiters, role)
}
