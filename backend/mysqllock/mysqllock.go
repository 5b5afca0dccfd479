package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
)

func init() {
	dlock.Register("mysql", openURL)
	dlock.Register("mariadb", openURL)
}

// DefaultTable is the lease table's name unless WithTable says otherwise.
const DefaultTable = "dlock_leases"

// DefaultOpTimeout bounds each operation's statements unless WithOpTimeout
// says otherwise.
const DefaultOpTimeout = 10 * time.Second

// Option configures a Driver.
type Option func(*Driver) error

// WithTable sets the lease table's name: one identifier of 1..64
// characters (it is quoted, so any characters but NUL will do).
func WithTable(name string) Option {
	return func(d *Driver) error {
		if name == "" || len([]rune(name)) > 64 || strings.ContainsRune(name, 0) {
			return fmt.Errorf("%w: mysqllock: table name %q must be 1..64 characters without NUL", dlock.ErrInvalidOption, name)
		}
		d.table = name
		return nil
	}
}

// WithOpTimeout bounds the statements of each operation (an attempt to
// acquire, Extend, Release, Inspect, List, Break, Migrate): a server that
// does not answer within d — frozen, or cut off without the connection
// breaking — makes the operation fail with an error wrapping
// driver.ErrUnavailable and context.DeadlineExceeded while the caller's
// context is still live. Default DefaultOpTimeout.
func WithOpTimeout(d time.Duration) Option {
	return func(dr *Driver) error {
		if d <= 0 {
			return fmt.Errorf("%w: mysqllock: op timeout %v: want a positive duration", dlock.ErrInvalidOption, d)
		}
		dr.timeout = d
		return nil
	}
}

// Driver is the MySQL/MariaDB backend. Create it with New or dlock.Open.
type Driver struct {
	db      *sql.DB
	ownsDB  bool
	table   string
	timeout time.Duration // bounds each operation's statements
	q       queries
	bells   *bells

	mu    sync.Mutex
	stmts map[string]*sql.Stmt // prepared lazily, by query text
	// snapshotPrefix precedes every statement (see own), once known.
	snapshotKnown  bool
	snapshotPrefix string

	ymu    sync.Mutex
	yields map[string]time.Time // lock name -> until when this driver's Lock stands back (standBack)

	lmu     sync.Mutex
	locals  map[string]*localName // this driver's waiters, by lock name
	idle    []*waitSession
	closing bool
	slotWG  sync.WaitGroup // giveSlotBack's goroutines

	// fairWaits counts the outcomes of this driver's waitFair statements,
	// by outcome (the tests count wake-ups with it).
	fairWaits [10]atomic.Int64
	// leaveAfter delays a granted fair waiter's leaving the queue, which
	// runs in the background (0; tests lengthen it).
	leaveAfter time.Duration
}

var (
	_ driver.Driver     = (*Driver)(nil)
	_ driver.Retrier    = (*Driver)(nil)
	_ driver.Subscriber = (*Driver)(nil)
)

// New returns a driver over db, a database/sql pool of
// github.com/go-sql-driver/mysql connections. Close does not close db.
// The driver keeps one of db's connections for its bells, and each Lock
// that waits for another process's lock holds one more while it waits:
// leave SetMaxOpenConns room for them.
func New(db *sql.DB, opts ...Option) (*Driver, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: mysqllock.New: db is nil", dlock.ErrInvalidOption)
	}
	d := &Driver{db: db, table: DefaultTable, timeout: DefaultOpTimeout, stmts: map[string]*sql.Stmt{}, locals: map[string]*localName{},
		yields: map[string]time.Time{}}
	for _, o := range opts {
		if err := o(d); err != nil {
			return nil, err
		}
	}
	quote := func(id string) string { return "`" + strings.ReplaceAll(id, "`", "``") + "`" }
	d.q = newQueries(quote(d.table), quote(permitTable(d.table)), quote(queueTable(d.table)))
	d.bells = newBells(db)
	return d, nil
}

