package redisscript

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
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
type Hub struct {
	rdb redis.UniversalClient

	mu     sync.Mutex
	ps     *redis.PubSub
	topics map[string]*topic
	closed bool
	done   chan struct{}
}

type topic struct {
	ready     chan struct{} // closed when the server confirmed the subscription
	confirmed bool
	plain     []chan struct{}
	fair      map[string]chan struct{}
	idleSince time.Time
}

func (t *topic) waiters() int { return len(t.plain) + len(t.fair) }

// How long an unused channel stays subscribed.
const (
	lingerFor   = 30 * time.Second
	lingerCheck = 10 * time.Second
)

// NewHub returns a hub over rdb; it connects on the first Subscribe.
func NewHub(rdb redis.UniversalClient) *Hub {
	return &Hub{rdb: rdb, topics: map[string]*topic{}, done: make(chan struct{})}
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
	}
	stop = func() { h.unsubscribe(channel, t, owner, wake) }
	if !t.confirmed {
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
	if h.ps != nil {
		return h.ps.Subscribe(ctx, channel)
	}
	ps := h.rdb.Subscribe(ctx)
	if err := ps.Subscribe(ctx, channel); err != nil {
		_ = ps.Close()
		return err
	}
	h.ps = ps
	go h.dispatch(ps.ChannelWithSubscriptions(redis.WithChannelSize(1024)))
	go h.linger()
	return nil
}

func (h *Hub) dispatch(msgs <-chan any) {
	for m := range msgs {
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
				}
			}
		case *redis.Message:
			if t := h.topics[m.Channel]; t != nil {
				t.deliver(m.Payload)
			}
		}
		h.mu.Unlock()
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
			if t.waiters() == 0 && time.Since(t.idleSince) > lingerFor {
				idle = append(idle, ch)
				delete(h.topics, ch)
			}
		}
		if len(idle) > 0 && h.ps != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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
