package pglock

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
)

// DefaultTable is the lease table's name when none is given.
const DefaultTable = "dlock_leases"

// MinTTL is the shortest lease this backend grants.
const MinTTL = 100 * time.Millisecond

// DefaultWaiterTTL is how long a queued waiter's place lives without
// being renewed (see WithWaiterTTL).
const DefaultWaiterTTL = 2 * time.Second

// DefaultOpTimeout bounds each operation's statements when WithOpTimeout
// does not say otherwise.
const DefaultOpTimeout = 10 * time.Second

func init() {
	dlock.Register("postgres", open)
	dlock.Register("postgresql", open)
}

// Option configures a Driver.
type Option func(*config) error

type config struct {
	table     string
	session   bool
	opTimeout time.Duration
	waiterTTL time.Duration
}

// WithTable sets the lease table's name: "name" (in the first schema of the
// search path) or "schema.name". The token sequence is the table's name
// with "_token_seq" appended, in the same schema, and the permits table of
// semaphores the table's name with "_permits" appended. Default
// DefaultTable.
func WithTable(name string) Option {
	return func(c *config) error {
		c.table = name
		return nil
	}
}

// WithOpTimeout bounds the statements of each operation (an attempt to
// acquire, Extend, Release, Inspect, List, Break, and connecting a session
// lock's connection): a server that does not answer within d — frozen, or
// cut off without the connection breaking — makes the operation fail with
// an error wrapping driver.ErrUnavailable and context.DeadlineExceeded,
// while the caller's context is still live. A session lock waits in the
// server's lock queue in slices of d (lock_timeout), so that a silent
// server is noticed there too. Default DefaultOpTimeout.
func WithOpTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: pglock: op timeout %v: want a positive duration", dlock.ErrInvalidOption, d)
		}
		c.opTimeout = d
		return nil
	}
}

// WithWaiterTTL sets how long a queued waiter's place lives without being
// renewed: a waiter renews it every third of it while it waits, and a
// waiter that stops (its process killed, its connection cut) is dropped
// from the queue when it runs out. Default DefaultWaiterTTL; at least
// 3 × MinTTL.
func WithWaiterTTL(d time.Duration) Option {
	return func(c *config) error {
		if d < 3*MinTTL {
			return fmt.Errorf("%w: pglock: waiter TTL %v: want at least %v", dlock.ErrInvalidOption, d, 3*MinTTL)
		}
		c.waiterTTL = d
		return nil
	}
}

// WithSessionLocks makes every lock a session-scoped advisory lock held on
// a connection of its own, freed the moment that connection ends; see the
// package documentation for the trade-off.
func WithSessionLocks() Option {
	return func(c *config) error {
		c.session = true
		return nil
	}
}

// Driver is the PostgreSQL backend. Make one with New or dlock.Open.
type Driver struct {
	pool    *pgxpool.Pool
	ownPool bool   // made by Open: closed by Close
	ident   string // the table, quoted, as configured
	seq     string // the sequence, quoted, as configured
	canon   string // the table's schema-qualified name, quoted: set on first use
	channel string // the NOTIFY channel of this table: set on first use
	session bool
	timeout time.Duration // bounds each operation's statements

	acquireSQL, extendSQL, extendManySQL, releaseSQL, inspectSQL, listSQL, breakSQL, createSQL string

	// Semaphores: the permits table (quoted, as configured) and its
	// statements, bound on first use like the others.
	permits                                           string
	permitAcquireSQL, permitExtendSQL                 string
	permitReleaseSQL, permitInspectSQL, permitListSQL string
	permitBreakSQL                                    string
	permitsOK                                         atomic.Bool // the permits table exists and this role may use it

	// The queue: the waiters table (quoted, as configured), this driver's
	// reply channel for hand-offs (set on first use) and the statements.
	waiters, reply                             string
	waiterTTL                                  time.Duration
	lockNameSQL, queueAcquireSQL, handOffSQL   string
	freeSQL                                    string
	leaveSQL, queuePermitSQL, waiterInspectSQL string
	queueReaderSQL, fastAcquireSQL             string
	joinQueueAloneSQL                          string
	waitersOK                                  atomic.Bool // the waiters table exists and this role may use it
	// handedOff is the name whose last release by this driver handed the
	// lock to a waiter, if the last release of that name did: the next
	// Lock of it goes to the queue at once (see acquireQueued).
	handedOff atomic.Pointer[string]

	migrateMu sync.Mutex
	migrated  atomic.Bool

	listen   *listener
	sessions *sessionSet
}

