package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/etcdlock"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

func TestInspectListAndBreakShowTheHolder(t *testing.T) {
	dev := sharedDev(t)
	name := t.Name() + "/job"
	holder := startDlock(t, dev.env(), "run", "--note", "nightly run", name, "--", "sleep", "120")
	j := waitHeld(t, dev.env(), name, holder.pid())
	if j.Token == 0 || j.Holder.Note != "nightly run" || j.Holder.AcquiredAt.IsZero() || j.ExpiresInSeconds == nil {
		t.Errorf("inspect --json: %+v; want a token, the note, the acquisition time and the expiry", j)
	}

	r := runDlock(t, dev.env(), "inspect", name)
	for _, want := range []string{"state", "held", fmt.Sprint(j.Token), fmt.Sprintf("pid %d", holder.pid()), `"nightly run"`, "expires in", "waiters"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("inspect output lacks %q:\n%s", want, r.stdout)
		}
	}

	r = runDlock(t, dev.env(), "list", t.Name()+"/")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "NAME") || !strings.HasPrefix(lines[1], name+" ") {
		t.Fatalf("list %s/: %s; want a header and one row", t.Name(), r)
	}
	// Aligned: each column starts where its header does.
	if col := strings.Index(lines[0], "TOKEN"); !strings.HasPrefix(lines[1][col:], fmt.Sprint(j.Token)) {
		t.Errorf("the TOKEN column is not aligned:\n%s", r.stdout)
	}
	r = runDlock(t, dev.env(), "list", "--json", t.Name()+"/")
	var all struct{ Locks []lockView }
	if err := json.Unmarshal([]byte(r.stdout), &all); err != nil || len(all.Locks) != 1 || all.Locks[0].Name != name || all.Locks[0].Token != j.Token {
		t.Errorf("list --json: %v %s", err, r)
	}

	if r = runDlock(t, dev.env(), "break", name); r.code != 0 {
		t.Fatalf("break: %s", r)
	}
	if res := holder.wait(t); res.code != exitLeaseLost {
		t.Errorf("the broken holder: %s; want status %d", res, exitLeaseLost)
	}
	if r = runDlock(t, dev.env(), "break", name); r.code != 1 || !strings.Contains(r.stderr, "not held") {
		t.Errorf("break of a free lock: %s; want status 1 and \"not held\"", r)
	}
	r = runDlock(t, dev.env(), "list", t.Name()+"/")
	if r.code != 0 || !strings.Contains(r.stdout, "no lock") {
		t.Errorf("list after break: %s", r)
	}
}

