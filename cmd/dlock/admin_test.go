package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	var all []lockJSON
	if err := json.Unmarshal([]byte(r.stdout), &all); err != nil || len(all) != 1 || all[0].Name != name || all[0].Token != j.Token {
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

func TestDevAnnouncesItselfAndKeepsTokensAcrossRestart(t *testing.T) {
	root := t.TempDir()
	xdg, data := filepath.Join(root, "run"), filepath.Join(root, "data")
	port := testenv.FreePort(t)
	dev, err := startDev(xdg, data, port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dev.stop)
	if !strings.Contains(dev.out.String(), dev.url) {
		t.Errorf("dlock dev should print the URL to use, %s:\n%s", dev.url, dev.out.String())
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
