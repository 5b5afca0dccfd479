package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock/dlock/internal/testenv"
)

// TestRunSharedReadersHoldTogetherAndExcludeAWriter: two "dlock run
// --shared" hold NAME together (inspect lists both readers); a plain
// "dlock run --no-wait" of NAME, the writer, is refused with status 75
// while they hold it, and runs once they are gone.
func TestRunSharedReadersHoldTogetherAndExcludeAWriter(t *testing.T) {
	dev := sharedDev(t)
	name := t.Name() + "/catalog"
	a := startDlock(t, dev.env(), "run", "--shared", "--note", "reader a", name, "--", "sleep", "120")
	b := startDlock(t, dev.env(), "run", "--shared", "--note", "reader b", name, "--", "sleep", "120")
	testenv.Eventually(t, time.Minute, "two readers holding "+name, func() error {
		if j := lockState(t, dev.env(), name); len(j.Permits) != 2 {
			return fmt.Errorf("%d readers: %+v", len(j.Permits), j)
		}
		return nil
	})
	if r := runDlock(t, dev.env(), "inspect", name); r.code != 0 || !strings.Contains(r.stdout, "reader a") || !strings.Contains(r.stdout, "reader b") {
		t.Errorf("inspect while two readers hold: %s", r)
	}
	if r := runDlock(t, dev.env(), "run", "--no-wait", name, "--", "true"); r.code != exitNotAcquired {
		t.Errorf("a writer while two readers hold: %s; want status %d", r, exitNotAcquired)
	}
	for _, p := range []*background{a, b} {
		_ = p.cmd.Process.Kill()
		p.wait(t)
	}
	r := runDlock(t, dev.env(), "run", "--wait", "60s", name, "--", "true")
	if r.code != 0 {
		t.Errorf("a writer after the readers died: %s", r)
	}
	if r := runDlock(t, dev.env(), "run", "--shared", "--limit", "2", name, "--", "true"); r.code != exitUsage {
		t.Errorf("--shared with --limit 2: %s; want status %d", r, exitUsage)
	}
}
