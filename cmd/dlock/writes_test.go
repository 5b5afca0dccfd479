package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// notDevEnv points DLOCK_BACKEND at dev's server from an environment in
// which no dlock dev is announced: to dlock, a backend someone else runs.
func notDevEnv(t *testing.T, dev *devServer) []string {
	return cleanEnv("DLOCK_BACKEND="+dev.url, "TMPDIR="+t.TempDir())
}

func TestBenchAndVerifyAskBeforeWritingToAnotherBackend(t *testing.T) {
	dev := sharedDev(t)
	env := notDevEnv(t, dev)
	for _, args := range [][]string{
		{"bench", "--workers", "2", "--duration", "2s"},
		{"verify", "--faults", "none", "--clients", "2", "--ttl", "2s", "--duration", "10s"},
	} {
		// Standard input is /dev/null: no terminal to ask on.
		r := runDlock(t, env, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--yes") || !strings.Contains(r.stderr, "writes to") {
			t.Errorf("dlock %s without --yes and without a terminal: %s; want status %d, what it writes, and advice to pass --yes", strings.Join(args, " "), r, exitUsage)
		}
	}
}

func TestBenchWithYesLeavesNoLockBehind(t *testing.T) {
	dev := sharedDev(t)
	r := runDlock(t, notDevEnv(t, dev), "bench", "--yes", "--workers", "3", "--keys", "1", "--duration", "1s")
	if r.code != 0 {
		t.Fatalf("bench --yes: %s", r)
	}
	m := regexp.MustCompile(`locks named (bench/[0-9a-f]+/)`).FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("bench should say which locks it writes: %s", r)
	}
	l := runDlock(t, dev.env(), "list", "--json", m[1])
	var list struct{ Locks []json.RawMessage }
	if l.code != 0 || json.Unmarshal([]byte(l.stdout), &list) != nil || list.Locks == nil || len(list.Locks) != 0 {
		t.Errorf("list %s after the bench: %s; want no lock left", m[1], l)
	}
}
