package mysqllock

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock/dlock/driver"
	"github.com/go-sql-driver/mysql"
)

// bellName maps a lock name to a user-level lock name of 38 characters
// (GET_LOCK allows 64).
func bellName(table, name string) string {
	return "dlock:" + driver.NameHash(table+"\x00"+name)
}

// waitingPrefix names the waiting slots of a lock: user locks named by it
// and a digit 0..waitSlots-1 (40 characters; GET_LOCK allows 64).
func waitingPrefix(table, name string) string {
	return "dlock:w" + driver.NameHash(table+"\x00"+name)
}

// appendSlots appends the waiting slots' prefix once per slot, as the
// statements that look at the slots take it.
func appendSlots(args []any, table, name string) []any {
	p := waitingPrefix(table, name)
	for range waitSlots {
		args = append(args, p)
	}
	return args
}

// Bell timing.
const (
	bellTake      = 2  // seconds a holder's bell connection waits for a bell that waiters are passing on
	bellIdleLimit = 60 // seconds: the bell session's wait_timeout, so a stranded session ends
	waitCap       = 5  // seconds a waiter blocks before it looks at the row again
	pollMin       = 5 * time.Millisecond
	pollMax       = time.Second
	pendingPoll   = 2 * time.Millisecond // while a new holder's bell is being taken
	pendingPolls  = 50                   // then back off as for a holder without a bell
	// winnerBell is a woken waiter's pause after its attempt lost, before
	// it looks again: about the round trip in which the winner, told by
	// its grant that others wait, takes its bell.
	winnerBell = time.Millisecond

	// bellStartWait is how long connID waits for the bell connection on
	// first use; past it the caller goes on without a bell (its waiters
	// poll), rather than delay a grant on a slow server.
	bellStartWait = 2 * time.Second
	// bellConnectTimeout bounds opening the bell connection; the keeper
	// tries again on the next change of the wanted set.
	bellConnectTimeout = 5 * time.Second
	// bellStopWait bounds Close's wait for the keeper to drop its bells;
	// after it the server ends the connection's locks with the session.
	bellStopWait = 10 * time.Second
	// bellRetry is the keeper's pause after a failed round, when the
	// session was dropped and must be opened again.
	bellRetry = 100 * time.Millisecond
	// bellDelay is how long after a grant that found no waiter the keeper
	// takes its bell: a lock released sooner never touches its bell (no
	// statement on the bell connection), and a waiter that comes in the
	// meantime looks every pendingPoll until the bell is taken.
	bellDelay = 5 * time.Millisecond
	// bellKeepAlive is how often an idle bell session sends a statement,
	// well within its wait_timeout.
	bellKeepAlive = bellIdleLimit * time.Second / 3
	// maxQuietBells bounds the bells a bell connection holds for leases
	// that nobody waited for at their grant. On MariaDB a GET_LOCK costs
	// time in proportion to the user locks its session already holds
	// (10 ms each at 100,000 held, 78 µs at 0 to 10,000: see the package
	// doc), so a Driver holding many locks would spend its bell
	// connection, and the server, on bells nobody waits on. Past the
	// bound such leases get no bell, and a waiter that comes later looks
	// with back-off, as for a holder without a bell. A grant that found
	// someone waiting always takes its bell.
	maxQuietBells = 1024
)

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// heldPoll paces a waiter's looks at a lock whose holder has no bell.
var heldPoll = driver.Backoff{Base: pollMin, Cap: pollMax, Jitter: 0.5}