// New returns a driver that keeps its leases in a table of the database
// pool connects to. The table and its sequence are created on first use if
// they do not exist (see Migrate). The pool stays the caller's: Close does
// not close it. Waiting uses one further connection of its own (LISTEN),
// and session locks one per held lock, made from the pool's configuration.
func New(pool *pgxpool.Pool, opts ...Option) (*Driver, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: pglock.New: pool is nil", dlock.ErrInvalidOption)
	}
	c := config{table: DefaultTable, opTimeout: DefaultOpTimeout, waiterTTL: DefaultWaiterTTL}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	ident, seq, err := quoteTable(c.table)
	if err != nil {
		return nil, err
	}
	permits, waiters := sideTable(c.table, "_permits"), sideTable(c.table, "_waiters")
	d := &Driver{
		pool:      pool,
		ident:     ident,
		seq:       seq,
		permits:   permits,
		waiters:   waiters,
		waiterTTL: c.waiterTTL,
		session:   c.session,
		timeout:   c.opTimeout,
		createSQL: bind(createSQL, ident, seq, permits, waiters),
	}
	// The statements, keys and channel are bound to the table's full name
	// once the server has resolved it (bindCanonical, on first use).
	d.listen = newListener(pool.Config().ConnConfig, d.timeout)
	d.sessions = &sessionSet{conns: map[*session]struct{}{}}
	return d, nil
}

// quoteTable checks a table name ("name" or "schema.name") and returns the
// quoted identifiers of the table and its sequence.
func quoteTable(name string) (table, seq string, err error) {
	parts := strings.Split(name, ".")
	bad := len(parts) > 2
	for _, p := range parts {
		// 63 bytes is PostgreSQL's identifier limit; the sequence's name
		// adds 10 to the table's.
		bad = bad || p == "" || strings.ContainsRune(p, 0) || len(p) > 63
	}
	if bad || len(parts[len(parts)-1]) > 63-len("_token_seq") {
		return "", "", fmt.Errorf("%w: pglock table %q: want \"name\" or \"schema.name\", each part 1..63 bytes without NUL, the name at most 53", dlock.ErrInvalidOption, name)
	}
	seqParts := append([]string(nil), parts...)
	seqParts[len(seqParts)-1] += "_token_seq"
	return pgx.Identifier(parts).Sanitize(), pgx.Identifier(seqParts).Sanitize(), nil
}

// sideTable returns the quoted identifier of the permits or waiters table
// of the table name (already checked by quoteTable): the table's name
// followed by suffix, in the same schema.
func sideTable(name, suffix string) string {
	parts := strings.Split(name, ".")
	parts[len(parts)-1] += suffix
	return pgx.Identifier(parts).Sanitize()
}

// pgxParams are the URL parameters pgx reads itself (libpq's, pgx's and
// pgxpool's), and the server settings a URL commonly carries.
var pgxParams = []string{
	"host", "port", "database", "dbname", "user", "password", "passfile", "connect_timeout",
	"sslmode", "sslkey", "sslcert", "sslrootcert", "sslpassword", "sslsni",
	"krbspn", "krbsrvname", "target_session_attrs", "service", "servicefile",
	"statement_cache_capacity", "description_cache_capacity", "default_query_exec_mode",
	"pool_max_conns", "pool_min_conns", "pool_min_idle_conns", "pool_max_conn_lifetime",
	"pool_max_conn_lifetime_jitter", "pool_max_conn_idle_time", "pool_health_check_period",
	"application_name", "search_path", "options",
}

