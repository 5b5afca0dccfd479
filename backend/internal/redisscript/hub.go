package redisscript

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock/driver"
)

// Hub carries the wake-ups of every lock a driver waits for over ONE pub/sub
// connection, however many waiters and names there are: a Redis connection
// per waiter would cost the server a client each and a SUBSCRIBE round trip
// per Lock.
//
// A release publishes on the lock's channel either "" (anyone may try) or
// the owner key of the first fair waiter. The hub hands each message to one
// plain waiter of that name in this process — the one waiting longest
// without a wake-up pending — rather than to all of them, so a release
// causes one attempt per process, not a herd; and to the fair waiter it
// names. A channel stays subscribed for a while after its last waiter
// leaves, so that a busy lock is not re-subscribed on every Lock.
//
// A hub may also have a process channel, subscribed with the first
// channel and kept: releases publish "<owner> <token>" on it when they
// hand the lock to one of this process's fair waiters (see queue.lua).
type Hub struct {
	rdb  redis.UniversalClient
	proc string

	mu       sync.Mutex
	ps       *redis.PubSub
	topics   map[string]*topic
	owners   map[string]chan struct{} // fair waiters by owner key
	handoffs map[string]uint64        // tokens handed to fair waiters, not yet taken
	closed   bool
	done     chan struct{}
}

type topic struct {
	ready     chan struct{} // closed when the server confirmed the subscription
	confirmed bool
	plain     []chan struct{}
	fair      map[string]chan struct{}
	idleSince time.Time
	permanent bool // the process channel: never unsubscribed
}

func (t *topic) waiters() int { return len(t.plain) + len(t.fair) }

// How long an unused channel stays subscribed.
const (
	lingerFor   = 30 * time.Second
	lingerCheck = 10 * time.Second
)

// NewHub returns a hub over rdb with process channel proc ("" for none);
// it connects on the first Subscribe.
func NewHub(rdb redis.UniversalClient, proc string) *Hub {
	h := &Hub{rdb: rdb, proc: proc, topics: map[string]*topic{}, owners: map[string]chan struct{}{},
		handoffs: map[string]uint64{}, done: make(chan struct{})}
	if proc != "" {
		h.topics[proc] = &topic{ready: make(chan struct{}), fair: map[string]chan struct{}{}, permanent: true}
	}
	return h
}

// ProcReady is closed once the process channel is subscribed (at once if
// the hub has none).
func (h *Hub) ProcReady() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.topics[h.proc]; h.proc != "" && t != nil {
		return t.ready
	}
	return closed
}

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Subscribed reports whether channel (and the process channel, if any) is
// subscribed and confirmed, so that a Subscribe of it needs no round trip.
func (h *Hub) Subscribed(channel string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[channel]
	return t != nil && h.confirmedLocked(t)
}

// confirmedLocked reports whether t and the process channel, if any, are
// subscribed and confirmed. h.mu is held.
func (h *Hub) confirmedLocked(t *topic) bool {
	return t.confirmed && (h.proc == "" || h.topics[h.proc].confirmed)
}

// TakeHandoff returns the token a release handed to owner, if one came.
func (h *Hub) TakeHandoff(owner string) (uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	tok, ok := h.handoffs[owner]
	delete(h.handoffs, owner)
	return tok, ok
}

// Subscribe registers wake to receive a value (non-blocking: give it a
// buffer of 1) on releases published on channel: any release if owner is
// "", or the releases that name owner (and those that name nobody) if
// owner is a fair waiter's key. ready is closed once the server has
// confirmed the subscription; only then is no release missed. stop
// unregisters wake.
func (h *Hub) Subscribe(ctx context.Context, channel, owner string, wake chan struct{}) (ready <-chan struct{}, stop func(), err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, nil, redis.ErrClosed
	}
	t := h.topics[channel]
	if t == nil {
		t = &topic{ready: make(chan struct{}), fair: map[string]chan struct{}{}}
		h.topics[channel] = t
	}
	if owner == "" {
		t.plain = append(t.plain, wake)
	} else {
		t.fair[owner] = wake
		h.owners[owner] = wake
	}
	stop = func() { h.unsubscribe(channel, t, owner, wake) }
	if !h.confirmedLocked(t) {
		// (Re)send SUBSCRIBE until confirmed: it is idempotent, and a
		// previous one may have been lost with its connection. Writes to
		// the pub/sub connection happen under h.mu, so a SUBSCRIBE and an
		// UNSUBSCRIBE of the same channel are never reordered.
		if err := h.connect(ctx, channel); err != nil {
			h.removeLocked(t, owner, wake)
			return nil, nil, err
		}
	}
	return t.ready, stop, nil
}

// connect subscribes channel, creating the connection and its reader on
// first use. h.mu is held.
func (h *Hub) connect(ctx context.Context, channel string) error {
	channels := []string{channel}
	if h.proc != "" && !h.topics[h.proc].confirmed {
		channels = append(channels, h.proc)
	}
	if h.ps != nil {
		return h.ps.Subscribe(ctx, channels...)
	}
	ps := h.rdb.Subscribe(ctx)
	if err := ps.Subscribe(ctx, channels...); err != nil {
		_ = ps.Close()
		return err
	}
	h.ps = ps
	go h.receive(ps)
	go h.linger()
	return nil
}