func openURL(ctx context.Context, u *url.URL) (driver.Driver, error) {
	cfg, opts, err := configFromURL(ctx, u)
	if err != nil {
		return nil, err
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: mysqllock: %v", dlock.ErrInvalidOption, err)
	}
	db := sql.OpenDB(conn)
	d, err := New(db, opts...)
	if err != nil {
		db.Close()
		return nil, err
	}
	d.ownsDB = true
	pctx, cancel := d.bound(ctx)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		d.Close()
		return nil, fmt.Errorf("%w: mysql %s: %w", driver.ErrUnavailable, cfg.Addr, err)
	}
	return d, nil
}

// mysqlParams are go-sql-driver/mysql's own DSN parameters. The driver
// takes any other parameter for a system variable to set on each
// connection; a URL does not, so that a misspelled parameter is an error
// (set system variables in the DSN of your own *sql.DB, and use New).
var mysqlParams = []string{
	"allowAllFiles", "allowCleartextPasswords", "allowFallbackToPlaintext", "allowNativePasswords",
	"allowOldPasswords", "checkConnLiveness", "clientFoundRows", "charset", "collation",
	"columnsWithAlias", "compress", "interpolateParams", "loc", "multiStatements", "parseTime",
	"timeTruncate", "readTimeout", "rejectReadOnly", "serverPubKey", "strict", "timeout", "tls",
	"writeTimeout", "maxAllowedPacket", "connectionAttributes",
}

// configFromURL turns mysql://user:pass@host:port/db?params into a driver
// configuration; table is ours, every other parameter is the driver's.
func configFromURL(ctx context.Context, u *url.URL) (*mysql.Config, []Option, error) {
	var opts []Option
	var opTimeout time.Duration
	ps := driver.Params{Backend: "mysql", List: []driver.Param{
		{Name: "table", Usage: "the lease table", Set: func(v string) error {
			opts = append(opts, WithTable(v))
			return nil
		}},
		{Name: "op_timeout", Usage: "bound of each operation's statements", Set: driver.DurationParam(&opTimeout)},
	}}
	for _, n := range mysqlParams {
		ps.List = append(ps.List, driver.Param{Name: n, Usage: "go-sql-driver/mysql's"})
	}
	q, err := ps.Parse(ctx, u.Query())
	if err != nil {
		return nil, nil, err
	}
	if opTimeout > 0 {
		opts = append(opts, WithOpTimeout(opTimeout))
	}
	db := strings.TrimPrefix(u.Path, "/")
	if strings.Contains(db, "/") {
		return nil, nil, fmt.Errorf("%w: mysqllock: URL path %q must be /database", dlock.ErrInvalidOption, u.Path)
	}
	host := u.Host
	if host == "" {
		host = "127.0.0.1"
	}
	if u.Port() == "" {
		host = strings.TrimSuffix(host, ":") + ":3306"
	}
	// The address goes into the DSN, not into cfg afterwards: parsing
	// derives the name a TLS certificate is verified against (tls=true, or
	// a registered configuration without ServerName) from the address, and
	// would take the default 127.0.0.1 for a DSN without one.
	cfg, err := mysql.ParseDSN("tcp(" + host + ")/" + db + "?" + q.Encode())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: mysqllock: URL parameters: %v", dlock.ErrInvalidOption, err)
	}
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	if !q.Has("timeout") {
		cfg.Timeout = DefaultOpTimeout // the dial too, unless the URL says otherwise
	}
	return cfg, opts, nil
}