// bells keeps this driver's bells on one connection: a user lock per held
// lease, taken after the grant and dropped after the release by a
// background goroutine, so that neither costs the caller a round trip. The
// goroutine uses the connection, and callers change the wanted set; a fair
// release may also send its statement on the connection while it is idle
// (execDropping).
type bells struct {
	db       *sql.DB
	delay    time.Duration // bellDelay (tests lengthen it)
	maxQuiet int           // maxQuietBells (tests lower it)

	mu   sync.Mutex
	want map[string][]claim // bell -> the claims of the leases that want it
	// The keeper's timer, its due time, and the earliest time a claim
	// added since the keeper's last round wants a round (zero: none), so
	// that a claim made while a round runs is not missed when the round
	// sets the timer. hold sets the timer for a delayed bell rather than
	// wake the keeper: a lock released before then costs no keeper round.
	timer   *time.Timer
	due     time.Time
	early   time.Time
	id      uint64 // the connection's CONNECTION_ID(), 0 while there is none
	closed  bool
	started bool
	// taking are the bells a keeper round is taking: a drop of one of
	// them needs the keeper, though the bell is not held yet. full is set
	// when the last round left maxQuiet bells held: a claim nobody waited
	// for then needs no round of its own.
	taking map[string]bool
	full   bool
	// dirty are the bells whose claims changed since the keeper's last
	// round, or wait for their from: with the bells held, all a round
	// looks at. Every bellKeepAlive (nextFull), and after a new
	// connection, a round looks at every claim.
	dirty    map[string]bool
	nextFull time.Time

	once  sync.Once
	ready chan struct{} // closed after the first connection attempt
	kick  chan struct{}
	done  chan struct{} // closed by close
	ended chan struct{} // closed when run has returned

	// connMu serializes the statements on conn: the keeper's rounds, and
	// the fair releases sent on it (execDropping). It guards conn and
	// stmts, and is taken before mu. have is written holding both, and
	// read holding either (drop reads it under mu).
	connMu sync.Mutex
	rounds atomic.Int64         // the keeper's statements: tests count them
	stmts  map[string]*sql.Stmt // prepared on conn
	conn   *sql.Conn
	have   map[string]bool // bells held on conn
	last   time.Time       // when the last statement on conn ended
	gaveUp map[string]bool // bells another session kept past bellTake: not retried for this lease
}

// claim is a lease's claim on its bell. A bell has one claim nearly always
// (a semaphore's driver may hold several permits' leases under one bell
// only by hash collision; a mutex's next lease may claim it before the
// last one's drop): a slice, not a map per bell, keeps a held lock's heap
// small.
type claim struct {
	owner    string
	deadline time.Time // the lease's local deadline: the bell is not held past it
	from     time.Time // the bell is taken from then on
	quiet    bool      // nobody waited at the grant: taken within maxQuietBells only
}

func newBells(db *sql.DB) *bells {
	return &bells{db: db, delay: bellDelay, maxQuiet: maxQuietBells, want: map[string][]claim{}, dirty: map[string]bool{},
		ready: make(chan struct{}), kick: make(chan struct{}, 1), done: make(chan struct{}), ended: make(chan struct{}),
		have: map[string]bool{}, gaveUp: map[string]bool{}}
}

