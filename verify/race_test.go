package verify

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// raceChildEnv makes the test binary a process that races and exits 0 (see
// TestMain): "foreign" in the standard library alone, "ours" in this
// package's code.
const raceChildEnv = "DLOCK_VERIFY_RACE_CHILD"

var raced int

func raceChild(mode string) {
	var wg sync.WaitGroup
	switch mode {
	case "foreign":
		// A method value called with no arguments starts the goroutine
		// in package bytes itself: no frame of this package's code.
		var buf bytes.Buffer
		reset := buf.Reset
		go reset()
		go reset()
		time.Sleep(100 * time.Millisecond)
	default:
		for range 2 {
			wg.Go(func() {
				raced++
				time.Sleep(10 * time.Millisecond)
			})
		}
	}
	wg.Wait()
}

// sdkRace is the shape of the report that failed a verify run of the
// Temporal backend under the pause fault: the SDK's cache eviction against
// its own update handler, no dlock frame in either access.
const sdkRace = `2026/12/06 19:48:01 INFO worker started
==================
WARNING: DATA RACE
Write at 0x00c0004a2d38 by goroutine 212:
  runtime.mapdelete_faststr()
      /usr/local/go/src/internal/runtime/maps/runtime_faststr.go:397 +0x0
  go.temporal.io/sdk/internal.(*workflowEnvironmentImpl).defaultUpdateHandler.func1()
      /root/go/pkg/mod/go.temporal.io/sdk@v1.51.0/internal/internal_update.go:301 +0x64
  go.temporal.io/sdk/internal.(*coroutineState).initialYield()
      /root/go/pkg/mod/go.temporal.io/sdk@v1.51.0/internal/internal_workflow.go:1081 +0x1a4

Previous read at 0x00c0004a2d38 by goroutine 187:
  go.temporal.io/sdk/internal.(*workflowExecutionContextImpl).clearState()
      /root/go/pkg/mod/go.temporal.io/sdk@v1.51.0/internal/internal_task_handlers.go:703 +0x2c4
  go.temporal.io/sdk/internal.(*workflowExecutionContextImpl).onEviction()
      /root/go/pkg/mod/go.temporal.io/sdk@v1.51.0/internal/internal_task_handlers.go:640 +0x88

Goroutine 212 (running) created at:
  go.temporal.io/sdk/internal.(*dispatcherImpl).newNamedCoroutine()
      /root/go/pkg/mod/go.temporal.io/sdk@v1.51.0/internal/internal_workflow.go:1147 +0x3c8

Goroutine 187 (running) created at:
  go.temporal.io/sdk/worker.(*Worker).Start()
      /root/go/pkg/mod/go.temporal.io/sdk@v1.51.0/worker/worker.go:270 +0x44
  github.com/dlock/dlock/backend/temporallock.(*Driver).startWorker()
      /work/main/backend/temporallock/worker.go:88 +0x1f0
==================
`

func TestForeignRacesReadsTheRaceDetectorsReports(t *testing.T) {
	ourFrame := "  github.com/dlock/dlock/backend/temporallock.(*lockWorkflow).run()\n      /work/main/backend/temporallock/workflow.go:120 +0x88\n"
	for _, c := range []struct {
		name, log string
		excused   bool
	}{
		{"the SDK alone, dlock only where a goroutine was created", sdkRace, true},
		{"two reports, both foreign", sdkRace + sdkRace, true},
		{"a dlock frame in the first access", strings.Replace(sdkRace, "  runtime.mapdelete_faststr()", ourFrame+"  runtime.mapdelete_faststr()", 1), false},
		{"a dlock frame at the bottom of the previous access", strings.Replace(sdkRace, "\nGoroutine 212", ourFrame+"\nGoroutine 212", 1), false},
		{"the root package", strings.Replace(sdkRace, "  runtime.mapdelete_faststr()", "  github.com/dlock/dlock.(*Lease).renew()", 1), false},
		{"one foreign report and one of ours", sdkRace + strings.Replace(sdkRace, "  runtime.mapdelete_faststr()", ourFrame+"  runtime.mapdelete_faststr()", 1), false},
		{"no report", "2026/12/06 19:48:01 INFO worker started\n", false},
		{"a report cut short", sdkRace[:strings.Index(sdkRace, "Goroutine 212")], false},
	} {
		path := filepath.Join(t.TempDir(), "c0.0.log")
		if err := os.WriteFile(path, []byte(c.log), 0o644); err != nil {
			t.Fatal(err)
		}
		got := foreignRaces(path)
		if (got != "") != c.excused {
			t.Errorf("%s: excused = %q, want excused %v", c.name, got, c.excused)
		}
		if c.excused && (!strings.Contains(got, "go.temporal.io/sdk/internal") || !strings.Contains(got, "runtime")) {
			t.Errorf("%s: the excuse does not name the packages: %q", c.name, got)
		}
	}
	if got := foreignRaces(filepath.Join(t.TempDir(), "missing.log")); got != "" {
		t.Errorf("a missing log is excused: %q", got)
	}
}

// An exit with the race detector's status is a note only with the excuse
// the harness found in the log; without it, it is a violation.
func TestRaceExitIsANoteOnlyWithAnExcuse(t *testing.T) {
	for _, excuse := range []string{"", "the race detector's 1 report(s) have no frame of dlock's code"} {
		h := &history{}
		h.add(Event{Proc: "nemesis", Op: OpSpawn, Target: "c0.0"})
		h.grant("c0.0", 1, 5).release("c0.0", 1, 5, OK)
		h.add(Event{Proc: "nemesis", Op: OpExit, Target: "c0.0", Err: "exit status 66", Excuse: excuse})
		r := Check(h.events, Params{TTL: time.Second, Bound: time.Second})
		note := strings.Contains(strings.Join(r.Notes, "\n"), "c0.0 exited with exit status 66: "+excuse)
		switch {
		case excuse == "" && (r.Verdict() != "FAIL" || !violationContains(r, CheckComplete, "c0.0 exited with exit status 66")):
			t.Errorf("an unexcused race exit: %s, %v", r.Verdict(), r.Violations)
		case excuse != "" && (r.Verdict() != "PASS" || !note):
			t.Errorf("an excused race exit: %s, notes %v, %v", r.Verdict(), r.Notes, r.Violations)
		}
	}
}
