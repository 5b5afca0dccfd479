package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/memlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

// TestRunLimitKeepsAtMostNCopiesRunning starts 16 "dlock run --limit 3" at
// once. Each CMD counts itself in and out of a shared counter under
// flock(1), and records the highest count it saw: it must never pass 3,
// and must reach at least 2 (the permits are shared, not one at a time).
// So that a loaded machine, starting each dlock slowly, cannot make the
// copies miss each other, a CMD that has not yet seen a second copy at
// the end of its sleep holds on (up to 3s) until one comes in: with shared
// permits one does; with permits granted one at a time, none can.
func TestRunLimitKeepsAtMostNCopiesRunning(t *testing.T) {
	dev := sharedDev(t)
	dir := t.TempDir()
	counter, highest := filepath.Join(dir, "counter"), filepath.Join(dir, "highest")
	for _, f := range []string{counter, highest} {
		if err := os.WriteFile(f, []byte("0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := `( flock 9; n=$(($(cat "$1") + 1)); echo $n > "$1"; if [ $n -gt $(cat "$2") ]; then echo $n > "$2"; fi ) 9>"$1.lock"
sleep 0.2
i=0; while [ "$(flock "$1.lock" cat "$2")" -lt 2 ] && [ $i -lt 60 ]; do sleep 0.05; i=$((i+1)); done
( flock 9; echo $(($(cat "$1") - 1)) > "$1" ) 9>"$1.lock"
echo "$DLOCK_LIMIT $DLOCK_TOKEN"`
	const n, limit = 16, 3
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			results[i] = runDlock(t, dev.env(), "run", "--limit", strconv.Itoa(limit), "--wait", "90s", t.Name(), "--", "sh", "-c", script, "sh", counter, highest)
		})
	}
	wg.Wait()
	tokens := map[string]bool{}
	for i, r := range results {
		if r.code != 0 {
			t.Errorf("dlock run --limit %d #%d: %s", limit, i, r)
			continue
		}
		env, tok, _ := strings.Cut(strings.TrimSpace(r.stdout), " ")
		if env != strconv.Itoa(limit) || tokens[tok] {
			t.Errorf("dlock run --limit %d #%d: CMD saw DLOCK_LIMIT=%q, DLOCK_TOKEN=%q; want %d and a token of its own", limit, i, env, tok, limit)
		}
		tokens[tok] = true
	}
	b, _ := os.ReadFile(highest)
	most, err := strconv.Atoi(strings.TrimSpace(string(b)))
	switch {
	case err != nil:
		t.Fatalf("highest count: %v", err)
	case most > limit:
		t.Errorf("%d copies of CMD ran at once under --limit %d", most, limit)
	case most < 2:
		t.Errorf("at most %d copy of CMD ran at once under --limit %d: the permits were not shared", most, limit)
	}
	t.Logf("at most %d of %d copies ran at once under --limit %d", most, n, limit)
	if b, _ := os.ReadFile(counter); strings.TrimSpace(string(b)) != "0" {
		t.Errorf("counter = %q after every CMD ended, want 0", b)
	}
	if j := lockState(t, dev.env(), t.Name()); j.Held || len(j.Permits) != 0 {
		t.Errorf("%q still held after every run ended: %+v", t.Name(), j)
	}
}

// TestInspectAndListShowEveryPermitHolder: two "dlock run --limit 3" hold
// permits of one semaphore; inspect and list show both, as tables and as
// JSON.
func TestInspectAndListShowEveryPermitHolder(t *testing.T) {
	dev := sharedDev(t)
	name := t.Name() + "/pool"
	a := startDlock(t, dev.env(), "run", "--limit", "3", "--note", "permit a", name, "--", "sleep", "120")
	b := startDlock(t, dev.env(), "run", "--limit", "3", "--note", "permit b", name, "--", "sleep", "120")
	var j lockView
	testenv.Eventually(t, time.Minute, fmt.Sprintf("two permits of %q held", name), func() error {
		if j = lockState(t, dev.env(), name); len(j.Permits) != 2 {
			return fmt.Errorf("%d permits held: %+v", len(j.Permits), j.Permits)
		}
		return nil
	})
	checkPermitsJSON(t, "inspect --json", j, name, []int{a.pid(), b.pid()}, []string{"permit a", "permit b"})

	r := runDlock(t, dev.env(), "inspect", name)
	want := []string{"2 of 3 permits held"}
	for _, p := range j.Permits {
		want = append(want, fmt.Sprintf("token %d", p.Token), fmt.Sprintf("pid %d %q", p.Holder.PID, p.Holder.Note))
	}
	for _, w := range want {
		if r.code != 0 || !strings.Contains(r.stdout, w) {
			t.Errorf("inspect %s lacks %q: %s", name, w, r)
		}
	}

	r = runDlock(t, dev.env(), "list", t.Name()+"/")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 4 || !strings.HasPrefix(lines[0], "NAME") || !strings.HasPrefix(lines[1], name+" ") || !strings.Contains(lines[1], "2 of 3 permits held") {
		t.Fatalf("list %s/: %s; want a header, a row for the semaphore and one for each permit", t.Name(), r)
	}
	for i, p := range j.Permits {
		line := lines[2+i]
		if col := strings.Index(lines[0], "TOKEN"); !strings.HasPrefix(line[col:], fmt.Sprint(p.Token)) || !strings.Contains(line, fmt.Sprintf("pid %d", p.Holder.PID)) {
			t.Errorf("list: the row of permit %d is %q; want its token %d in the TOKEN column and pid %d", i+1, line, p.Token, p.Holder.PID)
		}
	}
	r = runDlock(t, dev.env(), "list", "--json", t.Name()+"/")
	var all struct{ Locks []lockView }
	if err := json.Unmarshal([]byte(r.stdout), &all); err != nil || len(all.Locks) != 1 {
		t.Fatalf("list --json: %v %s", err, r)
	}
	checkPermitsJSON(t, "list --json", all.Locks[0], name, []int{a.pid(), b.pid()}, []string{"permit a", "permit b"})
}

// checkPermitsJSON checks the JSON of a semaphore with a permit held by
// each of pids, whichever order they were granted in.
func checkPermitsJSON(t *testing.T, what string, j lockView, name string, pids []int, notes []string) {
	t.Helper()
	if j.Name != name || !j.Held || j.Limit == nil || *j.Limit != 3 || len(j.Permits) != len(pids) {
		t.Fatalf("%s: %+v; want %q held, limit 3, %d permits", what, j, name, len(pids))
	}
	var prev uint64
	for i, p := range j.Permits {
		k := -1
		for m, pid := range pids {
			if p.Holder.PID == pid {
				k = m
			}
		}
		switch {
		case k < 0 || p.Holder.Note != notes[k]:
			t.Errorf("%s: permit %d is %+v; want one of pids %v with its note", what, i+1, p, pids)
		case p.Token <= prev:
			t.Errorf("%s: permit %d has token %d after %d; want them in grant order", what, i+1, p.Token, prev)
		case p.Limit == nil || *p.Limit != 3 || p.ExpiresInSeconds == nil || p.Holder.AcquiredAt.IsZero():
			t.Errorf("%s: permit %d is %+v; want its limit 3, expiry and acquisition time", what, i+1, p)
		}
		prev = p.Token
	}
	// The first permit is also the lock's holder, as before semaphores.
	if j.Holder == nil || j.Token != j.Permits[0].Token || j.Holder.PID != j.Permits[0].Holder.PID {
		t.Errorf("%s: token %d, holder %+v; want those of the first permit %+v", what, j.Token, j.Holder, j.Permits[0])
	}
}

// The in-process tests below run dlock's commands in the test process,
// against memlock: what they check does not need separate processes.

func runInProcess(args ...string) (int, string, string) {
	var out, errb strings.Builder
	code := dlockMain(args, &out, &errb)
	return code, out.String(), errb.String()
}

// TestInspectAndListOfASemaphoreInProcess: permits taken through the
// library show in inspect and list, tables and JSON, with the limit each
// holder was granted under; a mutex's JSON has "limit": null and
// "permits": [].
func TestInspectAndListOfASemaphoreInProcess(t *testing.T) {
	backend := "mem://" + strings.ReplaceAll(t.Name(), "/", "-")
	ctx := testenv.Context(t, time.Minute)
	c, err := dlock.Open(ctx, backend)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sem := c.Semaphore("pool", 3, dlock.WithNote("first"))
	l1, err := sem.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c.Semaphore("pool", 3).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mu, err := c.Mutex("plain").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _, _ = l1.Unlock(ctx), l2.Unlock(ctx), mu.Unlock(ctx) }()

	code, out, errs := runInProcess("inspect", "--backend", backend, "pool")
	t.Logf("dlock inspect pool:\n%s", out)
	for _, w := range []string{"held: 2 of 3 permits held", fmt.Sprintf("token %d", l1.Token()), fmt.Sprintf("token %d", l2.Token()), `"first"`, "expires in"} {
		if code != 0 || !strings.Contains(out, w) {
			t.Errorf("inspect pool: status %d, stderr %q; output lacks %q:\n%s", code, errs, w, out)
		}
	}
	if strings.Contains(out, "holder\t") {
		t.Errorf("inspect of a semaphore shows a single holder:\n%s", out)
	}

	code, out, errs = runInProcess("inspect", "--json", "--backend", backend, "pool")
	t.Logf("dlock inspect --json pool:\n%s", out)
	var j lockView
	if err := json.Unmarshal([]byte(out), &j); code != 0 || err != nil {
		t.Fatalf("inspect --json pool: status %d, %v, stderr %q", code, err, errs)
	}
	if j.Limit == nil || *j.Limit != 3 || len(j.Permits) != 2 || j.Permits[0].Token != l1.Token() || j.Permits[1].Token != l2.Token() ||
		j.Permits[0].Holder.Note != "first" || j.Permits[1].Holder.PID != os.Getpid() || j.Permits[0].ExpiresInSeconds == nil || j.Token != l1.Token() {
		t.Errorf("inspect --json pool: %+v; want limit 3 and both permits in grant order", j)
	}
	var raw map[string]any
	_, out, _ = runInProcess("inspect", "--json", "--backend", backend, "plain")
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	if p, ok := raw["permits"].([]any); !ok || len(p) != 0 || raw["limit"] != nil {
		t.Errorf("inspect --json of a mutex: limit %v, permits %v; want null and []:\n%s", raw["limit"], raw["permits"], out)
	}
	if _, ok := raw["limit"]; !ok {
		t.Errorf("inspect --json of a mutex lacks the key \"limit\":\n%s", out)
	}

	code, out, _ = runInProcess("list", "--backend", backend)
	t.Logf("dlock list:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 5 || !strings.HasPrefix(lines[1], "plain ") || !strings.HasPrefix(lines[2], "pool ") ||
		!strings.Contains(lines[2], "2 of 3 permits held") || !strings.HasPrefix(lines[3], "  permit 1 ") || !strings.HasPrefix(lines[4], "  permit 2 ") {
		t.Errorf("list: status %d; want a header, the mutex, the semaphore and its two permits:\n%s", code, out)
	}
	code, out, _ = runInProcess("list", "--json", "--backend", backend)
	var all struct{ Locks []lockView }
	if err := json.Unmarshal([]byte(out), &all); code != 0 || err != nil || len(all.Locks) != 2 || len(all.Locks[1].Permits) != 2 || all.Locks[0].Limit != nil {
		t.Errorf("list --json: status %d, %v:\n%s", code, err, out)
	}

	// Holders granted under different limits: each says its own.
	l3, err := c.Semaphore("pool", 5).Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l3.Unlock(ctx) }()
	_, out, _ = runInProcess("inspect", "--backend", backend, "pool")
	if !strings.Contains(out, "3 of 5 permits held (holders disagree on the limit: 3, 5)") {
		t.Errorf("inspect of a semaphore whose holders disagree on the limit:\n%s", out)
	}

	// The readers of a read-write lock are listed as permits are, and
	// called readers.
	for range 2 {
		r, err := c.RWMutex("rw").RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = r.Unlock(ctx) }()
	}
	_, out, _ = runInProcess("inspect", "--backend", backend, "rw")
	if !strings.Contains(out, "held: 2 readers hold it (read-write lock)") || strings.Contains(out, "of 0") {
		t.Errorf("inspect of a read-write lock held by two readers:\n%s", out)
	}
}

// noSemaphores is memlock without semaphores, as a backend that has none.
type noSemaphores struct{ driver.Driver }

func (d noSemaphores) Capabilities() driver.Capabilities {
	c := d.Driver.Capabilities()
	c.Semaphore = false
	return c
}

var registerNoSem = sync.OnceFunc(func() {
	dlock.Register("nosem", func(ctx context.Context, u *url.URL) (driver.Driver, error) {
		return noSemaphores{memlock.New(memlock.Named("nosem-" + u.Host))}, nil
	})
})

// TestRunLimitOnABackendWithoutSemaphoresIsAUsageError: one line naming
// --limit and the backend, status 64, and CMD does not run.
func TestRunLimitOnABackendWithoutSemaphoresIsAUsageError(t *testing.T) {
	registerNoSem()
	ran := filepath.Join(t.TempDir(), "ran")
	code, out, errs := runInProcess("run", "--backend", "nosem://", "--limit", "2", "x", "--", "touch", ran)
	if code != exitUsage || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "--limit 2") || !strings.Contains(errs, "no semaphores") || !strings.Contains(errs, "nosem://") {
		t.Errorf("run --limit 2 on a backend without semaphores: status %d, stdout %q, stderr %q; want status %d and one line naming --limit and the backend", code, out, errs, exitUsage)
	}
	t.Logf("stderr: %s", errs)
	if _, err := os.Stat(ran); err == nil {
		t.Error("CMD ran although no permit was granted")
	}
}
