package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock/dlock/internal/procfs"
)

func TestRunSixteenProcessesNeverLoseAnUpdate(t *testing.T) {
	dev := sharedDev(t)
	dir := t.TempDir()
	counter, tokens := filepath.Join(dir, "counter"), filepath.Join(dir, "tokens")
	if err := os.WriteFile(counter, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Read, sleep, write: without exclusion, updates are lost.
	script := `n=$(cat "$1"); sleep 0.03; echo $((n+1)) > "$1"; echo "$DLOCK_TOKEN" >> "$2"`
	const n = 16
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			results[i] = runDlock(t, dev.env(), "run", "--wait", "90s", t.Name(), "--", "sh", "-c", script, "sh", counter, tokens)
		})
	}
	wg.Wait()
	for i, r := range results {
		if r.code != 0 {
			t.Errorf("dlock run #%d: %s", i, r)
		}
	}
	b, _ := os.ReadFile(counter)
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(n) {
		t.Errorf("counter = %s after %d locked increments: updates were lost", got, n)
	}
	// Appended under the lock, so in grant order: tokens must strictly increase.
	b, _ = os.ReadFile(tokens)
	lines := strings.Fields(string(b))
	if len(lines) != n {
		t.Fatalf("%d tokens recorded, want %d: %q", len(lines), n, lines)
	}
	var prev uint64
	for i, l := range lines {
		tok, err := strconv.ParseUint(l, 10, 64)
		if err != nil || tok <= prev {
			t.Errorf("token #%d = %q after %d: tokens must strictly increase (all: %v)", i, l, prev, lines)
		}
		prev = tok
	}
}

func TestRunExitsWithCommandStatus(t *testing.T) {
	dev := sharedDev(t)
	for _, tc := range []struct {
		cmd  []string
		want int
	}{
		{[]string{"true"}, 0},
		{[]string{"sh", "-c", "exit 7"}, 7},
		{[]string{"sh", "-c", "exit 1"}, 1},
		{[]string{"sh", "-c", "kill -TERM $$"}, 128 + int(syscall.SIGTERM)},
		{[]string{"dlock-test-no-such-command"}, 127},
		{[]string{"/dev/null"}, 126},
	} {
		r := runDlock(t, dev.env(), append([]string{"run", t.Name(), "--"}, tc.cmd...)...)
		if r.code != tc.want {
			t.Errorf("dlock run -- %s: %s; want status %d", strings.Join(tc.cmd, " "), r, tc.want)
		}
	}
	if j := lockState(t, dev.env(), t.Name()); j.Held {
		t.Errorf("%q still held after every run ended: %+v", t.Name(), j)
	}
}

func TestRunPassesNameTokenAndBackendToCommand(t *testing.T) {
	dev := sharedDev(t)
	r := runDlock(t, dev.env(), "run", t.Name(), "--", "sh", "-c", `echo "$DLOCK_NAME|$DLOCK_TOKEN|$DLOCK_BACKEND"`)
	parts := strings.Split(strings.TrimSpace(r.stdout), "|")
	if r.code != 0 || len(parts) != 3 {
		t.Fatalf("%s", r)
	}
	if tok, err := strconv.ParseUint(parts[1], 10, 64); parts[0] != t.Name() || err != nil || tok == 0 || parts[2] != dev.url {
		t.Errorf("CMD saw DLOCK_NAME=%q DLOCK_TOKEN=%q DLOCK_BACKEND=%q; want %q, a token, %q", parts[0], parts[1], parts[2], t.Name(), dev.url)
	}
}