// open is the dlock.Open function for postgres:// and postgresql:// URLs.
func open(ctx context.Context, u *url.URL) (driver.Driver, error) {
	var opts []Option
	var opTimeout time.Duration
	ps := driver.Params{Backend: "postgres", List: []driver.Param{
		{Name: "table", Usage: "the lease table", Set: func(v string) error {
			opts = append(opts, WithTable(v))
			return nil
		}},
		{Name: "mode", Usage: "lease or session", Set: func(v string) error {
			switch v {
			case "", "lease":
			case "session":
				opts = append(opts, WithSessionLocks())
			default:
				return errors.New("want lease or session")
			}
			return nil
		}},
		{Name: "op_timeout", Usage: "bound of each operation's statements", Set: driver.DurationParam(&opTimeout)},
	}}
	// The rest of the URL is pgx's: host, user, password, database, sslmode
	// and the other libpq parameters, pool_max_conns and friends; server
	// settings go in options=-c name=value, as with libpq.
	for _, n := range pgxParams {
		ps.List = append(ps.List, driver.Param{Name: n, Usage: "pgx's"})
	}
	q, err := ps.Parse(ctx, u.Query())
	if err != nil {
		return nil, err
	}
	if opTimeout > 0 {
		opts = append(opts, WithOpTimeout(opTimeout))
	}
	pu := *u
	pu.RawQuery = q.Encode()
	cfg, err := pgxpool.ParseConfig(pu.String())
	if err != nil {
		return nil, fmt.Errorf("%w: pglock URL: %v", dlock.ErrInvalidOption, err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: pglock: %w", driver.ErrUnavailable, err)
	}
	d, err := New(pool, opts...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	d.ownPool = true
	pctx, cancel := d.bound(ctx)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		d.Close()
		where := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
		return nil, d.fail(ctx, fmt.Errorf("%w: postgres %s: %w", driver.ErrUnavailable, where, err))
	}
	return d, nil
}

// Migrate creates the lease table, the token sequence, the permits table
// of semaphores and the waiters table of the queue if they do not exist. It needs the CREATE privilege on the schema; run it once as the
// schema's owner where the locking role has only table privileges. Without
// it the first operation does the same.
func (d *Driver) Migrate(ctx context.Context) error {
	d.migrateMu.Lock()
	defer d.migrateMu.Unlock()
	return d.migrateLocked(ctx, true)
}

// ensure creates the table on first use.
func (d *Driver) ensure(ctx context.Context) error {
	if d.migrated.Load() {
		return nil
	}
	d.migrateMu.Lock()
	defer d.migrateMu.Unlock()
	if d.migrated.Load() {
		return nil
	}
	return d.migrateLocked(ctx, false)
}

func (d *Driver) migrateLocked(ctx context.Context, create bool) error {
	octx, cancel := d.bound(ctx)
	defer cancel()
	for attempt := 0; ; attempt++ {
		r, err := d.resolve(octx)
		if err != nil {
			return d.fail(ctx, err)
		}
		if r.table != "" && r.seq != "" && !create {
			if !r.permitsExist && attempt < 4 {
				// A table made by a version without semaphores: add the
				// permits table beside it. A role that may not is left
				// with mutexes, as before; a semaphore then says what to
				// run (permitsReady).
				if err := d.createPermits(octx, r); err == nil || isRace(err) {
					continue // look again
				} else if !isPrivilege(err) {
					return d.fail(ctx, err)
				}
			}
			d.bindCanonical(r)
			d.migrated.Store(true)
			return nil
		}
		if attempt >= 4 {
			return fmt.Errorf("%w: pglock: the lock table %s or its sequence %s is still missing after creating them", driver.ErrUnavailable, d.ident, d.seq)
		}
		// CREATE … IF NOT EXISTS checks the schema privilege even when the
		// object exists, hence the look first.
		_, err = d.pool.Exec(octx, d.createSQL, pgx.QueryExecModeSimpleProtocol)
		switch {
		case err == nil:
			create = false // look up what was made, by its full name
		case isRace(err):
			// Another client created it at the same moment: look again.
		case isPrivilege(err):
			return d.privilegeError(ctx, err, true)
		default:
			return d.fail(ctx, err)
		}
	}
}

// resolved is what resolve found.
type resolved struct {
	table, seq   string // schema-qualified and quoted, or "" if missing
	permits      string // the permits table's name beside table, quoted
	waiters      string // the waiters table's name beside table, quoted
	permitsExist bool   // the permits and the waiters tables exist
	permitsOK    bool   // the permits table exists and this role may use it
	waitersOK    bool   // the waiters table exists and this role may use it
}

// resolve returns the schema-qualified, quoted names of the table and the
// sequence as the server resolves the configured spelling, or "" for
// either that does not exist, and the state of the permits table.
func (d *Driver) resolve(ctx context.Context) (resolved, error) {
	var (
		tn, tr, sn, sr *string
		r              resolved
	)
	if err := d.pool.QueryRow(ctx, resolveSQL, d.ident, d.seq).Scan(&tn, &tr, &sn, &sr, &r.permitsExist, &r.permitsOK, &r.waitersOK); err != nil {
		return resolved{}, err
	}
	if tn != nil && tr != nil {
		r.table = pgx.Identifier{*tn, *tr}.Sanitize()
		r.permits = pgx.Identifier{*tn, *tr + "_permits"}.Sanitize()
		r.waiters = pgx.Identifier{*tn, *tr + "_waiters"}.Sanitize()
	}
	if sn != nil && sr != nil {
		r.seq = pgx.Identifier{*sn, *sr}.Sanitize()
	}
	return r, nil
}

// createPermits makes the permits and waiters tables beside the resolved
// table.
func (d *Driver) createPermits(ctx context.Context, r resolved) error {
	_, err := d.pool.Exec(ctx, bind(createPermitsSQL, r.table, r.seq, r.permits, r.waiters), pgx.QueryExecModeSimpleProtocol)
	return err
}

// permitsReady reports whether semaphores can be used: the permits table
// exists and this role may use it. A driver that found it missing or
// forbidden looks again (and tries to make it) at each semaphore request,
// so that a Migrate or a GRANT run since is seen without a restart.
func (d *Driver) permitsReady(ctx context.Context) error {
	return d.sideTableReady(ctx, &d.permitsOK, func(r resolved) bool { return r.permitsOK }, d.permitsError)
}

// sideTableReady is permitsReady and waitersReady: ok caches that the
// table usable reports on can be used; refuse explains why not.
func (d *Driver) sideTableReady(ctx context.Context, ok *atomic.Bool, usable func(resolved) bool, refuse func(context.Context, error) error) error {
	if ok.Load() {
		return nil
	}
	d.migrateMu.Lock()
	defer d.migrateMu.Unlock()
	if ok.Load() {
		return nil
	}
	octx, cancel := d.bound(ctx)
	defer cancel()
	var cause error
	for attempt := 0; attempt < 4; attempt++ {
		r, err := d.resolve(octx)
		if err != nil {
			return d.fail(ctx, err)
		}
		if r.table == "" {
			return fmt.Errorf("%w: pglock: the lock table %s is missing", driver.ErrUnavailable, d.ident)
		}
		if usable(r) {
			ok.Store(true)
			return nil
		}
		if r.permitsExist { // both tables exist: the role may not use them
			cause = errors.New("permission denied")
			break
		}
		if cause = d.createPermits(octx, r); cause != nil && !isRace(cause) {
			if !isPrivilege(cause) {
				return d.fail(ctx, cause)
			}
			break
		}
	}
	return refuse(ctx, cause)
}

// permitsError explains that the role may not make or use the permits
// table, and what to run.
func (d *Driver) permitsError(ctx context.Context, cause error) error {
	role := d.role(ctx)
	return fmt.Errorf("%w: pglock: role %s may not use semaphores: their permits table %s is missing or not granted (%v); run Migrate once as the schema's owner, then GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO %s",
		driver.ErrUnavailable, role, d.permits, cause, d.permits, role)
}

// role returns the connecting role, quoted, for an error message.
func (d *Driver) role(ctx context.Context) string {
	ctx, cancel := d.bound(ctx)
	defer cancel()
	var r *string
	if err := d.pool.QueryRow(ctx, "SELECT current_user::text").Scan(&r); err != nil || r == nil {
		return "<role>"
	}
	return pgx.Identifier{*r}.Sanitize()
}

// isRace reports a CREATE that lost to another client's.
func isRace(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "23505" || pe.Code == "42P07")
}