// Migrate creates the lease table and the permit table (semaphores; see
// the package doc) if they do not exist. It needs the CREATE privilege;
// the other operations call it on first use of a missing table.
func (d *Driver) Migrate(ctx context.Context) error {
	octx, cancel := d.bound(ctx)
	defer cancel()
	_, err := d.db.ExecContext(octx, d.q.createTable)
	if err == nil {
		_, err = d.db.ExecContext(octx, d.q.createPermits)
	}
	if err == nil {
		_, err = d.db.ExecContext(octx, d.q.createQueue)
	}
	if err != nil {
		var me *mysql.MySQLError
		if errors.As(err, &me) && (me.Number == 1142 || me.Number == 1044) {
			db, user := "<database>", "<user>"
			var dbName, cur sql.NullString
			if d.db.QueryRowContext(octx, "SELECT DATABASE(), CURRENT_USER()").Scan(&dbName, &cur) == nil && dbName.Valid {
				db = "`" + strings.ReplaceAll(dbName.String, "`", "``") + "`"
				if u, h, ok := strings.Cut(cur.String, "@"); ok {
					user = "'" + u + "'@'" + h + "'"
				}
			}
			return fmt.Errorf("%w: mysqllock: %s lacks the CREATE privilege to create the lease table %s, its permit table %s and its queue table %s (%w): "+
				"GRANT CREATE, SELECT, INSERT, UPDATE, DELETE ON %s.* TO %s; "+
				"or have an administrator create them once (Migrate, or these statements):\n%s;\n%s;\n%s",
				driver.ErrUnavailable, user, d.table, permitTable(d.table), queueTable(d.table), err, db, user, d.q.createTable, d.q.createPermits, d.q.createQueue)
		}
		return fmt.Errorf("mysqllock: create the lease table %s: %w", d.table, d.fail(ctx, err))
	}
	return nil
}

// stmt returns the prepared statement for query, preparing it — and
// creating the tables if one is missing — on first use.
func (d *Driver) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	return d.prepare(ctx, query, true)
}

// prepare is stmt; without migrate, a missing table is the caller's error
// to handle (isNoTable), unclassified.
func (d *Driver) prepare(ctx context.Context, query string, migrate bool) (*sql.Stmt, error) {
	d.mu.Lock()
	s := d.stmts[query]
	d.mu.Unlock()
	if s != nil {
		return s, nil
	}
	text, err := d.own(ctx, query)
	if err != nil {
		return nil, err
	}
	octx, cancel := d.bound(ctx)
	defer cancel()
	s, err = d.db.PrepareContext(octx, text)
	if !migrate && isNoTable(err) {
		return nil, err
	}
	if isNoTable(err) {
		if err := d.Migrate(ctx); err != nil {
			return nil, err
		}
		s, err = d.db.PrepareContext(octx, text)
	}
	if err != nil {
		return nil, d.fail(ctx, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if old := d.stmts[query]; old != nil {
		s.Close()
		return old, nil
	}
	d.stmts[query] = s
	return s, nil
}

func isNoTable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1146
}

// bound limits the statements of one operation to the driver's timeout.
func (d *Driver) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d.timeout)
}

// waitBound bounds a waiter's blocking statement, whose GET_LOCK gives up
// after capSeconds: that, and the operation timeout for its round trip. A
// cancelled wait is ended by KILL QUERY; this bound is for a connection
// that stopped answering, which no KILL reaches. When it passes, the
// connection is closed and the wait fails (its session is not reused).
func (d *Driver) waitBound(capSeconds int) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Duration(capSeconds)*time.Second+d.timeout)
}

// fail turns a statement's error into the driver's (driver.Classify). ctx
// is the caller's, not the bounded one: a deadline that passes while it is
// live — the driver's own timeout, or the bound of one attempt inside
// driver.AcquireByRetry — is ErrUnavailable.
func (d *Driver) fail(ctx context.Context, err error) error {
	what := "mysqllock"
	if errors.Is(err, context.DeadlineExceeded) {
		what = fmt.Sprintf("mysqllock (op timeout %v)", d.timeout)
	}
	return driver.Classify(ctx, what, err)
}

// exec runs one of the statements. Each is a transaction of its own, which
// InnoDB rolls back whole when it picks it as a deadlock victim (possible
// when sessions insert the same new name at once): it is then run again.
func exec(ctx context.Context, d *Driver, query string, args ...any) (sql.Result, error) {
	s, err := d.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	octx, cancel := d.bound(ctx)
	defer cancel()
	for try := 1; ; try++ {
		r, err := s.ExecContext(octx, args...)
		var me *mysql.MySQLError
		if try < 5 && errors.As(err, &me) && me.Number == 1213 {
			continue
		}
		return r, d.fail(ctx, err)
	}
}

func micros(d time.Duration) int64 { return max(d.Microseconds(), 1) }