// TestJSONHasASchemaAndNullsForMissingValues: inspect --json and list
// --json carry "schema": 1 at the top, and a value that is unknown or does
// not apply is null, its key still there.
func TestJSONHasASchemaAndNullsForMissingValues(t *testing.T) {
	dev := sharedDev(t)
	name := t.Name() + "/job"
	holder := startDlock(t, dev.env(), "run", name, "--", "sleep", "120") // no --note
	waitHeld(t, dev.env(), name, holder.pid())
	decode := func(args ...string) map[string]any {
		t.Helper()
		r := runDlock(t, dev.env(), args...)
		var m map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &m); r.code != 0 || err != nil {
			t.Fatalf("dlock %s: %v\n%s", strings.Join(args, " "), err, r)
		}
		if m["schema"] != float64(jsonSchema) {
			t.Errorf("dlock %s: schema = %v, want %d", strings.Join(args, " "), m["schema"], jsonSchema)
		}
		return m
	}
	// has checks that m has every key, and that those in nulls are null.
	has := func(what string, m map[string]any, keys []string, nulls ...string) {
		t.Helper()
		for _, k := range keys {
			if _, ok := m[k]; !ok {
				t.Errorf("%s lacks the key %q: %v", what, k, m)
			}
		}
		for _, k := range nulls {
			if v, ok := m[k]; !ok || v != nil {
				t.Errorf("%s: %q = %v, want null", what, k, v)
			}
		}
	}
	lockKeys := []string{"name", "held", "token", "holder", "expires_in_seconds", "waiters", "limit", "permits"}
	holderKeys := []string{"host", "pid", "note", "acquired_at"}

	list := decode("list", "--json", t.Name()+"/")
	locks, _ := list["locks"].([]any)
	if len(locks) != 1 {
		t.Fatalf("list --json: locks = %v, want the one held", list["locks"])
	}
	held, _ := locks[0].(map[string]any)
	has("a held lock in list --json", held, lockKeys, "limit")
	h, _ := held["holder"].(map[string]any)
	has("its holder", h, holderKeys, "note")

	free := decode("inspect", "--json", t.Name()+"/free")
	has("inspect --json of a free lock", free, lockKeys, "token", "holder", "expires_in_seconds", "limit")
	if p, ok := free["permits"].([]any); !ok || len(p) != 0 {
		t.Errorf("inspect --json of a free lock: permits = %v, want []", free["permits"])
	}
	if w, ok := free["waiters"].([]any); !ok || len(w) != 0 {
		t.Errorf("inspect --json of a free lock: waiters = %v, want []", free["waiters"])
	}
	empty := decode("list", "--json", t.Name()+"/none/")
	if l, ok := empty["locks"].([]any); !ok || len(l) != 0 {
		t.Errorf("list --json with no match: locks = %v, want []", empty["locks"])
	}

	if r := runDlock(t, dev.env(), "break", name); r.code != 0 {
		t.Fatalf("break: %s", r)
	}
	holder.wait(t)
}

func TestDevAnnouncesItselfAndKeepsTokensAcrossRestart(t *testing.T) {
	root := t.TempDir()
	xdg, data := filepath.Join(root, "run"), filepath.Join(root, "data")
	port := testenv.FreePort(t)
	dev, err := startDev(xdg, data, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dev.stop)
	if !strings.Contains(dev.out.String(), dlock.Redact(dev.url)) {
		t.Errorf("dlock dev should print the URL to use, %s:\n%s", dlock.Redact(dev.url), dev.out.String())
	}
	r := runDlock(t, dev.env(), "dev", "--data-dir", filepath.Join(root, "other"), "--listen", "127.0.0.1:0")
	if r.code == 0 || !strings.Contains(r.stderr, "already runs") {
		t.Errorf("a second dlock dev with the same announcement file: %s", r)
	}
	r = runDlock(t, cleanEnv("XDG_RUNTIME_DIR="+t.TempDir()), "dev", "--data-dir", data, "--listen", "127.0.0.1:0")
	if r.code == 0 || !strings.Contains(r.stderr, "in use") {
		t.Errorf("a second dlock dev on the same --data-dir: %s", r)
	}
	r = runDlock(t, dev.env(), "run", "job", "--", "sh", "-c", "echo $DLOCK_TOKEN")
	before := strings.TrimSpace(r.stdout)

	dev.stop()
	if code := dev.proc.ProcessState.ExitCode(); code != 0 {
		t.Errorf("dlock dev exited with %d on SIGINT, want 0:\n%s", code, dev.out.String())
	}
	if _, err := os.Stat(filepath.Join(xdg, "dlock", "dev.url")); !os.IsNotExist(err) {
		t.Errorf("dev.url left behind after shutdown: %v", err)
	}
	r = runDlock(t, dev.env(), "run", "job", "--", "true")
	if r.code != exitUsage || !strings.Contains(r.stderr, "dlock dev") {
		t.Errorf("run with no dev server: %s; want status %d and advice to start dlock dev", r, exitUsage)
	}

	dev, err = startDev(xdg, data, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dev.stop)
	r = runDlock(t, dev.env(), "run", "job", "--", "sh", "-c", "echo $DLOCK_TOKEN")
	after := strings.TrimSpace(r.stdout)
	if r.code != 0 || len(after) < len(before) || len(after) == len(before) && after <= before {
		t.Errorf("token after a restart of dlock dev = %q, not above %q from before: %s", after, before, r)
	}
}