// connID returns the id of the bell connection, starting the keeper on
// first use; 0 if there is no connection (waiters then poll).
func (b *bells) connID(ctx context.Context) uint64 {
	b.once.Do(func() {
		b.mu.Lock()
		if !b.closed {
			b.started = true
			go b.run()
		} else {
			close(b.ready)
		}
		b.mu.Unlock()
	})
	select {
	case <-b.ready:
	default:
		t := time.NewTimer(bellStartWait)
		select {
		case <-b.ready:
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.id
}

// ownID is the bell connection's id, without waiting for one; 0 if none.
func (b *bells) ownID() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.id
}

// hold wants bell held for owner's lease until deadline (local clock): at
// once if someone waits for the lock, otherwise after bellDelay, so that a
// lock held briefly and with nobody waiting costs no bell statements.
func (b *bells) hold(bell, owner string, deadline time.Time, waited bool) {
	from := time.Now()
	if !waited {
		from = from.Add(b.delay)
	}
	b.mu.Lock()
	c := claim{owner: owner, deadline: deadline, from: from, quiet: !waited}
	if i := claimOf(b.want[bell], owner); i >= 0 {
		b.want[bell][i] = c
	} else {
		b.want[bell] = append(b.want[bell], c)
	}
	if !waited && b.full {
		// No bell for it now (maxQuietBells): a round that looks at every
		// claim takes one for it, if there is room then.
		b.mu.Unlock()
		return
	}
	b.dirty[bell] = true
	if !waited && b.timer != nil {
		if b.early.IsZero() || from.Before(b.early) {
			b.early = from
		}
		if from.Before(b.due) {
			b.due = from
			b.timer.Reset(time.Until(from))
		}
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	b.signal()
}

// pending reports whether owner's claim on bell is still before its
// from: its bell has not been taken for it, so nobody can be waiting on
// it yet.
func (b *bells) pending(bell, owner string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	cs := b.want[bell]
	i := claimOf(cs, owner)
	return i >= 0 && cs[i].from.After(time.Now())
}

// extend moves the deadline of owner's claim on bell, if it still has one:
// a renewal that completes after the release must not take the bell again.
func (b *bells) extend(bell, owner string, deadline time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if i := claimOf(b.want[bell], owner); i >= 0 && deadline.After(b.want[bell][i].deadline) {
		b.want[bell][i].deadline = deadline
	}
}

// drop ends owner's claim on bell.
func (b *bells) drop(bell, owner string) {
	b.mu.Lock()
	cs := b.want[bell]
	i := claimOf(cs, owner)
	ok := i >= 0
	var c claim
	if ok {
		c = cs[i]
		cs = append(cs[:i], cs[i+1:]...)
		b.want[bell] = cs
	}
	if len(cs) == 0 {
		delete(b.want, bell)
	}
	// Nothing to drop unless the bell is held, or a round under way is
	// taking it (past maxQuietBells most leases never hold their bell);
	// the next round looks at it all the same.
	needed := b.have[bell] || b.taking[bell]
	b.dirty[bell] = true
	b.mu.Unlock()
	if !needed || ok && c.from.After(time.Now()) {
		return // its bell was not taken for it: nothing to drop
	}
	b.signal()
}

// execDropping runs query on the bell connection: a statement that
// releases owner's lease and, if it changes the lease row, drops bell
// (RELEASE_LOCK) in the same round trip (see releaseFair). After it, the
// lease's claim on bell is ended, before the keeper may use the
// connection again. sent is false, and nothing was sent, when the
// connection is busy (a keeper round, another release) or absent, or the
// statement failed on the server (rolled back): the caller then sends it
// on another connection. A failure on the way (a timeout, a broken
// connection) ends the session, and with it this driver's bells.
func (b *bells) execDropping(ctx context.Context, bell, owner, query string, args ...any) (r sql.Result, sent bool, err error) {
	if !b.connMu.TryLock() {
		return nil, false, nil
	}
	signal := false
	defer func() {
		b.connMu.Unlock()
		if signal {
			b.signal()
		}
	}()
	if b.conn == nil {
		return nil, false, nil
	}
	st := b.stmts[query]
	if st == nil {
		if st, err = b.conn.PrepareContext(ctx, query); err != nil {
			if ctx.Err() != nil || !isServerError(err) {
				b.disconnect()
				signal = true // the keeper opens a new one if bells are wanted
			}
			return nil, false, nil
		}
		b.stmts[query] = st
	}
	r, err = st.ExecContext(ctx, args...)
	if err != nil {
		if ctx.Err() == nil && isServerError(err) {
			// Rolled back, but RELEASE_LOCK may have run: the keeper
			// takes the bell again while a lease wants it.
			b.mu.Lock()
			delete(b.have, bell)
			b.dirty[bell] = true
			b.mu.Unlock()
			signal = true
			return nil, false, nil
		}
		b.disconnect()
		signal = true
		return nil, true, err
	}
	b.last = time.Now()
	b.mu.Lock()
	if n, err := r.RowsAffected(); err == nil && n > 0 {
		delete(b.have, bell) // dropped by the statement
	}
	cs := b.want[bell]
	if i := claimOf(cs, owner); i >= 0 {
		cs = append(cs[:i], cs[i+1:]...)
		b.want[bell] = cs
	}
	if len(cs) == 0 {
		delete(b.want, bell)
	}
	// The keeper has work if the bell is still held for nobody, or wanted
	// by another lease.
	signal = b.have[bell] != (len(cs) > 0 && cs[0].from.Before(time.Now()))
	if signal {
		b.dirty[bell] = true
	}
	b.mu.Unlock()
	return r, true, nil
}

// isServerError is true for an error the server returned for a statement:
// the statement failed whole, and the session is still in a known state.
func isServerError(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me)
}

// claimOf is the index of owner's claim in cs, -1 if none.
func claimOf(cs []claim, owner string) int {
	for i := range cs {
		if cs[i].owner == owner {
			return i
		}
	}
	return -1
}

func (b *bells) signal() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// close ends the bell session, which drops every bell: the waiters of the
// locks still held wake (and find them held until their TTL).
func (b *bells) close() {
	b.once.Do(func() { close(b.ready) }) // never start after close
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	started := b.started
	b.mu.Unlock()
	close(b.done)
	if started {
		select {
		case <-b.ended:
		case <-time.After(bellStopWait):
		}
	}
}

// discard closes c's session instead of returning it to the pool: the
// session may hold user locks.
func discard(c *sql.Conn) {
	_ = c.Raw(func(any) error { return sqldriver.ErrBadConn })
	_ = c.Close()
}

// run brings the held bells in line with the wanted ones whenever they
// change or a lease's local deadline passes, and keeps the session alive.
func (b *bells) run() {
	defer close(b.ended)
	defer func() {
		b.connMu.Lock()
		defer b.connMu.Unlock()
		if b.conn != nil {
			b.disconnect()
		}
	}()
	b.connMu.Lock()
	b.connect()
	b.connMu.Unlock()
	close(b.ready)
	b.mu.Lock()
	b.timer = time.NewTimer(time.Hour)
	timer := b.timer
	b.mu.Unlock()
	defer timer.Stop()
	for {
		b.mu.Lock()
		b.early = time.Time{} // this round sees every claim made so far
		b.mu.Unlock()
		b.connMu.Lock()
		next := time.Now().Add(b.sync())
		b.connMu.Unlock()
		b.mu.Lock()
		if !b.early.IsZero() && b.early.Before(next) {
			next = b.early // a claim made during the round
		}
		b.due = next
		timer.Reset(time.Until(next))
		b.mu.Unlock()
		select {
		case <-b.done:
			return
		case <-b.kick:
		case <-timer.C:
		}
	}
}

func (b *bells) connect() {
	ctx, cancel := context.WithTimeout(context.Background(), bellConnectTimeout)
	defer cancel()
	c, err := b.db.Conn(ctx)
	if err != nil {
		return
	}
	var id uint64
	err = c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id)
	if err == nil {
		// A session stranded by a partition ends by itself.
		_, err = c.ExecContext(ctx, fmt.Sprintf("SET SESSION wait_timeout = %d", bellIdleLimit))
	}
	if err != nil {
		discard(c)
		return
	}
	b.conn, b.gaveUp, b.last, b.stmts = c, map[string]bool{}, time.Now(), map[string]*sql.Stmt{}
	b.mu.Lock()
	b.id, b.have, b.full, b.nextFull = id, map[string]bool{}, false, time.Time{}
	b.mu.Unlock()
}