// Acquire implements driver.Driver with driver.AcquireByRetry: one attempt
// per wake-up of the bell (see the package doc).
func (d *Driver) Acquire(ctx context.Context, req driver.Request) (driver.Grant, error) {
	switch {
	case req.Fair && req.Limit > 1 && req.Wait:
		return d.lockFairPermit(ctx, req)
	case req.Fair && req.Limit <= 1 && req.Wait:
		return d.lockFair(ctx, req)
	case req.Fair && req.Limit <= 1:
		g, _, err := d.tryFair(ctx, req, notQueued)
		return g, err
	}
	var r driver.Retrier = d
	if req.Wait && req.Limit <= 1 {
		if err := d.yield(ctx, req.Name); err != nil {
			return driver.Grant{}, err
		}
		g, p, err := d.lockFirst(ctx, req)
		if p == nil {
			return g, err
		}
		r = p
	}
	g, err := driver.AcquireByRetry(ctx, req, r)
	return g, d.unbound(ctx, err)
}

// unbound turns the end of an attempt's own bound, while the caller still
// waits, into ErrUnavailable.
func (d *Driver) unbound(ctx context.Context, err error) error {
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		// The bound of one attempt ran out while the caller still waits.
		err = d.fail(ctx, err)
	}
	return err
}

// lockFirst makes a plain Lock's first attempt on the caller's goroutine,
// detached from ctx as driver.AcquireByRetry's attempts are (a grant that
// comes as ctx ends is given back), after subscribing, so that an attempt
// that finds the lock held arms the waiter. If the lock is held it returns
// the Retrier for AcquireByRetry to wait with: its subscription is that
// one, and its first attempt reports this attempt's outcome without a
// statement. So an uncontended Lock starts no goroutine.
func (d *Driver) lockFirst(ctx context.Context, req driver.Request) (driver.Grant, *primed, error) {
	if err := ctx.Err(); err != nil {
		return driver.Grant{}, nil, err
	}
	wake, stop, err := d.Subscribe(ctx, req.Name)
	if err != nil {
		return driver.Grant{}, nil, err
	}
	g, retryAfter, err := d.TryAcquire(context.WithoutCancel(ctx), req)
	g, err = driver.GiveBackIfEnded(ctx, g, err, func(rctx context.Context) {
		_ = d.Release(rctx, driver.Held{Name: req.Name, Owner: req.Owner, Token: g.Token, Handle: g.Handle})
	})
	if !errors.Is(err, driver.ErrNotAcquired) {
		stop()
		return g, nil, d.unbound(ctx, err)
	}
	return driver.Grant{}, &primed{Driver: d, wake: wake, stop: stop, retryAfter: retryAfter, first: true}, nil
}

// primed is the driver as the Retrier of a Lock whose first attempt
// lockFirst made: it hands AcquireByRetry the subscription made for it,
// and reports that attempt's refusal as its first attempt.
type primed struct {
	*Driver
	wake       <-chan struct{}
	stop       func()
	retryAfter time.Duration
	first      bool
}

// TryAcquire implements driver.Retrier.
func (p *primed) TryAcquire(ctx context.Context, req driver.Request) (driver.Grant, time.Duration, error) {
	if p.first {
		p.first = false
		return driver.Grant{}, p.retryAfter, driver.ErrNotAcquired
	}
	return p.Driver.TryAcquire(ctx, req)
}

// Subscribe implements driver.Subscriber.
func (p *primed) Subscribe(context.Context, string) (<-chan struct{}, func(), error) {
	return p.wake, p.stop, nil
}

// TryAcquire implements driver.Retrier: one INSERT … ON DUPLICATE KEY
// UPDATE, one round trip; for a semaphore (Limit > 1), tryPermit.
func (d *Driver) TryAcquire(ctx context.Context, req driver.Request) (driver.Grant, time.Duration, error) {
	if req.Fair && req.Limit <= 1 {
		return d.tryFair(ctx, req, notQueued)
	}
	if req.Limit > 1 {
		return d.tryPermit(ctx, req)
	}
	bellArg := d.bellArg(ctx)
	name, ttl := []byte(req.Name), micros(req.TTL)
	args := make([]any, 0, 9+waitSlots)
	args = append(args, name, req.Owner, req.Holder, bellArg, ttl)
	args = appendSlots(args, d.table, req.Name)
	args = append(args, req.Owner, req.Holder, bellArg, ttl)
	sent := driver.Now()
	r, err := exec(ctx, d, d.q.acquire, args...)
	if err != nil {
		return driver.Grant{}, 0, err
	}
	id, err := r.LastInsertId()
	if err != nil {
		return driver.Grant{}, 0, d.fail(ctx, err)
	}
	v := uint64(id)
	if v&1 == 0 {
		d.attemptFailed(req.Name, false)
		return driver.Grant{}, time.Duration(v>>1) * time.Microsecond, driver.ErrNotAcquired
	}
	d.bells.hold(bellName(d.table, req.Name), req.Owner, sent.Add(req.TTL), v>>2&1 == 1)
	return driver.Grant{Token: v >> 3, Since: sent, Recovered: v>>1&1 == 1}, 0, nil
}