func TestRunNoWaitOnHeldLockIsNotAcquired(t *testing.T) {
	dev := sharedDev(t)
	holder := startDlock(t, dev.env(), "run", t.Name(), "--", "sleep", "120")
	waitHeld(t, dev.env(), t.Name(), holder.pid())

	ran := filepath.Join(t.TempDir(), "ran")
	r := runDlock(t, dev.env(), "run", "--no-wait", t.Name(), "--", "touch", ran)
	if r.code != exitNotAcquired {
		t.Errorf("--no-wait on a held lock: %s; want status %d", r, exitNotAcquired)
	}
	if !strings.Contains(r.stderr, fmt.Sprintf("pid %d", holder.pid())) {
		t.Errorf("the message should name the holder (pid %d): %q", holder.pid(), r.stderr)
	}
	t.Logf("--no-wait gave up after %v", r.took)

	// --wait 0 tries once, as flock -w 0 does.
	r = runDlock(t, dev.env(), "run", "--wait", "0", t.Name(), "--", "touch", ran)
	if r.code != exitNotAcquired {
		t.Errorf("--wait 0 on a held lock: %s; want status %d at once", r, exitNotAcquired)
	}

	r = runDlock(t, dev.env(), "run", "--wait", "500ms", t.Name(), "--", "touch", ran)
	if r.code != exitNotAcquired || !strings.Contains(r.stderr, "--wait 500ms") {
		t.Errorf("--wait 500ms on a held lock: %s; want status %d and a message naming --wait", r, exitNotAcquired)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("CMD ran although the lock was not acquired")
	}
}

func TestRunKilledWithSIGKILLFreesLockWithinTTL(t *testing.T) {
	dev := sharedDev(t)
	dir := t.TempDir()
	holder := startDlock(t, dev.env(), "run", "--ttl", "2s", t.Name(), "--", "sh", "-c", `echo $$ > "$1"; exec sleep 120`, "sh", filepath.Join(dir, "cmd.pid"))
	cmdPID := pidFromFile(t, filepath.Join(dir, "cmd.pid"))
	first := waitHeld(t, dev.env(), t.Name(), holder.pid())

	// A waiter queued before the kill: the time to its grant is the time
	// the lock took to free itself.
	tokFile := filepath.Join(dir, "token")
	waiter := startDlock(t, dev.env(), "run", "--wait", "15s", t.Name(), "--", "sh", "-c", `echo $DLOCK_TOKEN > "$1"`, "sh", tokFile)
	waitWaiters(t, dev.env(), t.Name(), 1)

	if err := holder.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	tok, _ := strconv.ParseUint(waitFile(t, tokFile), 10, 64)
	t.Logf("the waiter was granted the lock %v after the holder was killed (TTL 2s)", time.Since(killed).Round(10*time.Millisecond))
	// Within the TTL, with room for a loaded machine: --wait is 7.5 TTLs.
	if r := waiter.wait(t); r.code != 0 {
		t.Fatalf("the lock of a killed dlock run was not freed: %s", r)
	}
	if tok <= first.Token {
		t.Errorf("token after the crash = %d, not above the crashed holder's %d", tok, first.Token)
	}
	// CMD dies with its dlock (parent-death signal).
	waitGone(t, cmdPID, "CMD of the killed dlock run")
}

// leaseLostScript starts a grandchild through sh -c, records both PIDs, and
// waits; with ignoreTERM both ignore SIGTERM, so only SIGKILL stops them.
func leaseLostScript(dir string, ignoreTERM bool) []string {
	trap := ""
	if ignoreTERM {
		trap = `trap "" TERM; `
	}
	return []string{"sh", "-c", trap + `sleep 120 & echo $! > "$1/grandchild.pid"; echo $$ > "$1/sh.pid"; wait`, "sh", dir}
}