// isPrivilege reports a missing privilege.
func isPrivilege(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42501"
}

// bindCanonical makes the statements, the advisory keys and the NOTIFY
// channel use the table's schema-qualified name, so that every client of
// one table agrees on them however it spells the table ("dlock_leases",
// "public.dlock_leases"): two clients that hashed different spellings
// would take different advisory locks for one name, and listen on
// different channels. The caller holds migrateMu, before migrated is set.
func (d *Driver) bindCanonical(r resolved) {
	table, seq := r.table, r.seq
	d.canon = table
	sum := sha256.Sum256([]byte(table))
	d.channel = "dlock_" + hex.EncodeToString(sum[:8])
	nonce := driver.NewNonce()[:16]
	d.reply = d.channel + "_" + nonce
	key, _ := strconv.ParseUint(nonce, 16, 64)
	d.listen.setChannel(d.channel, d.reply, int64(key))
	for _, q := range []struct {
		dst *string
		sql string
	}{
		{&d.acquireSQL, acquireSQL}, {&d.extendSQL, extendSQL}, {&d.extendManySQL, extendManySQL}, {&d.releaseSQL, releaseSQL},
		{&d.inspectSQL, inspectSQL}, {&d.listSQL, listSQL}, {&d.breakSQL, breakSQL},
		{&d.lockNameSQL, lockNameSQL}, {&d.permitAcquireSQL, permitAcquireSQL},
		{&d.permitExtendSQL, permitExtendSQL}, {&d.permitReleaseSQL, permitReleaseSQL},
		{&d.permitInspectSQL, permitInspectSQL}, {&d.permitListSQL, permitListSQL},
		{&d.permitBreakSQL, permitBreakSQL},
		{&d.queueAcquireSQL, queueAcquireSQL}, {&d.handOffSQL, handOffSQL}, {&d.freeSQL, freeSQL}, {&d.leaveSQL, leaveSQL},
		{&d.fastAcquireSQL, fastAcquireSQL}, {&d.joinQueueAloneSQL, joinQueueAloneSQL},
		{&d.queuePermitSQL, strings.Replace(queueCountedSQL, "{{fits}}", semaphoreFitsSQL, 1)},
		{&d.queueReaderSQL, strings.Replace(queueCountedSQL, "{{fits}}", readerFitsSQL, 1)},
		{&d.waiterInspectSQL, waiterInspectSQL},
	} {
		*q.dst = bind(q.sql, table, seq, r.permits, r.waiters)
	}
	d.permitsOK.Store(r.permitsOK)
	d.waitersOK.Store(r.waitersOK)
}

