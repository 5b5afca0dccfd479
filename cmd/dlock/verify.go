package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/verify"
)

// verifyWorkerCmd is the hidden command a verification's client processes
// run; their configuration comes in the environment.
const verifyWorkerCmd = "_verify-worker"

const verifyUsage = `Usage: dlock verify [--backend URL] [flags]

Runs the verification workload against your own deployment: client
processes on this machine loop acquire → write their fencing token to a
fenced register → hold → release, while faults a client can inject on its
own side are applied; then the history is checked (see the documentation of
package github.com/dlock/dlock/verify) and a summary table printed.

Faults (--faults client): pause (a holder frozen with SIGSTOP past its TTL),
kill (a holder killed with SIGKILL), net (a holder's connections frozen, or
cut and slowed, through a local proxy), break-partition (a holder's
connections frozen while dlock verify breaks its lock, as dlock break
does: the next holder must get a higher token, and the fence must refuse
the old holder's writes). net and break-partition need every URL host to
have a port, and a URL that does not ask for verified TLS. Each fault runs
for --duration at most, after a fault-free run; --faults kill,net runs
only those. A fault's last heal comes at least TTL + bound + 1s before the
end of its run, so --duration must leave room for a round and that
recovery; the run ends early once a grant has followed the last heal and
two TTLs have passed.

The faults that need control of the servers (restart, member, member-cut:
a follower cut from the other members; evict: memory filled up to the
server's limit; partition-restart: a Redlock node cut off while another
restarts) run in dlock's own tests (make verify), on servers they start.

Workloads (--workload): mutex (the default), mutex-fair (the mutex with
dlock.WithFair, on a backend that has a fair mode), semaphore (Client.Semaphore
with --limit permits, 3 by default: the check counts the holders at once),
rwmutex (readers two holds in three, a writer the third: a writer must hold
alone; only writers write the fenced register), election (Campaign and
Resign: one leader at a time, the term its token). A backend without the
primitive is refused (status 64).

Under a fault, two holders at once pass only where the lease contract
allows it: the older one was paused while the other was granted, or
killed before, or the other was granted after its proven deadline and it
noticed the loss then (Lease.Done), or after a Break of its lock and it
gave up at its deadline, or the newer one got a lower token and knew at
once that it had lost. A loss learnt only when the release was refused is
a violation. The table says how many overlaps were excused and why.

Flags:
{{flags}}` + backendHelp + `
What it writes: locks named verify/SCHEME/TIME/lock-N, new names for every
run, which the client processes take and release (and which verify breaks
under break-partition); backends that keep a
fencing counter per name outside the lock (Redis, for one) keep those.
The histories go to a temporary directory, removed at the end unless a run
failed. Before writing to a backend that is not this user's "dlock dev", it
asks on a terminal; without a terminal it refuses (status 64) unless --yes
is given.

Exit status: 0 when every run passed, 1 when a property was violated (and
only then), 64 for a usage error, 69 when the backend cannot be reached or
failed, 70 when the run itself failed before a verdict (interrupted, a
history it could not write, a client process that could not start).

Example:
  dlock verify --backend redis://127.0.0.1:6379/0 --faults client --duration 30s --yes
`

// verifyArgs is a dlock verify command line, parsed and checked.
type verifyArgs struct {
	bf                   backendFlags
	clients              int
	duration, ttl, bound time.Duration
	history              string
	yes                  bool
	runs                 []verify.Fault
	workload             verify.Workload
	limit                int
}