func TestHolderRecordCannotWriteToTheTerminal(t *testing.T) {
	dev := sharedDev(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := etcdlock.Open(ctx, dev.url)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	// A holder record as any client of the backend can write it: a host
	// that sets the window title, clears the screen and forges a table row.
	evil := "evil\x1b]0;pwned\x07\x1b[2J\nforged-lock  99  innocent pid 1\r"
	holder, _ := json.Marshal(map[string]any{"host": evil, "pid": 4242, "note": "n\x1b[31m\nforged"})
	name := t.Name() + "/\x1b[1mname"
	if _, err := d.Acquire(ctx, driver.Request{Name: name, Owner: strings.Repeat("ab", 16), TTL: time.Minute, Holder: holder}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"list", t.Name()},
		{"inspect", name},
		{"run", "--no-wait", name, "--", "true"},
		{"break", name},
	} {
		r := runDlock(t, dev.env(), args...)
		out := r.stdout + r.stderr
		if strings.ContainsAny(out, "\x1b\x07\r") || strings.Contains(out, "\nforged") || !strings.Contains(out, "pid 4242") {
			t.Errorf("dlock %s printed the holder's control characters or a forged line (or not the holder):\n%q", args[0], out)
		}
	}
}

func TestBreakOnlyTheGrantWithTheGivenToken(t *testing.T) {
	dev := sharedDev(t)
	holder := startDlock(t, dev.env(), "run", "--note", "batch", t.Name(), "--", "sleep", "120")
	j := waitHeld(t, dev.env(), t.Name(), holder.pid())

	r := runDlock(t, dev.env(), "break", "--token", fmt.Sprint(j.Token+1), t.Name())
	if r.code != 1 || !strings.Contains(r.stderr, fmt.Sprintf("token %d", j.Token)) {
		t.Errorf("break --token of another grant: %s; want status 1, naming the grant that holds it", r)
	}
	if now := lockState(t, dev.env(), t.Name()); now.Token != j.Token {
		t.Fatalf("break --token %d broke the grant with token %d: %+v", j.Token+1, j.Token, now)
	}
	r = runDlock(t, dev.env(), "break", "--token", fmt.Sprint(j.Token), t.Name())
	want := fmt.Sprintf(`pid %d "batch" with token %d`, holder.pid(), j.Token)
	if r.code != 0 || !strings.Contains(r.stdout, want) {
		t.Errorf("break --token of the holding grant: %s; want status 0 and %q", r, want)
	}
	if res := holder.wait(t); res.code != exitLeaseLost {
		t.Errorf("the broken holder: %s; want status %d", res, exitLeaseLost)
	}
}

func TestBreakAsksOnATerminal(t *testing.T) {
	dev := sharedDev(t)
	holder := startDlock(t, dev.env(), "run", t.Name(), "--", "sleep", "120")
	j := waitHeld(t, dev.env(), t.Name(), holder.pid())
	question := fmt.Sprintf(`pid %d with token %d\? \[y/N\]`, holder.pid(), j.Token)

	term := startTerminal(t, dev.env(), dlockBin, "break", t.Name())
	term.expect(question)
	term.send("n\n")
	if code := term.wait().ExitCode(); code != 1 {
		t.Errorf("break answered n: status %d, want 1", code)
	}
	if now := lockState(t, dev.env(), t.Name()); now.Token != j.Token {
		t.Fatalf("break answered n broke the lock: %+v", now)
	}

	term = startTerminal(t, dev.env(), dlockBin, "break", t.Name())
	term.expect(question)
	term.send("y\n")
	term.expect(fmt.Sprintf("broke .* pid %d with token %d", holder.pid(), j.Token))
	if code := term.wait().ExitCode(); code != 0 {
		t.Errorf("break answered y: status %d, want 0", code)
	}
	if res := holder.wait(t); res.code != exitLeaseLost {
		t.Errorf("the broken holder: %s; want status %d", res, exitLeaseLost)
	}
}