// privilegeError explains which privilege the connecting role lacks and
// what to grant.
func (d *Driver) privilegeError(ctx context.Context, cause error, creating bool) error {
	role, schema := "<role>", "<schema>"
	var r, s *string
	ctx, cancel := d.bound(ctx)
	defer cancel()
	if err := d.pool.QueryRow(ctx, "SELECT current_user::text, current_schema()::text").Scan(&r, &s); err == nil {
		if r != nil {
			role = pgx.Identifier{*r}.Sanitize()
		}
		if s != nil {
			schema = pgx.Identifier{*s}.Sanitize()
		}
	}
	if i := strings.LastIndex(d.ident, `"."`); i >= 0 {
		schema = d.ident[:i+1]
	}
	grants := fmt.Sprintf("GRANT SELECT, INSERT, UPDATE, DELETE ON %s TO %s; GRANT USAGE ON SEQUENCE %s TO %s; GRANT SELECT, INSERT, UPDATE, DELETE ON %s, %s TO %s",
		d.ident, role, d.seq, role, d.permits, d.waiters, role)
	if creating {
		return fmt.Errorf("%w: pglock: role %s may not create the lock table %s: %w; either run Migrate once as a role that may (then %s), or GRANT CREATE ON SCHEMA %s TO %s",
			driver.ErrUnavailable, role, d.ident, cause, grants, schema, role)
	}
	return fmt.Errorf("%w: pglock: role %s may not use the lock table %s: %w; grant it with: %s", driver.ErrUnavailable, role, d.ident, cause, grants)
}

// bound limits the statements of one operation to the driver's timeout.
func (d *Driver) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.timeout)
}

// fail turns an error from pgx into the driver's (driver.Classify), with a
// missing privilege explained. ctx is the caller's, not the bounded one: a
// deadline that passes while it is live — the driver's own timeout, or the
// bound of one attempt inside driver.AcquireByRetry — is ErrUnavailable.
func (d *Driver) fail(ctx context.Context, err error) error {
	what := "pglock"
	if errors.Is(err, context.DeadlineExceeded) {
		what = fmt.Sprintf("pglock (op timeout %v)", d.timeout)
	}
	c := driver.Classify(ctx, what, err)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" && errors.Is(c, driver.ErrUnavailable) && !errors.Is(err, driver.ErrUnavailable) {
		return d.privilegeError(ctx, err, false)
	}
	return c
}

// key is a lock name's 64-bit identity within this table: the advisory
// lock key of a session lock and the payload of its notifications. Names
// are stored and compared in full; only these two uses rely on the hash,
// and a collision costs a spurious wake-up or, for session locks, two
// names that exclude each other (a chance of about n²/2⁶⁵ for n names).
func (d *Driver) key(name string) int64 {
	h := sha256.New()
	h.Write([]byte(d.canon))
	h.Write([]byte{0})
	h.Write([]byte(name))
	return int64(binary.BigEndian.Uint64(h.Sum(nil)))
}

func payload(key int64) string {
	return fmt.Sprintf("%016x", uint64(key))
}

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Fair: !d.session, DurableFencing: true, Sessions: d.session, LockDelay: true,
		Semaphore: !d.session, RWMutex: !d.session, MinTTL: MinTTL}
}

// Acquire implements driver.Driver.
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	if err := d.ensure(ctx); err != nil {
		return driver.Grant{}, err
	}
	if req.Shared && d.session {
		return driver.Grant{}, fmt.Errorf("%w: pglock: session locks have no read-write locks", driver.ErrUnsupported)
	}
	if req.Limit > 1 {
		if d.session {
			return driver.Grant{}, fmt.Errorf("%w: pglock: session locks have no semaphores", driver.ErrUnsupported)
		}
		if err := d.permitsReady(ctx); err != nil {
			return driver.Grant{}, err
		}
	}
	if d.session {
		if req.Fair {
			return driver.Grant{}, fmt.Errorf("%w: pglock: session locks wait in the server's lock queue, which makes no FIFO promise", driver.ErrUnsupported)
		}
		g, err := d.acquireSession(ctx, req)
		return g, d.fail(ctx, err)
	}
	// A reader is always served from the queue: one that passed a waiting
	// writer would starve it.
	inQueue := req.Fair || req.Shared
	if inQueue || req.Wait && req.Limit <= 1 {
		// The queue. A plain Lock without it (a role that may not use the
		// waiters table) waits by retrying, as before there was one.
		err := d.waitersReady(ctx)
		switch {
		case err == nil && req.Wait:
			g, err := d.acquireQueued(ctx, req)
			return g, d.fail(ctx, err)
		case err == nil:
			g, err := driver.AcquireByRetry(ctx, req, d) // one attempt, see TryAcquire
			return g, d.fail(ctx, err)
		case inQueue:
			return driver.Grant{}, err
		}
	}
	g, err := driver.AcquireByRetry(ctx, req, d)
	return g, d.fail(ctx, err)
}