// parseVerifyArgs parses and checks dlock verify's arguments, without I/O
// beyond printing --help.
func parseVerifyArgs(env *cmdEnv, args []string) (*verifyArgs, error) {
	a := &verifyArgs{}
	fs := newFlagSet("dlock verify", verifyUsage, env.stdout)
	a.bf.register(fs)
	fs.IntVar(&a.clients, "clients", 4, "client `N` processes")
	fs.DurationVar(&a.duration, "duration", 20*time.Second, "length `D` of each run")
	faults := fs.String("faults", "client", "`KIND`: client (pause, kill, net, break-partition, after a fault-free run), none, or a comma-separated list of none, pause, kill, net, break-partition")
	fs.StringVar(&a.history, "history", "", "write the history to `FILE` (with several runs, FILE-<fault>.jsonl); default: a temporary directory")
	fs.DurationVar(&a.ttl, "ttl", 2*time.Second, "lease length `D` the clients ask for")
	fs.BoolVar(&a.yes, "yes", false, "write to a backend other than dlock dev without asking")
	fs.BoolVar(&a.yes, "y", false, "short for --yes")
	fs.DurationVar(&a.bound, "bound", 5*time.Second, "after a fault heals, a grant must come within TTL + `D`")
	workload := fs.String("workload", "mutex", "the primitive the clients take: mutex, mutex-fair, semaphore, rwmutex or election (`W`)")
	fs.IntVar(&a.limit, "limit", 3, "the semaphore's permits `N` (--workload semaphore)")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	a.workload = verify.Workload(*workload)
	switch {
	case fs.NArg() > 0:
		return nil, usageErrorf("unexpected argument %q (see dlock verify --help)", fs.Arg(0))
	case a.clients < 2 || a.clients > 64:
		return nil, usageErrorf("--clients %d: want 2..64 client processes", a.clients)
	case a.ttl <= 0 || a.bound <= 0:
		return nil, usageErrorf("--ttl and --bound must be positive")
	case !slices.Contains(verify.Workloads, a.workload):
		return nil, usageErrorf("--workload %q: want mutex, mutex-fair, semaphore, rwmutex or election", *workload)
	case a.limit < 2 || a.limit > dlock.MaxPermits:
		return nil, usageErrorf("--limit %d: want 2..%d permits", a.limit, dlock.MaxPermits)
	case a.duration/5 < a.ttl: // not 5*ttl, which can overflow
		return nil, usageErrorf("--duration %v: want at least 5 TTLs (--ttl %v), room for a fault and the recovery after it", a.duration, a.ttl)
	}
	switch *faults {
	case "client":
		a.runs = append([]verify.Fault{verify.None}, verify.ClientFaults...)
	default:
		seen := map[verify.Fault]bool{}
		for _, f := range strings.Split(*faults, ",") {
			f := verify.Fault(strings.TrimSpace(f))
			if slices.Contains(verify.DeploymentFaults, f) {
				return nil, usageErrorf("--faults %s: this fault needs control of the servers; dlock's own tests run it (make verify)", f)
			}
			if f != verify.None && !slices.Contains(verify.ClientFaults, f) {
				return nil, usageErrorf("--faults %q: want client, or a list of none, pause, kill, net, break-partition", *faults)
			}
			if !seen[f] {
				seen[f] = true
				a.runs = append(a.runs, f)
			}
		}
	}
	return a, nil
}

// verifyCmd is dlock verify: status 1 for a violation only, 70 when the
// run itself failed.
func verifyCmd(ctx context.Context, env *cmdEnv, args []string) error {
	return checkerStatus(verifyRun(ctx, env, args))
}