func TestRunLeaseLostByPauseKillsWholeProcessGroup(t *testing.T) {
	dev := sharedDev(t)
	dir := t.TempDir()
	holder := startDlock(t, dev.env(), append([]string{"run", "--ttl", "2s", "--grace", "2s", t.Name(), "--"}, leaseLostScript(dir, false)...)...)
	grandchild := pidFromFile(t, filepath.Join(dir, "grandchild.pid"))
	sh := pidFromFile(t, filepath.Join(dir, "sh.pid"))
	first := waitHeld(t, dev.env(), t.Name(), holder.pid())

	// Pause dlock past its TTL: the backend expires the lease and grants
	// the lock to someone else meanwhile.
	if err := holder.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	r := runDlock(t, dev.env(), "run", "--wait", "60s", t.Name(), "--", "sh", "-c", "echo $DLOCK_TOKEN")
	if r.code != 0 {
		t.Fatalf("the lock of a paused holder was not freed after its TTL: %s", r)
	}
	if tok, _ := strconv.ParseUint(strings.TrimSpace(r.stdout), 10, 64); tok <= first.Token {
		t.Errorf("next token %d is not above the paused holder's %d", tok, first.Token)
	}
	if err := holder.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	res := holder.wait(t)
	if res.code != exitLeaseLost {
		t.Errorf("dlock run whose lease was lost: %s; want status %d", res, exitLeaseLost)
	}
	waitGone(t, sh, "CMD (sh)")
	waitGone(t, grandchild, "CMD's child started through sh -c")
}

func TestRunLeaseLostByBreakKillsWholeProcessGroup(t *testing.T) {
	dev := sharedDev(t)
	dir := t.TempDir()
	// CMD and its child ignore SIGTERM: dlock must follow with SIGKILL.
	holder := startDlock(t, dev.env(), append([]string{"run", "--grace", "1s", t.Name(), "--"}, leaseLostScript(dir, true)...)...)
	grandchild := pidFromFile(t, filepath.Join(dir, "grandchild.pid"))
	sh := pidFromFile(t, filepath.Join(dir, "sh.pid"))
	first := waitHeld(t, dev.env(), t.Name(), holder.pid())

	r := runDlock(t, dev.env(), "break", t.Name())
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("pid %d", holder.pid())) {
		t.Fatalf("dlock break: %s", r)
	}
	res := holder.wait(t)
	if res.code != exitLeaseLost || !strings.Contains(res.stderr, "SIGTERM") {
		t.Errorf("dlock run whose lock was broken: %s; want status %d", res, exitLeaseLost)
	}
	waitGone(t, sh, "CMD (sh, ignoring SIGTERM)")
	waitGone(t, grandchild, "CMD's child started through sh -c (ignoring SIGTERM)")

	r = runDlock(t, dev.env(), "run", "--no-wait", t.Name(), "--", "sh", "-c", "echo $DLOCK_TOKEN")
	if tok, _ := strconv.ParseUint(strings.TrimSpace(r.stdout), 10, 64); r.code != 0 || tok <= first.Token {
		t.Errorf("after break: %s; want a grant with a token above %d", r, first.Token)
	}
}

func TestRunForwardsSignalsAndReleases(t *testing.T) {
	dev := sharedDev(t)
	dir := t.TempDir()
	holder := startDlock(t, dev.env(), "run", t.Name(), "--", "sh", "-c", `trap 'echo got INT; exit 5' INT; echo $$ > "$1"; while :; do sleep 0.05; done`, "sh", filepath.Join(dir, "sh.pid"))
	pidFromFile(t, filepath.Join(dir, "sh.pid"))
	waitHeld(t, dev.env(), t.Name(), holder.pid())
	if err := holder.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	res := holder.wait(t)
	if res.code != 5 || !strings.Contains(res.stdout, "got INT") {
		t.Errorf("SIGINT to dlock run: %s; want CMD to get it and exit 5", res)
	}
	if j := lockState(t, dev.env(), t.Name()); j.Held {
		t.Errorf("lock still held after CMD exited on SIGINT: %+v", j)
	}

	// A signal while waiting abandons the wait; CMD never starts.
	blocker := startDlock(t, dev.env(), "run", t.Name(), "--", "sleep", "120")
	waitHeld(t, dev.env(), t.Name(), blocker.pid())
	ran := filepath.Join(dir, "ran")
	waiter := startDlock(t, dev.env(), "run", t.Name(), "--", "touch", ran)
	waitWaiters(t, dev.env(), t.Name(), 1)
	if err := waiter.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if res := waiter.wait(t); res.code != 128+int(syscall.SIGTERM) {
		t.Errorf("SIGTERM while waiting: %s; want status %d", res, 128+int(syscall.SIGTERM))
	}
	if j := lockState(t, dev.env(), t.Name()); len(j.Waiters) != 0 || j.Holder.PID != blocker.pid() {
		t.Errorf("after the waiter was interrupted: %+v; want the first holder and no waiter left behind", j)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("CMD ran although the wait was interrupted")
	}
}