// bellArg is the bell connection's id for the lease row, or NULL.
func (d *Driver) bellArg(ctx context.Context) any {
	if id := d.bells.connID(ctx); id != 0 {
		return id
	}
	return nil
}

// Extend implements driver.Driver.
func (d *Driver) Extend(ctx context.Context, h driver.Held, ttl time.Duration) error {
	if _, ok := h.Handle.(permit); ok {
		return d.extendPermit(ctx, h, ttl)
	}
	sent := driver.Now()
	r, err := exec(ctx, d, d.q.extend, micros(ttl), d.bellArg(ctx), []byte(h.Name), h.Owner)
	if err != nil {
		return err
	}
	bell := bellName(d.table, h.Name)
	if n, err := r.RowsAffected(); err != nil {
		return d.fail(ctx, err)
	} else if n == 0 {
		d.bells.drop(bell, h.Owner)
		return fmt.Errorf("%w: mysqllock: %q is no longer held by this owner", driver.ErrLeaseLost, h.Name)
	}
	d.bells.extend(bell, h.Owner, sent.Add(ttl))
	return nil
}

// Release implements driver.Driver and driver.Retrier: it frees the row,
// then rings the bell.
func (d *Driver) Release(ctx context.Context, h driver.Held) error {
	if _, ok := h.Handle.(permit); ok {
		return d.releasePermit(ctx, h)
	}
	// A fair lease whose bell is not taken yet — granted with nobody else
	// queued, and held for less than the bell's delay — is released as a
	// plain one is, without reading the queue: a waiter that queued since
	// looks every fairPendingPoll while the bell is not taken, finds the
	// lock free, and takes it in its turn (see releaseFair).
	if _, ok := h.Handle.(fairLease); ok && !d.bells.pending(bellName(d.table, h.Name), h.Owner) {
		held, err := d.releaseFair(ctx, h.Name, h.Owner)
		if err == nil && !held {
			err = fmt.Errorf("%w: mysqllock: %q was no longer held by this owner", driver.ErrLeaseLost, h.Name)
		}
		return err
	}
	args := appendSlots(make([]any, 0, 2+waitSlots), d.table, h.Name)
	r, err := exec(ctx, d, d.q.release, append(args, []byte(h.Name), h.Owner)...)
	if err != nil {
		return err
	}
	d.bells.drop(bellName(d.table, h.Name), h.Owner)
	localWaiters := d.releasedLocally(h.Name)
	if n, err := r.RowsAffected(); err != nil {
		return d.fail(ctx, err)
	} else if n == 0 {
		return fmt.Errorf("%w: mysqllock: %q was no longer held by this owner", driver.ErrLeaseLost, h.Name)
	}
	if id, err := r.LastInsertId(); localWaiters || (err == nil && id == 2) {
		d.standBack(h.Name)
	}
	return nil
}

// Inspect implements driver.Driver. ExpiresIn is by the server's clock. A
// name that is not a held mutex is looked up among the permits: a second
// statement.
func (d *Driver) Inspect(ctx context.Context, name string) (driver.Info, error) {
	s, err := d.stmt(ctx, d.q.inspect)
	if err != nil {
		return driver.Info{}, err
	}
	in := driver.Info{Name: name}
	var left int64
	octx, cancel := d.bound(ctx)
	defer cancel()
	err = s.QueryRowContext(octx, []byte(name)).Scan(&in.Token, &in.Holder, &left)
	if errors.Is(err, sql.ErrNoRows) {
		in, err = d.inspectPermits(ctx, name)
	} else if err != nil {
		return driver.Info{}, d.fail(ctx, err)
	} else {
		in.Held, in.ExpiresIn = true, time.Duration(left)*time.Microsecond
	}
	if err == nil && in.Permits == nil {
		in.Waiters, err = d.queueWaiters(ctx, name)
	}
	return in, err
}

