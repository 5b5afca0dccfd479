package redlock

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/dlock/dlock/backend/internal/redisscript"
	"github.com/dlock/dlock/driver"
)

// permit is the handle of a semaphore's grant: the slot it holds on a
// majority of the nodes (see the package documentation), which Extend
// and Release check on each node.
type permit struct{ slot int }

// slotTries bounds the first rounds of one attempt at a permit: when the
// nodes give different slots (clients took them in different orders), the
// attempt gives them back and asks again for a slot a majority may give;
// when another permit granted at the same time claimed its token, it asks
// again with the counters as they are then.
const slotTries = 3

// tryPermit is TryAcquire for a permit of a semaphore of req.Limit
// permits: a slot below the limit held on a majority of the nodes, taken
// only where fewer than req.Limit permits are held; the token is decided
// across the nodes as a mutex's is, and claimed on a majority so that no
// two permits granted at once get the same one.
func (d *Driver) tryPermit(ctx context.Context, req driver.Request) (driver.Grant, time.Duration, error) {
	k := d.keys(req.Name)
	timeout := nodeTimeout(req.TTL)
	abandon := func() { d.abandonPermit(ctx, k, req) }
	pref := -1
	for try, seeds := 0, 0; ; try++ {
		start := driver.Now()
		round1 := make([]redisscript.RoundOne, len(d.nodes))
		r1 := d.each(ctx, nil, timeout, func(ctx context.Context, n *node) reply {
			r, err := k.AcquireSlot(ctx, n.rdb, req.Owner, req.TTL, req.Limit, pref, req.Holder, d.stateKey())
			round1[n.idx] = r
			return reply{ok: r.Granted, n: r.PTTL, err: err}
		})
		t1 := count(r1)
		if again, err := d.checkStates(ctx, req.Name, r1, round1, seeds, abandon); again {
			seeds++
			try-- // a round 1 repeated after a seeding is not a try at a slot
			continue
		} else if err != nil {
			return driver.Grant{}, 0, err
		}
		// The slot granted on most nodes (the lowest of equals).
		votes := map[int]int{}
		slot := -1
		for _, i := range t1.okIdx {
			s := round1[i].Slot
			votes[s]++
			if slot < 0 || votes[s] > votes[slot] || votes[s] == votes[slot] && s < slot {
				slot = s
			}
		}
		if slot < 0 || votes[slot] < d.quorum {
			abandon()
			if len(t1.errs) > len(d.nodes)-d.quorum {
				return driver.Grant{}, 0, d.unreachable(ctx, "acquire "+req.Name, t1)
			}
			if t1.ok >= d.quorum && try+1 < slotTries {
				// Room on a majority, but in different slots: ask for one.
				// A node gives the lowest slot free there (unless the one
				// asked for is free), so the slots below the one it gave
				// are taken there: the lowest slot that a majority may
				// give is the quorum-th lowest given.
				given := make([]int, 0, len(t1.okIdx))
				for _, i := range t1.okIdx {
					given = append(given, round1[i].Slot)
				}
				slices.Sort(given)
				pref = given[d.quorum-1]
				continue
			}
			return driver.Grant{}, retryAfter(r1, t1, d.quorum), driver.ErrNotAcquired
		}
		// The nodes that granted another slot give it back: the permit is
		// the slot a majority granted.
		var others []int
		for _, i := range t1.okIdx {
			if round1[i].Slot != slot {
				others = append(others, i)
			}
		}
		if len(others) > 0 {
			d.each(ctx, others, timeout, func(ctx context.Context, n *node) reply {
				_, err := k.ReleaseSlot(ctx, n.rdb, req.Owner, -1)
				return reply{err: err}
			})
		}
		var token uint64
		var answered []int
		for i, r := range r1 {
			if r.done && r.err == nil {
				token = max(token, uint64(round1[i].Counter))
				answered = append(answered, i)
			}
		}
		token++
		// Round 2, to every node that answered round 1, as for a mutex. A
		// node confirms the grant if it holds the slot for the owner, has
		// complete counters, and claimed the token for this grant: a
		// majority of such nodes both holds the permit and gives the token
		// to no other grant.
		r2 := d.each(ctx, answered, timeout, func(ctx context.Context, n *node) reply {
			claimed, held, state, err := k.SlotToken(ctx, n.rdb, req.Owner, slot, token, d.stateKey())
			return reply{ok: claimed && held && state == stateComplete, err: err}
		})
		t2 := count(r2)
		validity := req.TTL - driver.Since(start) - Drift(req.TTL)
		if t2.ok < d.quorum || validity <= 0 {
			abandon()
			if t2.ok < d.quorum && len(t2.errs) > len(d.nodes)-d.quorum {
				return driver.Grant{}, 0, d.unreachable(ctx, "acquire "+req.Name, t2)
			}
			if validity > 0 && try+1 < slotTries {
				// Another permit granted meanwhile claimed the token: ask
				// again, for the same slot, with the counters as they are
				// now.
				pref = slot
				continue
			}
			// The permit expired on nodes before the rounds were done, or
			// its claims kept losing: try again later.
			return driver.Grant{}, driver.Jitter(expiredRetry), driver.ErrNotAcquired
		}
		return driver.Grant{Token: token, Since: start, TTL: req.TTL - Drift(req.TTL), Handle: permit{slot}}, 0, nil
	}
}

// abandonPermit gives back a partial or late permit on every node (a node
// may have granted a slot although its reply was lost).
func (d *Driver) abandonPermit(ctx context.Context, k redisscript.Keys, req driver.Request) {
	d.each(context.WithoutCancel(ctx), nil, nodeTimeout(req.TTL), func(ctx context.Context, n *node) reply {
		_, err := k.ReleaseSlot(ctx, n.rdb, req.Owner, -1)
		return reply{err: err}
	})
}

// permitsInfo reports the permits of a semaphore that a majority of the
// nodes agree on (the same owner in the same slot), from the states
// Inspect read: each with the largest token of its copies (a node that
// missed the second round has 0), and held until all but quorum-1 of its
// copies have expired. A permit whose token is still 0 everywhere is
// between its rounds, not granted yet.
func (d *Driver) permitsInfo(name string, rs []reply, states []redisscript.State) driver.Info {
	type copies struct {
		p     driver.Permit
		pttls []time.Duration
	}
	byOwner := map[string]*copies{}
	var order []string
	for i, st := range states {
		if rs[i].err != nil {
			continue
		}
		for _, p := range st.Permits {
			slot, holder, ok := redisscript.SplitSlot(p.Holder)
			if !ok {
				continue
			}
			key := p.Owner + " " + strconv.Itoa(slot)
			c := byOwner[key]
			if c == nil {
				c = &copies{p: driver.Permit{Holder: holder}}
				byOwner[key] = c
				order = append(order, key)
			}
			c.p.Token = max(c.p.Token, p.Token)
			c.pttls = append(c.pttls, p.PTTL)
		}
	}
	in := driver.Info{Name: name}
	for _, key := range order {
		c := byOwner[key]
		if len(c.pttls) < d.quorum || c.p.Token == 0 {
			continue
		}
		slices.Sort(c.pttls)
		c.p.ExpiresIn = c.pttls[len(c.pttls)-d.quorum]
		in.Permits = append(in.Permits, c.p)
	}
	if len(in.Permits) == 0 {
		return in
	}
	slices.SortFunc(in.Permits, func(a, b driver.Permit) int { return cmp.Compare(a.Token, b.Token) })
	first := in.Permits[0]
	in.Held, in.Token, in.Holder, in.ExpiresIn = true, first.Token, first.Holder, first.ExpiresIn
	return in
}
