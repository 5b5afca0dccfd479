package zklock

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
)

// Driver is a dlock driver over one ZooKeeper connection and session.
type Driver struct {
	conn    *zk.Conn
	ownConn bool // Close closes conn
	root    string
	compat  string // "", Kazoo or Curator: the layout of lock nodes
	acl     []zk.ACL

	sessionTimeout atomic.Int64 // negotiated, in nanoseconds
	minTTL         time.Duration

	closed    chan struct{}
	closeOnce sync.Once

	// The granted nodes, by path, whose watch and session events the
	// driver dispatches (see Driver.event). events: the connection's
	// events reach the driver (Open made it); a driver over the caller's
	// connection passes on each watch's event with a goroutine instead.
	events bool
	// connection counts the connections of the session, from 1: a
	// disconnection (an event the driver sees only if events) moves it on.
	connection atomic.Int64
	heldMu     sync.Mutex
	held       map[string]*lockNode
	// deadlines runs the held nodes' lease deadlines, on one timer.
	deadlines driver.Alarms[*lockNode]

	syncMu   sync.Mutex
	nextSync *syncRound // the sync that checks arriving now wait for, not yet sent
	syncing  bool       // syncLoop runs

	aliveMu sync.Mutex
	alive   struct {
		sent    time.Time // send time of the last request the server answered
		session int64     // the session it was answered in
	}
}

// New returns a driver over a connection the caller made and keeps
// owning: Close leaves it open. WithSessionTimeout is required. Its errors
// wrap dlock.ErrInvalidOption.
func New(conn *zk.Conn, opts ...Option) (*Driver, error) {
	if conn == nil {
		return nil, fmt.Errorf("%w: zklock.New: conn is nil", dlock.ErrInvalidOption)
	}
	d := newDriver()
	d.conn = conn
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(d); err != nil {
			return nil, err
		}
	}
	if d.minTTL == 0 {
		return nil, fmt.Errorf("%w: zklock.New: give WithSessionTimeout, the session timeout asked of zk.Connect", dlock.ErrInvalidOption)
	}
	return d, nil
}

func newDriver() *Driver {
	d := &Driver{root: DefaultRoot, acl: zk.WorldACL(zk.PermAll), closed: make(chan struct{}), held: map[string]*lockNode{}}
	d.connection.Store(1)
	return d
}

// session is the negotiated session timeout.
func (d *Driver) session() time.Duration { return time.Duration(d.sessionTimeout.Load()) }

// leaseTTL is the lease a grant carries: two thirds of the session timeout
// (see the package documentation).
func (d *Driver) leaseTTL() time.Duration { return d.session() * 2 / 3 }

// Capabilities: FIFO queue, czxid tokens, sessions; semaphores and
// read-write locks in dlock's own layout only (see errCompatSemaphore).
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Fair: true, DurableFencing: true, Sessions: true, Semaphore: d.compat == "", RWMutex: d.compat == "", MinTTL: d.minTTL}
}

// Conn returns the driver's ZooKeeper connection.
func (d *Driver) Conn() *zk.Conn { return d.conn }

// Close stops the driver's background work and, if Open made the
// connection, closes it, which ends the session: ZooKeeper deletes the
// session's nodes, so locks still held are freed at once.
func (d *Driver) Close() error {
	d.closeOnce.Do(func() {
		close(d.closed)
		d.heldMu.Lock()
		held := make([]*lockNode, 0, len(d.held))
		for _, n := range d.held {
			held = append(held, n)
		}
		d.heldMu.Unlock()
		for _, n := range held {
			n.end() // nothing to mind any more: forget its deadline
		}
		if d.ownConn {
			d.conn.Close()
		}
	})
	return nil
}

func (d *Driver) isClosed() bool {
	select {
	case <-d.closed:
		return true
	default:
		return false
	}
}

// confirm records that a request sent at sent was answered.
func (d *Driver) confirm(sent time.Time) {
	s := d.conn.SessionID()
	d.aliveMu.Lock()
	if s != d.alive.session || sent.After(d.alive.sent) {
		d.alive.sent, d.alive.session = sent, s
	}
	d.aliveMu.Unlock()
}

// confirmedSince returns the send time of the last answered request of
// session, or zero.
func (d *Driver) confirmedSince(session int64) time.Time {
	d.aliveMu.Lock()
	defer d.aliveMu.Unlock()
	if d.alive.session != session {
		return time.Time{}
	}
	return d.alive.sent
}

// parentOf is the parent node of a lock name's queue: in a compat layout
// the name itself, which must be a valid ZooKeeper path.
func (d *Driver) parentOf(name string) (string, error) {
	if d.compat != "" {
		return compatPath(name)
	}
	return d.lockPath(name), nil
}

// lockPath is the parent node of a lock name's queue in dlock's layout.
func (d *Driver) lockPath(name string) string { return d.root + "/" + escapeName(name) }