// TryAcquire implements driver.Retrier: one statement, which either grants
// the lock or reports how long the holder's lease has left.
func (d *Driver) TryAcquire(ctx context.Context, req driver.Request) (driver.Grant, time.Duration, error) {
	if err := d.ensure(ctx); err != nil {
		return driver.Grant{}, 0, err
	}
	if req.Fair || req.Shared {
		if err := d.waitersReady(ctx); err != nil {
			return driver.Grant{}, 0, err
		}
		return d.tryQueued(ctx, req)
	}
	if req.Limit > 1 {
		return d.tryPermit(ctx, req)
	}
	return d.tryAcquire(ctx, d.pool, req, nil)
}

// permit is the Handle of a semaphore's grant or a reader's: Extend and
// Release act on the permits table.
type permit struct{}

// tryPermit is one attempt at a permit of a semaphore: one round trip,
// lockNameSQL then permitAcquireSQL in one transaction (see queries.go).
func (d *Driver) tryPermit(ctx context.Context, req driver.Request) (driver.Grant, time.Duration, error) {
	if err := d.permitsReady(ctx); err != nil {
		return driver.Grant{}, 0, err
	}
	var (
		token     *int64
		recovered *bool
		leftUS    int64
	)
	// READ COMMITTED whatever the server's default: under REPEATABLE READ
	// the count would see the permits as of the first statement, before
	// it waited for the lock (TestPermitGrantsQueuedOnTheNameCountEachOther).
	err := d.underNameLock(ctx, req.Name, func(b *pgx.Batch) {
		b.Queue(d.permitAcquireSQL, []byte(req.Name), req.Owner, req.Holder, req.TTL.Microseconds(), int64(req.Limit),
			d.channel, payload(d.key(req.Name)))
	}, func(br pgx.BatchResults) error {
		return br.QueryRow().Scan(&token, &recovered, &leftUS, nil)
	})
	switch {
	case err != nil:
		return driver.Grant{}, 0, d.fail(ctx, err)
	case token == nil:
		return driver.Grant{}, max(time.Duration(leftUS)*time.Microsecond, 0), driver.ErrNotAcquired
	}
	return driver.Grant{Token: uint64(*token), Recovered: recovered != nil && *recovered, Handle: permit{}}, 0, nil
}

// querier is a pool or a single connection (a session lock's).
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

func (d *Driver) tryAcquire(ctx context.Context, q querier, req driver.Request, sessionKey *int64) (driver.Grant, time.Duration, error) {
	return d.tryStatement(ctx, q, d.acquireSQL, req, sessionKey)
}

// tryStatement runs one attempt of acquireSQL (last: the session key) or
// fastAcquireSQL (last: barge), which share their parameters and results.
func (d *Driver) tryStatement(ctx context.Context, q querier, sql string, req driver.Request, last any) (driver.Grant, time.Duration, error) {
	var (
		token     *int64
		recovered *bool
		leftUS    int64
	)
	k := d.key(req.Name)
	octx, cancel := d.bound(ctx)
	defer cancel()
	sent := driver.Now()
	err := readCommitted{q}.QueryRow(octx, sql, []byte(req.Name), req.Owner, req.Holder, req.TTL.Microseconds(),
		d.channel, payload(k), last).Scan(&token, &recovered, &leftUS, nil)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// Held by a row our statement's snapshot did not yet see: the lease
		// is new, so its TTL is unknown.
		return driver.Grant{}, 0, driver.ErrNotAcquired
	case err != nil:
		return driver.Grant{}, 0, d.fail(ctx, err)
	case token == nil:
		return driver.Grant{}, max(time.Duration(leftUS)*time.Microsecond, 0), driver.ErrNotAcquired
	}
	return driver.Grant{Token: uint64(*token), Recovered: recovered != nil && *recovered, Since: sent}, 0, nil
}

