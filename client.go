package dlock

import (
	"context"
	"sync"

	"github.com/dlock/dlock/driver"
)

// Client is a connection to one backend. It is safe for concurrent use.
type Client struct {
	d    driver.Driver
	caps driver.Capabilities
	o    options

	mu     sync.Mutex
	leases map[*Lease]struct{}
	closed bool

	sched    driver.Alarms[*scheduled] // renewals and expiry checks of the leases
	renewers renewals                  // the renewals in flight
}

// New returns a Client over a backend driver (for example
// redislock.New(rdb)). Options given here are the defaults of every Mutex.
func New(d driver.Driver, opts ...Option) *Client {
	c := &Client{d: d, caps: d.Capabilities(), o: defaultOptions().with(opts), leases: map[*Lease]struct{}{}}
	c.renewers.batch, _ = d.(driver.BatchExtender)
	c.renewers.limit = maxRenewals
	if c.renewers.batch != nil {
		c.renewers.limit = maxBatchRenewals
	}
	return c
}

// Capabilities reports what the backend promises.
func (c *Client) Capabilities() driver.Capabilities { return c.caps }

// Driver returns the backend driver, for backend-specific operations.
func (c *Client) Driver() driver.Driver { return c.d }

// Close releases the leases this client still holds, including those
// whose Unlock failed and whose deadline has not passed, and closes the
// backend connection. It is best effort, within driver.CleanupTimeout, and
// sends at most as many releases at once as renewals (64): a client
// holding a million locks neither starts a million goroutines nor sends a
// million requests at once. Leases it could not release stay held on the
// backend until their TTL runs out; the client stops renewing them, and
// each ends (Done) at its deadline, lost.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	held := make([]*Lease, 0, len(c.leases))
	for l := range c.leases {
		held = append(held, l)
	}
	c.mu.Unlock()
	ctx, cancel := driver.CleanupContext(context.Background())
	defer cancel()
	next := make(chan *Lease)
	var wg sync.WaitGroup
	for range min(len(held), maxRenewals) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l := range next {
				if ctx.Err() != nil {
					// Out of time: an Unlock now would make a clean-up
					// of its own, one CleanupTimeout per lease.
					l.abandon()
					continue
				}
				_ = l.Unlock(ctx)
			}
		}()
	}
	for _, l := range held {
		next <- l
	}
	close(next)
	wg.Wait()
	return c.d.Close()
}

func (c *Client) track(l *Lease) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.leases[l] = struct{}{}
	return true
}

func (c *Client) untrack(l *Lease) {
	c.mu.Lock()
	delete(c.leases, l)
	c.mu.Unlock()
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *Client) usable(name string) error {
	if c.isClosed() {
		return ErrClosed
	}
	return ValidateName(name)
}
