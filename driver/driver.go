package driver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Package dlock re-exports them under the same names.
var (
	// ErrNotAcquired: a non-waiting acquire found the lock held by someone else.
	ErrNotAcquired = errors.New("dlock: lock is held by another owner")
	// ErrLeaseLost: the caller's lease ended (expired, broken, or its session
	// died) before it was released; the lock may now belong to someone else.
	ErrLeaseLost = errors.New("dlock: lease lost")
	// ErrSessionLost: the lease ended with the backend session it was
	// tied to (a ZooKeeper session expired, a database connection that
	// held it was closed); it wraps ErrLeaseLost. Session backends return
	// it, or fire Grant.Lost with it, so that the loss's cause can be told
	// apart from a Break (dlock.LossCause).
	ErrSessionLost = fmt.Errorf("%w: its session ended", ErrLeaseLost)
	// ErrNotHeld: there is no lease to act on (already released, or Break on a
	// free lock).
	ErrNotHeld = errors.New("dlock: lock not held")
	// ErrInvalidName: the lock name breaks the naming rule (1..1024 bytes of
	// valid UTF-8).
	ErrInvalidName = errors.New("dlock: invalid lock name")
	// ErrUnavailable: the backend could not be reached or failed; it wraps the
	// backend's cause.
	ErrUnavailable = errors.New("dlock: backend unavailable")
	// ErrUnsupported: the backend cannot do what was asked (for example fair
	// waiting on a backend without a queue).
	ErrUnsupported = errors.New("dlock: not supported by this backend")
)

// Driver is implemented by each backend. Its methods are called concurrently.
type Driver interface {
	// Acquire takes the lock req.Name for req.Owner. When req.Wait is false it
	// makes one attempt and returns ErrNotAcquired if the lock is held. When
	// req.Wait is true it blocks until the lock is granted or ctx ends; a
	// return with an error must leave nothing behind (no queued entry, no lock
	// granted later). Backends without a native queue implement waiting with
	// AcquireByRetry.
	Acquire(ctx context.Context, req Request) (Grant, error)

	// Extend renews a held lease for ttl, measured by the backend's clock
	// from the moment the request reaches it. It returns ErrLeaseLost if the
	// lease no longer belongs to h.Owner.
	Extend(ctx context.Context, h Held, ttl time.Duration) error

	// Release frees a held lock and wakes its waiters. It returns ErrLeaseLost
	// if the lock no longer belongs to h.Owner, and never frees another
	// owner's lock.
	Release(ctx context.Context, h Held) error

	// Inspect reports the state of one lock. A free lock is Info{Name: name}.
	Inspect(ctx context.Context, name string) (Info, error)

	// List reports the locks whose names start with prefix that are held or
	// waited on.
	List(ctx context.Context, prefix string) ([]Info, error)

	// Break frees the lock whoever holds it; the holder's next Extend returns
	// ErrLeaseLost and the next grant gets a higher token. It returns
	// ErrNotHeld when the lock is free.
	Break(ctx context.Context, name string) error

	// Capabilities states what this backend promises.
	Capabilities() Capabilities

	// Close releases the driver's connections. Held leases are not released.
	Close() error
}

// Request asks for a lock.
type Request struct {
	Name  string        // validated by the portable layer: 1..1024 bytes of UTF-8
	Owner string        // 32 hex digits (128 random bits), unique per grant
	TTL   time.Duration // lease length; at least Capabilities.MinTTL
	Wait  bool          // block until granted, rather than fail with ErrNotAcquired
	Fair  bool          // grant waiters in arrival order (only if Capabilities.Fair)
	// Holder is opaque metadata about the owner (JSON from the portable
	// layer), stored with the lock and returned by Inspect.
	Holder []byte
	// Limit is how many leases of Name may be held at once: 0 or 1 for a
	// mutex, n > 1 for a semaphore of n permits (only if
	// Capabilities.Semaphore). A request is granted only while fewer
	// than its own Limit leases are held, so when the clients of one name
	// disagree (the limit was changed while some held it), holders above
	// the lower limit keep their leases and no one is granted a new one
	// until enough have been released. Tokens of one name increase
	// strictly in grant order, whichever permit a grant takes. The
	// portable layer also writes Limit into Holder (see HolderLimit), so
	// that Inspect can tell holders from waiters.
	Limit int
	// Shared asks for a reader's lease of a read-write lock (only if
	// Capabilities.RWMutex): it is granted while no exclusive lease of
	// Name is held, nor waited for ahead of it — a waiting writer is not
	// passed by readers that come after it, so a stream of readers cannot
	// starve it. An exclusive request is granted while no lease of any
	// kind is held. Tokens of one name increase strictly in grant order
	// across readers and writers: a writer's token is above that of every
	// reader granted before it, and every later reader's above the
	// writer's. The portable layer asks for read-write locks with Fair
	// set, and writes Shared into Holder (see HolderShared).
	Shared bool
}

// HolderShared reports whether a Request.Holder written by the portable
// layer is a reader's (the JSON field "shared"): see HolderLimit.
func HolderShared(holder []byte) bool {
	return bytes.Contains(holder, []byte(`"shared":true`))
}