// Extend implements driver.Driver.
func (d *Driver) Extend(ctx context.Context, h driver.Held, ttl time.Duration) error {
	switch x := h.Handle.(type) {
	case *session:
		return x.extend(ctx, d, h, ttl)
	case permit:
		return d.extendPermit(ctx, h, ttl)
	}
	return d.extend(ctx, d.pool, h, ttl)
}

func (d *Driver) extend(ctx context.Context, q querier, h driver.Held, ttl time.Duration) error {
	octx, cancel := d.bound(ctx)
	defer cancel()
	tag, err := readCommitted{q}.Exec(octx, d.extendSQL, []byte(h.Name), h.Owner, ttl.Microseconds())
	if err != nil {
		return d.fail(ctx, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %q expired or was taken over", driver.ErrLeaseLost, h.Name)
	}
	return nil
}

// Release implements driver.Driver.
func (d *Driver) Release(ctx context.Context, h driver.Held) error {
	switch x := h.Handle.(type) {
	case *session:
		return x.release(ctx, d, h)
	case permit:
		octx, cancel := d.bound(ctx)
		defer cancel()
		return d.released(ctx, h, readCommitted{d.pool}.QueryRow(octx, d.permitReleaseSQL, d.releaseArgs(h)...).Scan(nil))
	}
	if d.waitersOK.Load() {
		return d.releaseQueued(ctx, h)
	}
	return d.release(ctx, d.pool, h)
}

func (d *Driver) extendPermit(ctx context.Context, h driver.Held, ttl time.Duration) error {
	octx, cancel := d.bound(ctx)
	defer cancel()
	tag, err := readCommitted{d.pool}.Exec(octx, d.permitExtendSQL, []byte(h.Name), h.Owner, ttl.Microseconds())
	if err != nil {
		return d.fail(ctx, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: a permit of %q expired or was broken", driver.ErrLeaseLost, h.Name)
	}
	return nil
}

func (d *Driver) release(ctx context.Context, q querier, h driver.Held) error {
	octx, cancel := d.bound(ctx)
	defer cancel()
	return d.released(ctx, h, readCommitted{q}.QueryRow(octx, d.releaseSQL, d.releaseArgs(h)...).Scan(nil))
}

func (d *Driver) releaseArgs(h driver.Held) []any {
	return []any{[]byte(h.Name), h.Owner, d.channel, payload(d.key(h.Name))}
}

// released interprets the outcome of releaseSQL.
func (d *Driver) released(ctx context.Context, h driver.Held, err error) error {
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %q expired or was taken over before its release", driver.ErrLeaseLost, h.Name)
	case err != nil:
		return d.fail(ctx, err)
	}
	return nil
}

// Inspect implements driver.Driver.
func (d *Driver) Inspect(ctx context.Context, name string) (driver.Info, error) {
	if err := d.ensure(ctx); err != nil {
		return driver.Info{}, err
	}
	infos, err := d.infos(ctx, d.inspectSQL, d.permitInspectSQL, []byte(name))
	if err != nil {
		return driver.Info{}, err
	}
	in := driver.Info{Name: name}
	if len(infos) > 0 {
		in = infos[0]
	}
	if d.waitersOK.Load() {
		if in.Waiters, err = d.queued(ctx, name); err != nil {
			return driver.Info{}, err
		}
	}
	return in, nil
}

// queued returns the holder metadata of the live waiters of name, in
// arrival order.
func (d *Driver) queued(ctx context.Context, name string) ([][]byte, error) {
	octx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := d.pool.Query(octx, d.waiterInspectSQL, []byte(name))
	if err != nil {
		return nil, d.fail(ctx, err)
	}
	var waiters [][]byte
	for rows.Next() {
		var n, holder []byte
		if err := rows.Scan(&n, &holder); err != nil {
			rows.Close()
			return nil, d.fail(ctx, err)
		}
		waiters = append(waiters, holder)
	}
	if err := rows.Err(); err != nil {
		return nil, d.fail(ctx, err)
	}
	return waiters, nil
}

// List implements driver.Driver. Names are compared as bytes, so the
// prefix is a range scan of the primary key.
func (d *Driver) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	if err := d.ensure(ctx); err != nil {
		return nil, err
	}
	return d.infos(ctx, d.listSQL, d.permitListSQL, []byte(prefix), prefixEnd([]byte(prefix)))
}