func verifyRun(ctx context.Context, env *cmdEnv, args []string) error {
	a, err := parseVerifyArgs(env, args)
	if err != nil {
		return err
	}
	b, err := a.bf.shared(env)
	if err != nil {
		return err
	}
	// Check the backend before starting processes: a bad URL or an
	// unreachable server is reported once, plainly.
	c, err := a.bf.open(ctx, b)
	if err != nil {
		return err
	}
	caps := c.Capabilities()
	c.Close()
	label := dlock.Redact(b.url)
	if u, err := url.Parse(b.url); err == nil && u.Scheme != "" {
		label = u.Scheme
	}
	if caps.InProcess {
		return usageErrorf("backend %s keeps its locks inside one process; verify needs one that client processes share", b)
	}
	if !verify.Offered(a.workload, caps) {
		return usageErrorf("--workload %s: the backend %s does not offer it (see the README, \"Beyond the mutex\")", a.workload, b)
	}
	if caps.MinTTL > 0 && a.ttl < caps.MinTTL {
		return usageErrorf("--ttl %v: this backend's shortest lease is %v", a.ttl, caps.MinTTL)
	}
	kept := "removed at the end unless a run fails"
	if a.history != "" {
		kept = "removed at the end; --history keeps a copy"
	}
	if err := confirmWrites(env, "verify", b, fmt.Sprintf("locks named verify/%s/TIME/lock-N (TIME: one per run), held and released by the client processes, and broken by verify itself under break-partition (a backend's fencing counter of a name may stay); the histories go to a temporary directory, %s", label, kept), a.yes); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the dlock binary to start client processes: %w", err)
	}
	dir, err := os.MkdirTemp("", "dlock-verify-")
	if err != nil {
		return err
	}
	keep := false // a failed run's histories stay for inspection
	defer func() {
		if !keep {
			os.RemoveAll(dir)
		}
	}()
	deploy := verify.DeploymentFromURL(b.url)

	var results []*verify.Result
	for _, f := range a.runs {
		if (f == verify.Net || f == verify.BreakPartition) && len(deploy.Endpoints) == 0 {
			fmt.Fprintf(env.stderr, "dlock verify: skipping the %s fault: the URL's hosts need explicit ports, and verified TLS cannot be proxied\n", f)
			continue
		}
		res, err := verify.Run(ctx, verify.Config{
			Backend: label, Fault: f, Workload: a.workload, Limit: a.limit, Deploy: deploy, Clients: a.clients, TTL: a.ttl, Duration: a.duration, Bound: a.bound,
			Dir:   filepath.Join(dir, string(f)),
			Spawn: func() *exec.Cmd { return exec.Command(self, verifyWorkerCmd) },
			Log:   env.stderr,
		})
		if err != nil {
			return fmt.Errorf("run with fault %s: %w", f, err)
		}
		if a.history != "" {
			dst := a.history
			if len(a.runs) > 1 {
				dst = strings.TrimSuffix(dst, filepath.Ext(dst)) + "-" + string(f) + ".jsonl"
			}
			if err := copyHistory(res.History, dst); err != nil {
				return fmt.Errorf("write the history: %w", err)
			}
			res.History = dst
		}
		if res.Verdict() != "PASS" {
			keep = true
		} else if a.history == "" {
			res.History = "not kept (--history FILE keeps it)"
		}
		results = append(results, res)
	}
	return printVerdicts(env, results)
}

// printVerdicts prints the summary table, each run's violations and notes,
// and the overall verdict; a violation makes the exit status 1.
func printVerdicts(env *cmdEnv, results []*verify.Result) error {
	w := env.stdout
	fmt.Fprintln(w)
	verify.WriteTable(w, results)
	fmt.Fprintln(w)
	failed := false
	list := func(prefix string, items []string) {
		for i, s := range items {
			if i == 10 {
				fmt.Fprintf(w, "  %s… and %d more\n", prefix, len(items)-10)
				return
			}
			fmt.Fprintf(w, "  %s%s\n", prefix, s)
		}
	}
	for _, r := range results {
		fmt.Fprintf(w, "%s × %s: %s; history %s\n", r.Backend, r.Fault, r.Verdict(), r.History)
		if e := r.ExcusedSummary(); e != "" {
			fmt.Fprintf(w, "  excused overlaps: %s\n", e)
		}
		var vs []string
		for _, v := range r.Violations {
			vs = append(vs, v.String())
		}
		list("", vs)
		list("note: ", r.Notes)
		failed = failed || r.Verdict() != "PASS"
	}
	if failed {
		fmt.Fprintln(w, "verdict: FAIL — see the violations above")
		return exitStatus(exitViolation)
	}
	fmt.Fprintln(w, "verdict: PASS — no violation found")
	return nil
}

func copyHistory(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

// verifyWorker is a client process of dlock verify.
func verifyWorker(context.Context, *cmdEnv, []string) error {
	if !verify.IsWorker() {
		return usageErrorf("%s is started by dlock verify, not by hand", verifyWorkerCmd)
	}
	if st := verify.WorkerMain(); st != 0 {
		return exitStatus(st)
	}
	return nil
}