// List implements driver.Driver: the held locks whose names start with
// prefix, byte for byte, mutexes and semaphores (two statements).
func (d *Driver) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	s, err := d.stmt(ctx, d.q.list)
	if err != nil {
		return nil, err
	}
	p := []byte(prefix)
	octx, cancel := d.bound(ctx)
	defer cancel()
	rows, err := s.QueryContext(octx, p, len(p), p)
	if err != nil {
		return nil, d.fail(ctx, err)
	}
	defer rows.Close()
	var out []driver.Info
	for rows.Next() {
		var name []byte
		var left int64
		in := driver.Info{Held: true}
		if err := rows.Scan(&name, &in.Token, &in.Holder, &left); err != nil {
			return nil, d.fail(ctx, err)
		}
		in.Name, in.ExpiresIn = string(name), time.Duration(left)*time.Microsecond
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, d.fail(ctx, err)
	}
	sems, err := d.listPermits(ctx, prefix)
	if err != nil {
		return nil, err
	}
	return mergeByName(out, sems), nil
}

// Break implements driver.Driver: the lease expires now; the holder's next
// renewal is refused and the next grant gets the next token. Waiters wake
// when the holder's bell drops (at that renewal) or at their next look. A
// name that is not a held mutex is broken as a semaphore, every permit at
// once (breakPermits): a second statement.
func (d *Driver) Break(ctx context.Context, name string) error {
	r, err := exec(ctx, d, d.q.breakLease, []byte(name))
	if err != nil {
		return err
	}
	if n, err := r.RowsAffected(); err != nil {
		return d.fail(ctx, err)
	} else if n == 0 {
		return d.breakPermits(ctx, name)
	}
	return nil
}

// Capabilities implements driver.Driver.
func (d *Driver) Capabilities() driver.Capabilities {
	return driver.Capabilities{Fair: true, DurableFencing: true, LockDelay: true, Semaphore: true, MinTTL: 10 * time.Millisecond}
}

// Close implements driver.Driver: it drops the bells (waking the waiters of
// the locks still held, which stay held until their TTL), and closes the
// pool if Open created it.
func (d *Driver) Close() error {
	d.bells.close()
	d.closeSessions()
	d.slotWG.Wait()
	d.mu.Lock()
	for _, s := range d.stmts {
		s.Close()
	}
	d.stmts = map[string]*sql.Stmt{}
	d.mu.Unlock()
	if d.ownsDB {
		return d.db.Close()
	}
	return nil
}

// Standing back. A Lock that comes right after its own driver's release of
// the same name, when that release saw others waiting, would win the free
// lock every time: its statement reaches the server before the woken
// waiter's, which must first hear the bell. So a release that saw a waiter
// (a held waiting slot, or a waiter of this driver) makes this driver's
// next Lock of the name wait standBackFor before its first attempt; by
// then a waiter has usually taken the lock, and the Lock waits its turn
// like the others. TryLock never waits. This keeps the plain mode's
// semantics — any contender may win a free lock — and only removes the
// releaser's head start (testReleaserStandsBack).
const standBackFor = 3 * time.Millisecond

// standBack records that name was released while others waited.
func (d *Driver) standBack(name string) {
	now := time.Now()
	d.ymu.Lock()
	defer d.ymu.Unlock()
	if len(d.yields) >= 64 {
		for n, until := range d.yields {
			if !until.After(now) {
				delete(d.yields, n)
			}
		}
	}
	d.yields[name] = now.Add(standBackFor)
}

// yield waits out a stand-back of name, if one runs.
func (d *Driver) yield(ctx context.Context, name string) error {
	d.ymu.Lock()
	until, ok := d.yields[name]
	delete(d.yields, name)
	d.ymu.Unlock()
	if !ok {
		return nil
	}
	wait := time.Until(until)
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