func (b *bells) disconnect() {
	for _, st := range b.stmts {
		_ = st.Close()
	}
	b.stmts = nil
	discard(b.conn)
	b.conn = nil
	b.mu.Lock()
	b.id = 0
	b.mu.Unlock()
}

// sync does one round of work and says when the next is due.
func (b *bells) sync() time.Duration {
	if b.conn == nil {
		b.mu.Lock()
		idle := len(b.want) == 0
		b.mu.Unlock()
		if idle {
			return bellKeepAlive
		}
		if b.connect(); b.conn == nil {
			return time.Second
		}
	}
	now := time.Now()
	keepAlive := b.last.Add(bellKeepAlive)
	next := now.Add(bellKeepAlive)
	wanted := map[string]bool{} // true: someone waited at a grant that wants it
	dirty := map[string]bool{}  // bells whose claims wait for their from
	look := func(bell string) {
		taken, waited := false, false
		owners := b.want[bell]
		kept := owners[:0]
		for _, c := range owners {
			switch {
			case !c.deadline.After(now):
				continue // the lease ran out by our clock
			case c.from.After(now): // not yet: nobody waited at the grant
				next = minTime(next, c.from)
				dirty[bell] = true
			default:
				taken, waited = true, waited || !c.quiet
			}
			next = minTime(next, c.deadline)
			kept = append(kept, c)
		}
		if len(kept) == 0 {
			delete(b.want, bell)
		} else {
			b.want[bell] = kept
			if taken {
				wanted[bell] = waited
			}
		}
	}
	b.mu.Lock()
	// A round looks at the bells held and the dirty ones, so that it costs
	// what changed rather than what is held (a Driver may hold a million
	// locks, and most of them no bell); every bellKeepAlive, at all.
	all := !now.Before(b.nextFull)
	if all {
		b.nextFull = now.Add(bellKeepAlive)
		for bell := range b.want {
			look(bell)
		}
	} else {
		for bell := range b.have {
			look(bell)
		}
		for bell := range b.dirty {
			look(bell)
		}
	}
	looked := b.dirty
	b.dirty = dirty
	next = minTime(next, b.nextFull)
	// The round's drops and takes are chosen under mu too, and the takes
	// published (taking): a release from here on whose bell is among them
	// asks for another round, which drops the bell again.
	for bell := range b.gaveUp {
		if _, ok := wanted[bell]; !ok && (all || looked[bell]) {
			delete(b.gaveUp, bell)
		}
	}
	var drops, takes []string
	for bell := range b.have {
		if _, ok := wanted[bell]; !ok {
			drops = append(drops, bell)
		}
	}
	held := len(b.have) - len(drops)
	for bell, waited := range wanted {
		if !b.have[bell] && !b.gaveUp[bell] && (waited || held < b.maxQuiet) {
			if b.taking == nil {
				b.taking = map[string]bool{}
			}
			takes = append(takes, bell)
			b.taking[bell] = true
			held++
		}
	}
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.taking = nil
		b.mu.Unlock()
	}()
	if len(drops)+len(takes) == 0 && now.Before(keepAlive) {
		return max(time.Until(minTime(next, keepAlive)), time.Millisecond)
	}
	// One statement, one round trip: drops first, so waiters wake as early
	// as possible. Bell names are "dlock:" and hex digits (bellName), so
	// they are written as literals: a text statement needs no prepare.
	var sel strings.Builder
	sel.WriteString("SELECT 1")
	for _, bell := range drops {
		fmt.Fprintf(&sel, ", RELEASE_LOCK('%s')", bell)
	}
	for _, bell := range takes {
		fmt.Fprintf(&sel, ", GET_LOCK('%s', %d)", bell, bellTake)
	}
	res := make([]sql.NullInt64, 1+len(drops)+len(takes))
	dest := make([]any, len(res))
	for i := range res {
		dest[i] = &res[i]
	}
	ctx, cancel := context.WithTimeout(context.Background(), (bellTake+5)*time.Second)
	defer cancel()
	b.rounds.Add(1)
	if err := b.conn.QueryRowContext(ctx, sel.String()).Scan(dest...); err != nil {
		b.disconnect() // the session's state is unknown: end it, and with it its bells
		return bellRetry
	}
	b.last = time.Now()
	b.mu.Lock()
	for _, bell := range drops {
		delete(b.have, bell)
	}
	for i, bell := range takes {
		if r := res[1+len(drops)+i]; r.Valid && r.Int64 == 1 {
			b.have[bell] = true
		} else {
			b.gaveUp[bell] = true
		}
	}
	b.full = len(b.have) >= b.maxQuiet
	b.mu.Unlock()
	return max(time.Until(next), time.Millisecond)
}