func TestRunKilledWithSIGKILLTakesEveryDescendantWithIt(t *testing.T) {
	dev := sharedDev(t)
	dir := t.TempDir()
	// A child, a child that left the session (setsid), and a grandchild
	// whose parent exited at once (a daemon's double fork).
	script := `sleep 400 & echo $! > "$1/child"; setsid sleep 400 & echo $! > "$1/setsid"; (sleep 400 & echo $! > "$1/orphan"); echo $$ > "$1/sh"; wait`
	holder := startDlock(t, dev.env(), "run", "--ttl", "2s", t.Name(), "--", "sh", "-c", script, "sh", dir)
	sh := pidFromFile(t, filepath.Join(dir, "sh"))
	pids := []int{sh}
	for _, f := range []string{"child", "setsid", "orphan"} {
		pids = append(pids, pidFromFile(t, filepath.Join(dir, f)))
	}
	waitHeld(t, dev.env(), t.Name(), holder.pid())

	// The next holder checks that none of them runs while it holds the lock.
	check := `for p in "$@"; do if [ -e /proc/$p ] && ! grep -q '^State:.*zombie' /proc/$p/status; then echo "overlap: $p runs"; fi; done; echo checked`
	args := []string{"run", "--wait", "60s", t.Name(), "--", "sh", "-c", check, "sh"}
	for _, p := range pids {
		args = append(args, strconv.Itoa(p))
	}
	waiter := startDlock(t, dev.env(), args...)
	waitWaiters(t, dev.env(), t.Name(), 1)

	if err := holder.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for i, what := range []string{"CMD (sh)", "its child", "its child that called setsid", "its orphaned grandchild"} {
		waitGone(t, pids[i], what+" after dlock was killed with SIGKILL")
	}
	r := waiter.wait(t)
	if r.code != 0 || !strings.Contains(r.stdout, "checked") || strings.Contains(r.stdout, "overlap") {
		t.Errorf("the next holder: %s; want it to run alone", r)
	}
}

func TestRunStopsEveryProcessBeforeItStopsAndContinuesThemAfter(t *testing.T) {
	dev := sharedDev(t)
	dir := t.TempDir()
	holder := startDlockJob(t, dev.env(), "run", t.Name(), "--", "sh", "-c", `sleep 400 & echo $! > "$1/child"; setsid sleep 400 & echo $! > "$1/setsid"; echo $$ > "$1/sh"; wait`, "sh", dir)
	sh := pidFromFile(t, filepath.Join(dir, "sh"))
	child := pidFromFile(t, filepath.Join(dir, "child"))
	setsid := pidFromFile(t, filepath.Join(dir, "setsid"))
	held := waitHeld(t, dev.env(), t.Name(), holder.pid())

	// SIGTSTP: CMD's processes stop first, then dlock.
	if err := holder.cmd.Process.Signal(syscall.SIGTSTP); err != nil {
		t.Fatal(err)
	}
	waitState(t, true, "dlock after SIGTSTP", holder.pid())
	for _, p := range []int{sh, child, setsid} {
		if st, _ := procfs.Process(p); st.State != 'T' {
			t.Errorf("dlock stopped while pid %d of CMD's runs on (state %c)", p, st.State)
		}
	}
	if err := holder.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitState(t, false, "after SIGCONT to dlock, dlock and CMD's processes", holder.pid(), sh, child, setsid)

	// SIGSTOP cannot be caught: the supervisor sees dlock stopped.
	if err := holder.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(t, true, "after SIGSTOP to dlock, CMD's processes", sh, child, setsid)
	if err := holder.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitState(t, false, "after SIGCONT to dlock, CMD's processes", sh, child, setsid)
	if j := lockState(t, dev.env(), t.Name()); j.Token != held.Token {
		t.Errorf("after the stops, the lock is %+v; want it still held with token %d", j, held.Token)
	}

	// A SIGTERM reaches every process, stopped or not.
	if err := holder.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if r := holder.wait(t); r.code != 128+int(syscall.SIGTERM) {
		t.Errorf("SIGTERM to dlock run: %s; want it to die of SIGTERM as CMD did", r)
	}
	waitGone(t, setsid, "CMD's child that called setsid")
}