// infos runs a statement of the lease table (leaseSQL) and, where the
// permits table can be used, its counterpart of the permits table
// (permitSQL) with the same arguments, in one round trip, and returns the
// locks they report by name: a semaphore's Info lists its permits in
// grant order, the first one also as the Info's holder.
func (d *Driver) infos(ctx context.Context, leaseSQL, permitSQL string, args ...any) ([]driver.Info, error) {
	octx, cancel := d.bound(ctx)
	defer cancel()
	if !d.permitsOK.Load() {
		rows, err := d.pool.Query(octx, leaseSQL, args...)
		if err != nil {
			return nil, d.fail(ctx, err)
		}
		infos, err := collectInfos(rows)
		if err != nil {
			return nil, d.fail(ctx, err)
		}
		return infos, nil
	}
	b := &pgx.Batch{}
	b.Queue(leaseSQL, args...)
	b.Queue(permitSQL, args...)
	br := d.pool.SendBatch(octx, b)
	var leases, permits []driver.Info
	rows, err := br.Query()
	if err == nil {
		leases, err = collectInfos(rows)
	}
	if err == nil {
		rows, err = br.Query()
	}
	if err == nil {
		permits, err = collectInfos(rows)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, d.fail(ctx, err)
	}
	return mergePermits(leases, permits), nil
}

// mergePermits adds the permits (one Info each, by name and in grant
// order) to the leases (by name), as the Info of their name.
func mergePermits(leases, permits []driver.Info) []driver.Info {
	if len(permits) == 0 {
		return leases
	}
	out := make([]driver.Info, 0, len(leases)+len(permits))
	for len(leases) > 0 || len(permits) > 0 {
		var in driver.Info
		switch {
		case len(permits) == 0 || len(leases) > 0 && leases[0].Name < permits[0].Name:
			out = append(out, leases[0])
			leases = leases[1:]
			continue
		case len(leases) > 0 && leases[0].Name == permits[0].Name:
			// A name used both as a mutex and a semaphore (which the
			// package says not to do): the mutex's holder, and the permits.
			in, leases = leases[0], leases[1:]
		default:
			in = permits[0]
		}
		for len(permits) > 0 && permits[0].Name == in.Name {
			p := permits[0]
			in.Permits = append(in.Permits, driver.Permit{Token: p.Token, Holder: p.Holder, ExpiresIn: p.ExpiresIn})
			permits = permits[1:]
		}
		out = append(out, in)
	}
	return out
}

// prefixEnd is the least byte string greater than every string that begins
// with prefix, or nil if there is none.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

func collectInfos(rows pgx.Rows) ([]driver.Info, error) {
	var infos []driver.Info
	for rows.Next() {
		var (
			name, holder []byte
			token, left  int64
		)
		if err := rows.Scan(&name, &token, &holder, &left); err != nil {
			rows.Close()
			return nil, err
		}
		infos = append(infos, driver.Info{Name: string(name), Held: true, Token: uint64(token), Holder: holder,
			ExpiresIn: max(time.Duration(left)*time.Microsecond, 0)})
	}
	return infos, rows.Err()
}

// Break implements driver.Driver.
func (d *Driver) Break(ctx context.Context, name string) error {
	if err := d.ensure(ctx); err != nil {
		return err
	}
	octx, cancel := d.bound(ctx)
	defer cancel()
	args := []any{[]byte(name), d.channel, payload(d.key(name))}
	var err error
	if !d.permitsOK.Load() {
		err = readCommitted{d.pool}.QueryRow(octx, d.breakSQL, args...).Scan(nil, nil)
	} else {
		// The lease and every permit of the name, in one transaction.
		err = inReadCommitted(octx, d.pool, func(b *pgx.Batch) {
			b.Queue(d.breakSQL, args...)
			b.Queue(d.permitBreakSQL, args...)
		}, func(br pgx.BatchResults) error {
			err := br.QueryRow().Scan(nil, nil)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			perr := br.QueryRow().Scan(nil)
			if err == nil && errors.Is(perr, pgx.ErrNoRows) {
				perr = nil // the lease was broken: held
			}
			return perr
		})
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %q is free", driver.ErrNotHeld, name)
	case err != nil:
		return d.fail(ctx, err)
	}
	return nil
}

// Subscribe implements driver.Subscriber over the driver's one LISTEN
// connection.
func (d *Driver) Subscribe(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	if err := d.ensure(ctx); err != nil {
		return nil, nil, err
	}
	wake, stop, err := d.listen.subscribe(ctx, payload(d.key(name)))
	if err != nil {
		return nil, nil, d.fail(ctx, err)
	}
	return wake, stop, nil
}

// Close implements driver.Driver: it closes the LISTEN connection, the
// connections of session locks (which frees those locks at once) and, if
// the driver was made by dlock.Open, the pool. Leases of the lease table
// are left to expire.
func (d *Driver) Close() error {
	d.listen.close()
	d.sessions.closeAll()
	if d.ownPool {
		d.pool.Close()
	}
	return nil
}

var (
	_ driver.Driver     = (*Driver)(nil)
	_ driver.Retrier    = (*Driver)(nil)
	_ driver.Subscriber = (*Driver)(nil)
)
