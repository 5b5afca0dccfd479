package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/pglock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// TestPermitGrantsQueuedOnTheNameCountEachOther: the grants of a
// semaphore's permits are serialized by the name's row of the lease table,
// and each counts the permits after it holds that lock. Here an open
// transaction holds the row while six grants of a semaphore of two queue
// behind it; once it commits, exactly two are granted. (A grant that
// counted the permits as they were before it waited would grant all six.)
func TestPermitGrantsQueuedOnTheNameCountEachOther(t *testing.T) {
	// Also on a server whose sessions default to REPEATABLE READ, where a
	// transaction that did not ask for READ COMMITTED would count the
	// permits as of its first statement, before it waited.
	atEachIsolation(t, testPermitGrantsQueued)
}

func testPermitGrantsQueued(t *testing.T, srv *testenv.Postgres, iso string) {
	rawURL := srv.URL(srv.Addr, "pool_max_conns=10") // a connection for each grant
	if iso != "" {
		rawURL += "&" + iso
	}
	d := newDriver(t, rawURL)
	ctx := testenv.Context(t, 60*time.Second)
	const name, n, grants = "sem/queued", 2, 6
	req := func(owner string) driver.Request {
		return driver.Request{Name: name, Owner: owner, TTL: time.Minute, Limit: n, Holder: []byte(`{"limit":2}`)}
	}
	// Make the name's row and the permits table, and leave the name free.
	g, err := d.Acquire(ctx, req("first"))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, driver.Held{Name: name, Owner: "first", Token: g.Token, Handle: g.Handle}); err != nil {
		t.Fatal(err)
	}

	tx, err := newPool(t, rawURL).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Registered after newPool's Close, so run before it: a failed test
	// must not leave the pool waiting for this connection.
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, `SELECT FROM dlock_leases WHERE name = $1 FOR UPDATE`, []byte(name)); err != nil {
		t.Fatal(err)
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		granted []driver.Grant
		owners  []string
	)
	for i := range grants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("owner%d", i)
			g, _, err := d.TryAcquire(ctx, req(owner))
			switch {
			case err == nil:
				mu.Lock()
				granted, owners = append(granted, g), append(owners, owner)
				mu.Unlock()
			case !errors.Is(err, driver.ErrNotAcquired):
				t.Errorf("TryAcquire: %v", err)
			}
		}()
	}
	// Wait until every grant waits for the row lock.
	for deadline := time.Now().Add(10 * time.Second); ; {
		var waiting int
		if err := newPool(t, rawURL).QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == grants {
			break
		}
		if time.Now().After(deadline) {
			tx.Rollback(ctx)
			wg.Wait()
			t.Fatalf("%d of %d grants waited for the name's row lock; %d were granted", waiting, grants, len(granted))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(granted) != n {
		t.Fatalf("%d of %d grants queued on the name were granted, want %d", len(granted), grants, n)
	}
	in, err := d.Inspect(ctx, name)
	if err != nil || len(in.Permits) != n {
		t.Fatalf("Inspect = %+v, %v; want %d permits", in, err, n)
	}
	for i, g := range granted {
		if err := d.Release(ctx, driver.Held{Name: name, Owner: owners[i], Token: g.Token, Handle: g.Handle}); err != nil {
			t.Error(err)
		}
	}
}

// TestPermitGrantReportsTakeoverOfUnreleasedPermits: a permit's grant is
// Recovered when it fits only because permits ended without a release
// (expired or broken); not when a released permit, or one never taken,
// makes room.
func TestPermitGrantReportsTakeoverOfUnreleasedPermits(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	d := newDriver(t, srv.URL(srv.Addr, ""))
	ctx := testenv.Context(t, 60*time.Second)
	const name = "sem/recovered"
	var last uint64
	acquire := func(owner string, ttl time.Duration, wantRecovered bool) driver.Held {
		t.Helper()
		g, err := d.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: ttl, Wait: true, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if g.Recovered != wantRecovered || g.Token <= last {
			t.Errorf("grant to %s: %+v, want Recovered %v and a token above %d", owner, g, wantRecovered, last)
		}
		last = g.Token
		return driver.Held{Name: name, Owner: owner, Token: g.Token, Handle: g.Handle}
	}
	acquire("a", 200*time.Millisecond, false)
	b := acquire("b", 200*time.Millisecond, false) // the second permit: room was left
	time.Sleep(300 * time.Millisecond)             // both expire
	c := acquire("c", time.Minute, true)           // an expired permit's place
	if err := d.Extend(ctx, b, time.Minute); !errors.Is(err, driver.ErrLeaseLost) {
		t.Errorf("extend of an expired permit: %v, want ErrLeaseLost", err)
	}
	dd := acquire("d", time.Minute, true) // the other expired permit's place
	if err := d.Release(ctx, c); err != nil {
		t.Fatal(err)
	}
	e := acquire("e", time.Minute, false) // a released permit's place
	if err := d.Break(ctx, name); err != nil {
		t.Fatal(err)
	}
	for _, h := range []driver.Held{dd, e} {
		if err := d.Extend(ctx, h, time.Minute); !errors.Is(err, driver.ErrLeaseLost) {
			t.Errorf("extend of %s after Break: %v, want ErrLeaseLost", h.Owner, err)
		}
		if err := d.Release(ctx, h); !errors.Is(err, driver.ErrLeaseLost) {
			t.Errorf("release of %s after Break: %v, want ErrLeaseLost", h.Owner, err)
		}
	}
	acquire("f", time.Minute, true)
	acquire("g", time.Minute, true)
	if err := d.Break(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := d.Break(ctx, name); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("Break of a semaphore whose permits are all broken: %v, want ErrNotHeld", err)
	}
}

// TestTableOfAnOlderVersionGainsPermits: a lease table made by a version
// without semaphores (no permits table) keeps its leases, and gets its
// permits table beside it on first use.
func TestTableOfAnOlderVersionGainsPermits(t *testing.T) {
	t.Parallel()
	srv := testenv.StartPostgres(t)
	srv.Exec(`CREATE SCHEMA ops;
CREATE SEQUENCE ops.locks_token_seq AS bigint;
CREATE TABLE ops.locks (
	name        bytea       PRIMARY KEY,
	owner       text        NOT NULL,
	token       bigint      NOT NULL,
	holder      bytea,
	expires_at  timestamptz NOT NULL,
	acquired_at timestamptz NOT NULL,
	took_over   boolean     NOT NULL DEFAULT false,
	session_key bigint
);
INSERT INTO ops.locks VALUES ('old/held', 'f00d', nextval('ops.locks_token_seq'), NULL, now() + interval '1 hour', now());`)
	c := dlock.New(newDriver(t, srv.URL(srv.Addr, ""), pglock.WithTable("ops.locks")))
	ctx := testenv.Context(t, 60*time.Second)
	if _, err := c.Mutex("old/held").TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock of a lease held in the older table: %v, want ErrNotAcquired", err)
	}
	l, err := c.Semaphore("new/sem", 2).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("Semaphore over the older table: %v", err)
	}
	if got := strings.TrimSpace(srv.Exec(`SELECT count(*) FROM ops.locks_permits`)); got != "1" {
		t.Errorf("ops.locks_permits holds %s rows, want 1", got)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
