package verify

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
)

// TestVerifyShortProfile runs every backend × fault combination of the
// table for a short while with the mutex workload, and each primitive's
// workload (semaphore, read-write lock, election) on the backends that
// offer it, checks each history, and prints one summary table.
// A backend's combinations run one after another, on one deployment;
// backends run one at a time, so that each row has the machine to itself,
// or DLOCK_VERIFY_LANES=N at once (make test runs two).
//
// By default a primitive's workload runs under one fault only
// (primitiveFaults), the election's on etcd only: every test run (make
// test) checks each mechanism against real servers without doubling its
// length. DLOCK_VERIFY_WORKLOADS=all (make verify) runs every workload the
// backend offers under every fault of its row; a comma-separated list
// (mutex,semaphore) runs those under every fault.
//
// DLOCK_VERIFY_OUT=DIR keeps the histories
// (DIR/<backend>-<fault>[-<workload>]) and writes the table to
// DIR/summary.txt; DLOCK_VERIFY_ONLY=etcd,redis/pause restricts the run to
// the named backends or backend/fault pairs; DLOCK_VERIFY_DURATION=1m sets
// the length of each run (a fault run ends earlier, once a grant has
// followed its last heal and two TTLs passed).
func TestVerifyShortProfile(t *testing.T) {
	out := os.Getenv("DLOCK_VERIFY_OUT")
	if out != "" {
		if err := os.MkdirAll(out, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	byBackend := make([][]*Result, len(backends)) // the table keeps the backends' order
	defer func() {
		var b strings.Builder
		WriteTable(&b, slices.Concat(byBackend...))
		if testing.Verbose() {
			os.Stdout.WriteString("\n" + b.String())
		} else {
			t.Logf("verification summary:\n%s", b.String())
		}
		if out != "" {
			_ = os.WriteFile(filepath.Join(out, "summary.txt"), []byte(b.String()), 0o644)
		}
	}()
	lanes := make(chan struct{}, verifyLanes(t))
	// The group returns once every backend's rows ran, in parallel or not.
	t.Run("backends", func(t *testing.T) {
		for i, be := range backends {
			if !selected(be.name, "") {
				continue
			}
			t.Run(be.name, func(t *testing.T) {
				if cap(lanes) > 1 {
					t.Parallel()
				}
				lanes <- struct{}{}
				defer func() { <-lanes }()
				dep := be.start(t)
				caps := capabilitiesOf(t, dep)
				for _, w := range Workloads {
					if !Offered(w, caps) || w == WorkloadFairMutex && !be.fairMode {
						continue
					}
					for _, f := range be.faults {
						if !selected(be.name, f) || !workloadSelected(be.name, w, f) {
							continue
						}
						name := string(f)
						if w != WorkloadMutex {
							name += "/" + string(w)
						}
						t.Run(name, func(t *testing.T) {
							if res := verifyOne(t, be, dep, w, f, out); res != nil {
								byBackend[i] = append(byBackend[i], res)
							}
						})
					}
				}
			})
		}
	})
}

// verifyLanes is how many backends' rows run at once: DLOCK_VERIFY_LANES,
// 1 by default, so that each row has the machine to itself. Rows of one
// backend always run one after another (they share its servers); with 2,
// two backends' deployments and clients share the machine.
func verifyLanes(t *testing.T) int {
	s := os.Getenv("DLOCK_VERIFY_LANES")
	if s == "" {
		return 1
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("DLOCK_VERIFY_LANES=%q: want a number of lanes, 1 or more", s)
	}
	return n
}

// verifyOne runs and checks one row of the table, and returns its result
// (nil if the run could not be carried out).
func verifyOne(t *testing.T, be backend, dep Deployment, w Workload, f Fault, out string) *Result {
	// The history outlives a failed test, for a second look.
	var dir string
	suffix := be.name + "-" + string(f)
	if w != WorkloadMutex {
		suffix += "-" + string(w)
	}
	if out != "" {
		dir = filepath.Join(out, suffix)
	} else {
		d, err := os.MkdirTemp("", "dlock-verify-"+suffix+"-")
		if err != nil {
			t.Fatal(err)
		}
		dir = d
		t.Cleanup(func() {
			if !t.Failed() {
				os.RemoveAll(d)
			}
		})
	}
	// A fault run needs room for rounds and, after the last heal, TTL +
	// bound + 1s of recovery.
	duration := 20 * time.Second
	switch f {
	case None:
		duration = 9 * time.Second
	case Skew:
		duration = 28 * time.Second // a round for each skewed clock
	case Evict, BreakPartition:
		if be.bound == 0 {
			duration = 16 * time.Second // two rounds
		}
	}
	if f != None && be.bound > 5*time.Second {
		duration += be.bound - 5*time.Second // a longer recovery to leave room for
	}
	if d, err := time.ParseDuration(os.Getenv("DLOCK_VERIFY_DURATION")); err == nil && d > 0 {
		duration = d
	}
	clients := 4
	if w == WorkloadSemaphore {
		clients = 5 // a semaphore of 3 (the default) with two clients waiting
	}
	res, err := Run(context.Background(), Config{
		Backend: be.name, Workload: w, Fault: f, Deploy: dep, Dir: dir,
		Clients: clients, Duration: duration, TTL: be.ttl, Bound: be.bound,
		TokensMayReset: be.tokensMayReset, Allowances: be.allowances,
		Spawn: func() *exec.Cmd { return exec.Command(os.Args[0], "-test.run=^$") },
		Log:   testLog{t},
	})
	if err != nil {
		t.Error(err)
		return nil
	}
	if w == WorkloadElection {
		t.Logf("the observers reported %d leaders of %d terms", res.Observed, res.Grants)
	}
	for _, n := range res.Notes {
		t.Log("note:", n)
	}
	if res.Verdict() != "PASS" {
		for i, v := range res.Violations {
			if i == 10 {
				t.Errorf("… and %d more", len(res.Violations)-10)
				break
			}
			t.Error(v)
		}
		t.Errorf("history (kept): %s", res.History)
	}
	return res
}

// primitiveFaults is the fault each primitive's workload runs under by
// default (see TestVerifyShortProfile): a permit holder killed (its permit
// must come back within the TTL, and the others hold on meanwhile), a
// reader or writer paused past its TTL, a leader paused past its TTL.
var primitiveFaults = map[Workload]Fault{WorkloadFairMutex: Pause, WorkloadSemaphore: Kill, WorkloadRWMutex: Pause, WorkloadElection: Pause}

// workloadSelected applies DLOCK_VERIFY_WORKLOADS.
func workloadSelected(backend string, w Workload, f Fault) bool {
	switch ws := os.Getenv("DLOCK_VERIFY_WORKLOADS"); ws {
	case "all":
		return true
	case "":
		return w == WorkloadMutex || f == primitiveFaults[w] && (w != WorkloadElection || backend == "etcd")
	default:
		return slices.Contains(strings.Split(ws, ","), string(w))
	}
}

// capabilitiesOf opens a client on the deployment and returns what its
// backend offers.
func capabilitiesOf(t *testing.T, dep Deployment) driver.Capabilities {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := dlock.Open(ctx, dep.URL(dep.Endpoints))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.Capabilities()
}

// selected applies DLOCK_VERIFY_ONLY.
func selected(backend string, f Fault) bool {
	only := os.Getenv("DLOCK_VERIFY_ONLY")
	if only == "" {
		return true
	}
	for _, w := range strings.Split(only, ",") {
		b, wf, hasFault := strings.Cut(strings.TrimSpace(w), "/")
		if b == backend && (f == "" || !hasFault || Fault(wf) == f) {
			return true
		}
	}
	return false
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
