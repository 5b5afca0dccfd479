package verify

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestVerifyShortProfile runs every backend × fault combination of the
// table for a short while, checks each history, and prints one summary
// table. Combinations run one after another, so that each has the machine
// to itself. DLOCK_VERIFY_OUT=DIR keeps the histories (DIR/<backend>-<fault>)
// and writes the table to DIR/summary.txt; DLOCK_VERIFY_ONLY=etcd,redis/pause
// restricts the run to the named backends or backend/fault pairs;
// DLOCK_VERIFY_DURATION=1m sets the length of each run (a fault run ends
// earlier, once a grant has followed its last heal and two TTLs passed).
func TestVerifyShortProfile(t *testing.T) {
	out := os.Getenv("DLOCK_VERIFY_OUT")
	if out != "" {
		if err := os.MkdirAll(out, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var results []*Result
	defer func() {
		var b strings.Builder
		WriteTable(&b, results)
		if testing.Verbose() {
			os.Stdout.WriteString("\n" + b.String())
		} else {
			t.Logf("verification summary:\n%s", b.String())
		}
		if out != "" {
			_ = os.WriteFile(filepath.Join(out, "summary.txt"), []byte(b.String()), 0o644)
		}
	}()
	for _, be := range backends {
		if !selected(be.name, "") {
			continue
		}
		t.Run(be.name, func(t *testing.T) {
			dep := be.start(t)
			for _, f := range be.faults {
				if !selected(be.name, f) {
					continue
				}
				t.Run(string(f), func(t *testing.T) {
					// The history outlives a failed test, for a second look.
					var dir string
					if out != "" {
						dir = filepath.Join(out, be.name+"-"+string(f))
					} else {
						d, err := os.MkdirTemp("", "dlock-verify-"+be.name+"-"+string(f)+"-")
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
					// A fault run needs room for rounds and, after the last
					// heal, TTL + bound + 1s of recovery.
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
					res, err := Run(context.Background(), Config{
						Backend: be.name, Fault: f, Deploy: dep, Dir: dir,
						Clients: 4, Duration: duration, TTL: be.ttl, Bound: be.bound,
						TokensMayReset: be.tokensMayReset, Allowances: be.allowances,
						Spawn: func() *exec.Cmd { return exec.Command(os.Args[0], "-test.run=^$") },
						Log:   testLog{t},
					})
					if err != nil {
						t.Fatal(err)
					}
					results = append(results, res)
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
				})
			}
		})
	}
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
