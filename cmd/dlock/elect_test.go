package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock/dlock/internal/testenv"
)

// TestElectRunsOneCommandAtATimeWhileALeaderIsStopped: four "dlock elect"
// processes campaign for one name, each with a CMD that, while it runs,
// appends its candidate's ID and term to a shared log every 50 ms (under
// flock). The first leader's dlock is SIGSTOPped past its TTL: another
// candidate is elected, and when the stopped one is continued it finds its
// leadership lost and exits with status 79, its CMD never running again.
// In the log, each leader's lines form one run, and each run's term is
// above the one before: one CMD at a time. An observer (--observe --json)
// sees the same leaders, in the same order, with the same terms.
func TestElectRunsOneCommandAtATimeWhileALeaderIsStopped(t *testing.T) {
	dev := sharedDev(t)
	name := t.Name()
	log := filepath.Join(t.TempDir(), "ticks")
	if err := os.WriteFile(log, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	observer := startDlock(t, dev.env(), "elect", "--observe", "--json", name)
	script := `while :; do ( flock 9; echo "$ID $DLOCK_TOKEN" >> "$1" ) 9>"$1.lock"; sleep 0.05; done`
	procs := make([]*background, 4)
	for i := range procs {
		id := "c" + strconv.Itoa(i)
		procs[i] = startDlock(t, dev.env("ID="+id), "elect", "--ttl", "2s", "--grace", "1s", "--value", id, name, "--", "sh", "-c", script, "sh", log)
	}
	ticks := func() []string {
		b, _ := os.ReadFile(log)
		return strings.Fields(string(b))
	}
	var first string
	testenv.Eventually(t, time.Minute, "a first leader's CMD to run", func() error {
		if tk := ticks(); len(tk) >= 2 {
			first = tk[0]
			return nil
		}
		return fmt.Errorf("no tick yet")
	})
	leader := procs[first[1]-'0']
	if err := syscall.Kill(leader.pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "another leader's CMD to run while the first is stopped", func() error {
		for i := 0; i < len(ticks()); i += 2 {
			if ticks()[i] != first {
				return nil
			}
		}
		return fmt.Errorf("only %s has run", first)
	})
	time.Sleep(time.Second) // the second leader runs on
	if err := syscall.Kill(leader.pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if r := leader.wait(t); r.code != exitLeaseLost {
		t.Errorf("the stopped leader, continued: %s; want status %d (leadership lost)", r, exitLeaseLost)
	}
	time.Sleep(time.Second)
	if err := observer.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	obs := observer.wait(t)

	// The log: one run per leader, terms increasing from run to run.
	type run struct {
		id   string
		term uint64
	}
	var runs []run
	tk := ticks()
	for i := 0; i+1 < len(tk); i += 2 {
		term, _ := strconv.ParseUint(tk[i+1], 10, 64)
		if len(runs) > 0 && runs[len(runs)-1].id == tk[i] && runs[len(runs)-1].term == term {
			continue
		}
		for _, r := range runs {
			if r.id == tk[i] && r.term == term {
				t.Errorf("%s (term %d) ran again after another leader had begun: %v", tk[i], term, tk)
			}
		}
		if len(runs) > 0 && term <= runs[len(runs)-1].term {
			t.Errorf("%s ran with term %d after term %d", tk[i], term, runs[len(runs)-1].term)
		}
		runs = append(runs, run{tk[i], term})
	}
	t.Logf("leaders in the log: %v", runs)
	if len(runs) < 2 || runs[0].id != first {
		t.Fatalf("leaders in the log %v: want %s, then another", runs, first)
	}

	// The observer: the same leaders, in order, with their terms.
	var seen []run
	for _, line := range strings.Split(strings.TrimSpace(obs.stdout), "\n") {
		var l leadershipJSON
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("observer line %q: %v\n%s", line, err, obs)
		}
		if l.Term != 0 && l.Value != nil {
			seen = append(seen, run{*l.Value, l.Term})
		}
		if !l.Complete { // dlock dev is etcd, which keeps the history of changes
			t.Errorf("observer line %q: not complete on etcd", line)
		}
	}
	for i, r := range runs[:2] {
		if i >= len(seen) || seen[i] != r {
			t.Errorf("the observer saw %v; want the leaders of the log %v first", seen, runs[:2])
			break
		}
	}
}
