package dlock

import (
	"context"
	"fmt"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/dlock/dlock/driver"
)

// Info is the state of one lock, as Inspect and List report it.
type Info struct {
	Name string
	// Held reports whether someone holds the lock.
	Held bool
	// Token is the holder's fencing token.
	Token uint64
	// Holder describes the holder, as it described itself.
	Holder Holder
	// ExpiresIn is the time left on the holder's lease by the backend's
	// clock, or 0 where the backend does not say (session-based locks).
	ExpiresIn time.Duration
	// Waiters are the queued waiters in order, on backends that keep a queue.
	Waiters []Holder
	// Permits are the holders of a semaphore (Client.Semaphore) in grant
	// order, the first also in Token, Holder and ExpiresIn; nil for a
	// mutex. Holder.Limit is the number of permits each was granted
	// under.
	Permits []Permit
}

// Permit is one holder of a semaphore.
type Permit struct {
	Token     uint64
	Holder    Holder
	ExpiresIn time.Duration // 0 where the backend does not say
}

func infoFrom(di driver.Info) Info {
	in := Info{Name: di.Name, Held: di.Held, Token: di.Token, ExpiresIn: di.ExpiresIn}
	if di.Held {
		in.Holder = decodeHolder(di.Holder)
	}
	for _, w := range di.Waiters {
		in.Waiters = append(in.Waiters, decodeHolder(w))
	}
	for _, p := range di.Permits {
		in.Permits = append(in.Permits, Permit{Token: p.Token, Holder: decodeHolder(p.Holder), ExpiresIn: p.ExpiresIn})
	}
	return in
}

// Inspect reports who holds the lock name, its token and expiry, and who
// waits for it.
func (c *Client) Inspect(ctx context.Context, name string) (Info, error) {
	if err := c.usable(name); err != nil {
		return Info{}, err
	}
	di, err := c.d.Inspect(ctx, name)
	if err != nil {
		return Info{}, classify(ctx, err)
	}
	return infoFrom(di), nil
}

// List reports the locks whose names begin with prefix ("" for all) that
// are held or waited on.
func (c *Client) List(ctx context.Context, prefix string) ([]Info, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	if len(prefix) > MaxNameLen || !utf8.ValidString(prefix) {
		return nil, fmt.Errorf("%w: prefix must be at most %d bytes of valid UTF-8", ErrInvalidName, MaxNameLen)
	}
	dis, err := c.d.List(ctx, prefix)
	if err != nil {
		return nil, classify(ctx, err)
	}
	out := make([]Info, 0, len(dis))
	for _, di := range dis {
		out = append(out, infoFrom(di))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Break frees the lock name whoever holds it — an administrator's tool for
// a stuck holder. The holder learns at its next renewal (within about a
// third of its TTL, at once on some backends): its Done channel closes and
// its Do context is cancelled. The next grant gets a higher token, so the
// broken holder's late writes can be refused. Break of a free lock returns
// ErrNotHeld.
func (c *Client) Break(ctx context.Context, name string) error {
	if err := c.usable(name); err != nil {
		return err
	}
	return classify(ctx, c.d.Break(ctx, name))
}