// pingEvery is how long the pub/sub connection may stay silent before it
// is pinged, so that a broken connection is noticed and re-established
// (go-redis then subscribes its channels again).
const pingEvery = 5 * time.Second

// unsubscribeTimeout bounds dropping idle channels: one command, and if it
// does not go through the channels stay subscribed until the next check,
// which costs only a few unneeded messages.
const unsubscribeTimeout = 5 * time.Second

// reconnectBackoff paces the reads of a pub/sub connection that keeps
// failing (go-redis reconnects it on the next read).
var reconnectBackoff = driver.Backoff{Base: 50 * time.Millisecond, Cap: time.Second, Jitter: 0.5}

// receive reads the pub/sub connection itself — not through go-redis's
// Channel, which would add a goroutine hop to every wake-up.
func (h *Hub) receive(ps *redis.PubSub) {
	ctx := context.Background()
	failures := 0
	for {
		m, err := ps.ReceiveTimeout(ctx, pingEvery)
		if err != nil {
			select {
			case <-h.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				_ = ps.Ping(ctx)
				continue
			}
			if errors.Is(err, redis.ErrClosed) {
				return
			}
			failures++
			select {
			case <-h.done:
				return
			case <-time.After(reconnectBackoff.Delay(failures - 1)):
			}
			continue
		}
		failures = 0
		h.mu.Lock()
		switch m := m.(type) {
		case *redis.Subscription:
			if t := h.topics[m.Channel]; t != nil && m.Kind == "subscribe" {
				if !t.confirmed {
					t.confirmed = true
					close(t.ready)
				} else {
					// Subscribed again after a reconnect: releases may have
					// been missed meanwhile, so everyone looks.
					t.wakeAll()
					if t.permanent {
						for _, c := range h.owners {
							notify(c)
						}
					}
				}
			}
		case *redis.Message:
			if m.Channel == h.proc {
				h.handOff(m.Payload)
			} else if t := h.topics[m.Channel]; t != nil {
				t.deliver(m.Payload)
			}
		}
		h.mu.Unlock()
	}
}

// handOff passes a token handed over by a release to its fair waiter. If
// the waiter has gone, there is nothing to do: it left the queue with
// leave_queue.lua, which passes on a lock handed to it.
func (h *Hub) handOff(payload string) {
	owner, tok, _ := strings.Cut(payload, " ")
	token, err := strconv.ParseUint(tok, 10, 64)
	if c := h.owners[owner]; c != nil && err == nil {
		h.handoffs[owner] = token
		notify(c)
	}
}

func notify(c chan struct{}) bool {
	select {
	case c <- struct{}{}:
		return true
	default:
		return false
	}
}

func (t *topic) deliver(payload string) {
	for _, c := range t.plain {
		if notify(c) {
			break
		}
	}
	if payload == "" {
		for _, c := range t.fair {
			notify(c)
		}
	} else if c := t.fair[payload]; c != nil {
		notify(c)
	}
}

func (t *topic) wakeAll() {
	for _, c := range t.plain {
		notify(c)
	}
	for _, c := range t.fair {
		notify(c)
	}
}

func (h *Hub) unsubscribe(channel string, t *topic, owner string, wake chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.removeLocked(t, owner, wake)
	if owner == "" && len(wake) > 0 {
		// It leaves with a wake-up it will not act on: pass it on.
		for _, c := range t.plain {
			if notify(c) {
				break
			}
		}
	}
}

func (h *Hub) removeLocked(t *topic, owner string, wake chan struct{}) {
	if owner == "" {
		if i := slices.Index(t.plain, wake); i >= 0 {
			t.plain = slices.Delete(t.plain, i, i+1)
		}
	} else if t.fair[owner] == wake {
		delete(t.fair, owner)
		delete(h.owners, owner)
		delete(h.handoffs, owner)
	}
	if t.waiters() == 0 {
		t.idleSince = time.Now()
	}
}

// linger unsubscribes channels that have had no waiter for lingerFor.
func (h *Hub) linger() {
	tick := time.NewTicker(lingerCheck)
	defer tick.Stop()
	for {
		select {
		case <-h.done:
			return
		case <-tick.C:
		}
		h.mu.Lock()
		var idle []string
		for ch, t := range h.topics {
			if !t.permanent && t.waiters() == 0 && time.Since(t.idleSince) > lingerFor {
				idle = append(idle, ch)
				delete(h.topics, ch)
			}
		}
		if len(idle) > 0 && h.ps != nil {
			ctx, cancel := context.WithTimeout(context.Background(), unsubscribeTimeout)
			_ = h.ps.Unsubscribe(ctx, idle...)
			cancel()
		}
		h.mu.Unlock()
	}
}

// Close closes the pub/sub connection.
func (h *Hub) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	close(h.done)
	for _, t := range h.topics {
		t.wakeAll()
	}
	if h.ps != nil {
		return h.ps.Close()
	}
	return nil
}

// WaitReady waits until ready is closed (a subscription is confirmed), ctx
// ends, or timeout passes.
func WaitReady(ctx context.Context, timeout time.Duration, ready <-chan struct{}) error {
	select {
	case <-ready:
		return nil // the usual case: the channel was subscribed before
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("the server did not confirm SUBSCRIBE within %v", timeout)
	}
}