// waitStatus runs dlock to completion and returns how it ended, as its
// parent sees it.
func waitStatus(t *testing.T, cmd *exec.Cmd, during func()) syscall.WaitStatus {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	if during != nil {
		during()
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("dlock %v did not end within 2 minutes", cmd.Args)
	}
	return cmd.ProcessState.Sys().(syscall.WaitStatus)
}

func TestRunDiesOfTheSignalThatKilledCommand(t *testing.T) {
	dev := sharedDev(t)
	ws := waitStatus(t, dlockCmd(dev.env(), "run", t.Name(), "--", "sh", "-c", "kill -INT $$"), nil)
	if !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		t.Errorf("CMD died of SIGINT; dlock run ended with %#x, want killed by SIGINT", uint32(ws))
	}
	// SIGINT to dlock, passed on to CMD, which dies of it.
	dir := t.TempDir()
	cmd := dlockCmd(dev.env(), "run", t.Name(), "--", "sh", "-c", `echo $$ > "$1"; exec sleep 120`, "sh", filepath.Join(dir, "pid"))
	ws = waitStatus(t, cmd, func() {
		pidFromFile(t, filepath.Join(dir, "pid"))
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
	})
	if !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		t.Errorf("SIGINT to dlock run: it ended with %#x, want killed by SIGINT", uint32(ws))
	}
	if j := lockState(t, dev.env(), t.Name()); j.Held {
		t.Errorf("%q still held: %+v", t.Name(), j)
	}
}

func TestRunKeepsAnIgnoredHangupIgnoredForCommand(t *testing.T) {
	dev := sharedDev(t)
	// As nohup does: SIGHUP ignored by dlock's caller.
	cmd := exec.Command("sh", "-c", `trap "" HUP; exec "$0" run "$1" -- sh -c 'kill -HUP $$; echo survived'`, dlockBin, t.Name())
	cmd.Env = dev.env()
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "survived") {
		t.Errorf("CMD of a dlock run started with SIGHUP ignored: %v\n%s; want SIGHUP still ignored", err, out)
	}
}

func TestRunSIGTERMReachesStoppedProcesses(t *testing.T) {
	dev := sharedDev(t)
	dir := t.TempDir()
	holder := startDlock(t, dev.env(), "run", t.Name(), "--", "sh", "-c", `sleep 400 & echo $! > "$1/child"; echo $$ > "$1/sh"; wait`, "sh", dir)
	sh := pidFromFile(t, filepath.Join(dir, "sh"))
	child := pidFromFile(t, filepath.Join(dir, "child"))
	waitHeld(t, dev.env(), t.Name(), holder.pid())
	for _, p := range []int{sh, child} {
		if err := syscall.Kill(p, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	waitState(t, true, "CMD's processes after SIGSTOP", sh, child)
	// A stopped process acts on SIGTERM only once continued: dlock must
	// follow the SIGTERM it passes on with SIGCONT, as a shell's kill does.
	if err := holder.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if r := holder.wait(t); r.code != 128+int(syscall.SIGTERM) {
		t.Errorf("SIGTERM to dlock run whose CMD was stopped: %s; want it to die of SIGTERM", r)
	}
	waitGone(t, child, "CMD's child, stopped when dlock got SIGTERM")
	if j := lockState(t, dev.env(), t.Name()); j.Held {
		t.Errorf("%q still held: %+v", t.Name(), j)
	}
}