// HolderLimit returns the Limit recorded in a Request.Holder written by
// the portable layer (the JSON field "limit"), or 1 when there is none:
// a backend that keeps one queue of contenders per name learns from it
// whether an entry holds (its place in the queue is below its limit) or
// waits.
func HolderLimit(holder []byte) int {
	i := bytes.Index(holder, []byte(`"limit":`))
	if i < 0 {
		return 1
	}
	n := 0
	for _, c := range holder[i+len(`"limit":`):] {
		if c < '0' || c > '9' || n > 1<<20 {
			break
		}
		n = n*10 + int(c-'0')
	}
	return max(n, 1)
}

// Grant is a successful Acquire.
type Grant struct {
	// Token is the fencing token: strictly greater than every token granted
	// before for the same name (see Capabilities.DurableFencing).
	Token uint64
	// TTL is the lease the backend actually granted, if it differs from the
	// one requested (an engine may round it up); zero means as requested.
	TTL time.Duration
	// Since is when the lease's TTL began, on the local monotonic clock: the
	// send time of the request that created or last extended it (for a
	// queued acquire, the last renewal while waiting). Zero means the time
	// Acquire was called, which is right for a single-round-trip acquire.
	Since time.Time
	// Lost, if not nil, is fired by the backend when it learns by itself
	// that the lease is gone (a session expired, a watch saw the key vanish).
	Lost *Signal
	// Recovered reports that the previous holder's lease ended without a
	// release (expiry, crash or Break). The portable layer applies the
	// lock-delay option only then. Backends that cannot tell leave it false
	// and say so with Capabilities.LockDelay = false.
	Recovered bool
	// Handle is backend state for this grant, handed back in Held.
	Handle any
}

// Held identifies a granted lease to Extend and Release.
type Held struct {
	Name   string
	Owner  string
	Token  uint64
	Handle any // Grant.Handle
}

// Info is what Inspect and List report about a lock.
type Info struct {
	Name   string
	Held   bool
	Token  uint64 // the holder's token, or 0 when free
	Holder []byte // the holder's Request.Holder
	// ExpiresIn is the time left on the holder's lease by the backend's
	// clock, or 0 when the backend does not know (session-based locks).
	ExpiresIn time.Duration
	// Waiters are the Request.Holder metadata of queued waiters, in order,
	// where the backend keeps a queue; nil otherwise.
	Waiters [][]byte
	// Permits lists every holder of a semaphore (a name held with
	// Request.Limit > 1) or every reader of a read-write lock, in grant
	// order, the first one also in Token, Holder and ExpiresIn; nil for a
	// mutex (and a read-write lock held by its writer).
	Permits []Permit
}

// Permit is one holder of a semaphore, as Inspect reports it.
type Permit struct {
	Token     uint64
	Holder    []byte
	ExpiresIn time.Duration // 0 when the backend does not know
}

// Capabilities states what a backend promises; dlocktest checks each claim.
type Capabilities struct {
	// Fair: Request.Fair is honoured (FIFO granting).
	Fair bool
	// DurableFencing: tokens keep increasing across a restart of the backend.
	DurableFencing bool
	// Sessions: a crashed holder's lock is freed when its session ends,
	// possibly well before its TTL.
	Sessions bool
	// LockDelay: Grant.Recovered is reported.
	LockDelay bool
	// Semaphore: Request.Limit > 1 is honoured (counted leases), and
	// Inspect reports their holders in Info.Permits.
	Semaphore bool
	// RWMutex: Request.Shared is honoured (readers and writers, writer
	// preference), and Inspect reports the readers in Info.Permits.
	RWMutex bool
	// MinTTL is the shortest lease the backend grants.
	MinTTL time.Duration
	// InProcess: the lock state lives in this process (memlock); the
	// cross-process parts of the conformance suite do not apply.
	InProcess bool
}

// Watcher is implemented by a backend that can report every change of a
// lock's holder in order, with none left out, where its engine keeps the
// history of changes (etcd's revisions). dlock's Election.Observe uses it;
// without it, Observe reads the lock at intervals and can miss a holder
// that came and went between two reads.
type Watcher interface {
	// WatchHolder sends the state of the lock name when the watch begins,
	// then its state after every change of its holder (a grant with a new
	// token, or the lock freed), in the order they happened, until ctx
	// ends; then it closes the channel. Info.ExpiresIn may be 0. If the
	// backend loses the history it needs to leave nothing out (etcd's
	// compaction), the channel is closed before ctx ends.
	WatchHolder(ctx context.Context, name string) (<-chan Info, error)
}

// BatchExtender is implemented by a backend that can renew many leases in
// one request to its engine. A client holding many leases that come due
// together (a million names taken in a few minutes) renews them with it,
// up to MaxBatch at once, instead of one request each: the renewals of N
// leases then cost N/MaxBatch round trips, where one request each could
// take the engine's whole capacity. The portable layer uses it only for
// renewals that queue behind a full set of requests in flight, so a lone
// renewal is still one Extend, with no added delay.
type BatchExtender interface {
	// ExtendBatch renews each lease of b for its TTL, as Extend would, and
	// returns one error per lease, in order: nil when it was renewed, one
	// wrapping ErrLeaseLost when it no longer belongs to its owner, any
	// other when its renewal could not be settled (the portable layer
	// retries it, as a failed Extend). ctx bounds the whole batch.
	ExtendBatch(ctx context.Context, b []Extension) []error
}

// Extension is one lease of a BatchExtender.ExtendBatch.
type Extension struct {
	Held Held
	TTL  time.Duration
}

// MaxBatch is the most leases the portable layer renews in one
// ExtendBatch. A backend whose engine bounds a request's size (a packet,
// an argument count) must accept at least this many of the largest names
// (1024 bytes).
const MaxBatch = 256
