package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlock/dlock"
)

const runUsage = `Usage:
  dlock run [flags] NAME -- CMD [ARGS...]

Acquires the lock NAME, runs CMD while holding it, renews the lease while
CMD runs, and releases the lock the moment CMD exits. dlock exits with
CMD's exit status. The "--" before CMD may be left out when CMD does not
begin with "-".

With --limit N, NAME is a semaphore of N permits instead of a lock: at
most N copies of CMD run at once across every machine using the backend
(as "consul lock -n N"), each under a permit of its own, with its own
token, renewal and loss handling as described below. Every dlock run of
NAME should give the same N; NAME must not also be used as a plain lock.
Not every backend has semaphores: on one without, dlock exits with status
64. --limit 1, the default, is the plain lock.

With --shared, NAME is a read-write lock and CMD a reader: any number of
--shared runs hold NAME together, while a plain dlock run of NAME (the
writer) holds it alone; a --shared run that comes while a writer waits
queues behind it, so readers cannot starve a writer. Not every backend has
read-write locks: on one without, dlock exits with status 64.

Flags:
{{flags}}
CMD's environment, besides dlock's own:
  DLOCK_NAME     the lock's name
  DLOCK_TOKEN    the fencing token of this grant: it increases with every
                 grant of NAME, so a resource that remembers the highest
                 token it has seen can refuse the writes of a stale holder
                 (with --limit N, across all N permits)
  DLOCK_LIMIT    --limit: the number of permits of NAME, 1 for a plain lock
  DLOCK_BACKEND  the backend URL, so that CMD can run dlock itself. It keeps
                 its password, if it has one: CMD runs as the same user as
                 dlock, and a redacted URL could not connect.

CMD runs under a small supervisor process, a copy of dlock that stays
CMD's parent, and the lock covers every process CMD starts, however deep,
even one that left the process group or the session (setsid, daemons):
  - If the lease is lost (it could not be renewed within --ttl, or
    "dlock break" took it), every such process gets SIGTERM at once (and
    SIGCONT, if stopped), and SIGKILL after --grace; dlock then exits with
    status 79.
  - When CMD exits, the processes it left running get SIGTERM (SIGKILL
    after --grace) before the lock is released, so that none runs unlocked.
  - If dlock is killed, even with SIGKILL, the supervisor kills every
    process of CMD's with SIGKILL at once; the lock frees itself within
    --ttl.
  - As with flock(1), CMD stays in dlock's process group, so in a shell
    CMD is part of dlock's job: Ctrl-C and Ctrl-Z reach CMD directly, CMD
    can read the terminal, and "dlock run … | less" works as any pipeline.
  - SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to dlock are
    passed on to CMD's processes (a SIGINT or SIGQUIT that came from the
    terminal is not passed on again), and the lock is released when CMD
    exits. If CMD died of a signal, dlock then kills itself with the same
    signal, as a shell does, so that a script running dlock stops on
    Ctrl-C just as it would had it run CMD itself.
  - SIGTSTP (Ctrl-Z), SIGTTIN and SIGTTOU stop CMD's processes first, then
    dlock; SIGCONT (fg, bg) continues dlock and then them, if the lease is
    still held. If dlock is stopped with SIGSTOP, the supervisor stops
    them too (it looks every 0.1s), until dlock continues. A shell's fg
    continues the processes in dlock's job together with dlock: if the
    lease ran out while they were stopped, dlock stops them at once.
  - SIGHUP or SIGINT ignored when dlock starts (nohup, a background job
    of a script) stays ignored, by CMD too.

Exit status:
  CMD's status  CMD ran and exited by itself; if signal N killed it, dlock
                dies of N too (a shell shows 128+N)
  64            usage error: a bad flag, lock name or backend URL, or no CMD;
                also --limit above 1, --shared or --fair on a backend
                without semaphores, read-write locks or a queue
  69            the backend could not be reached, or failed
  71            the supervisor of CMD could not be started, or was killed
                (EX_OSERR, as flock(1) when it cannot wait for its command)
  75            not acquired: NAME was held (with --limit N, all N permits
                were) and --no-wait was given, or --wait ran out
                (EX_TEMPFAIL: try again later)
  79            the lease was lost while CMD ran, and every process of
                CMD's was stopped
  126, 127      CMD could not be executed, or was not found (as in the shell)
  64, 69, 71 and 75 are sysexits.h's EX_USAGE, EX_UNAVAILABLE, EX_OSERR and
  EX_TEMPFAIL; 79 is the first value past that range. None of them is 1 or
  2 (most commands' failures), 126 or 127 (the shell's), or 128+N (a
  signal), but a CMD that itself exits with one of them cannot be told
  apart.
` + backendHelp + metricsHelp + `
Examples:
  dlock run nightly-backup -- ./backup.sh
  dlock run --no-wait deploy -- make deploy || echo "a deploy is running"
  dlock run --wait 1m --ttl 30s counter -- sh -c 'echo "token $DLOCK_TOKEN"'
  dlock run --limit 3 transcode -- ./transcode.sh   # at most 3 at once
`

type runFlags struct {
	backendFlags
	metrics   metricsFlags
	telemetry dlock.Option // reports to --metrics-addr; nil without it
	ttl       time.Duration
	wait      time.Duration
	noWait    bool
	// waitGiven tells "--wait 0" (give up at once, as flock -w 0) from no
	// --wait (wait as long as it takes).
	waitGiven bool
	fair      bool
	grace     time.Duration
	note      string
	verbose   bool
	limit     int  // permits of the semaphore NAME; 1: a plain lock
	reader    bool // a reader of the read-write lock NAME (--shared)
	// elect: campaign for leadership of NAME (dlock elect), with note as
	// the published value, instead of taking the lock.
	elect bool
}

func runCmd(_ context.Context, env *cmdEnv, args []string) error {
	var f runFlags
	fs := newFlagSet("dlock run", runUsage, env.stdout)
	f.register(fs)
	fs.DurationVar(&f.ttl, "ttl", 15*time.Second, "lease length `D`: renewed every D/3 while CMD runs; frees within D if dlock dies")
	fs.DurationVar(&f.wait, "wait", 0, "give up with status 75 if NAME is not acquired within `D`; 0 gives up at once, as --no-wait does (default: wait as long as it takes)")
	fs.BoolVar(&f.noWait, "no-wait", false, "give up at once with status 75 if NAME is held")
	fs.BoolVar(&f.fair, "fair", false, "wait in a first-come first-served queue (backends with a queue)")
	fs.DurationVar(&f.grace, "grace", 5*time.Second, "after SIGTERM to CMD's processes, wait `D` before SIGKILL")
	f.limit = 1
	fs.Var((*permitsFlag)(&f.limit), "limit", fmt.Sprintf("let at most `N` copies of CMD run at once: take one of N permits of the semaphore NAME (1..%d; the default, 1, is a plain lock)", dlock.MaxPermits))
	fs.BoolVar(&f.reader, "shared", false, "hold NAME as a reader of a read-write lock: with other --shared runs, never with a plain one")
	fs.StringVar(&f.note, "note", "", "free `text` that dlock inspect shows next to this holder")
	fs.BoolVar(&f.verbose, "verbose", false, "say on stderr when the lock is acquired (with its token) and released")
	fs.BoolVar(&f.verbose, "v", false, "short for --verbose")
	f.metrics.register(fs, true)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fs.Visit(func(fl *flag.Flag) { f.waitGiven = f.waitGiven || fl.Name == "wait" })
	return f.run(env, fs.Args())
}

// run holds NAME (args[0]) while CMD (the rest) runs: the body of dlock
// run and dlock elect, once their flags are parsed.
func (f *runFlags) run(env *cmdEnv, args []string) error {
	name, argv, err := f.check(args)
	if err != nil {
		return err
	}
	b, err := f.shared(env)
	if err != nil {
		return err
	}
	ms, err := f.metrics.start(env, b.url)
	if err != nil {
		return err
	}
	defer ms.Close()
	f.telemetry = ms.option()

	// From here on, signals are ours: before CMD starts they abandon the
	// wait (leaving nothing behind), afterwards they go to CMD's group.
	sigs := make(chan os.Signal, 8)
	notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)

	c, lease, err := f.acquire(env, b, name, sigs)
	if err != nil {
		return err
	}
	defer c.Close()
	if f.verbose {
		what := fmt.Sprintf("%q", name)
		verb := "acquired"
		switch {
		case f.limit > 1:
			what = fmt.Sprintf("a permit of %q (%d permits)", name, f.limit)
		case f.elect:
			verb, what = "leading", fmt.Sprintf("%q", name)
		}
		fmt.Fprintf(env.stderr, "%s: %s %s with token %d on %s\n", env.name, verb, what, lease.Token(), b)
	}
	status, err := f.runLocked(env, b, lease, argv, sigs)
	if err != nil {
		return err
	}
	return exitStatus(status)
}

// permitsFlag is --limit: a number of permits, 1..dlock.MaxPermits, so
// that a bad one is refused by parseFlags with a message naming the rule.
type permitsFlag int

func (p *permitsFlag) String() string { return strconv.Itoa(int(*p)) }

func (p *permitsFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > dlock.MaxPermits {
		return fmt.Errorf("the number of permits must be a whole number from 1 to %d", dlock.MaxPermits)
	}
	*p = permitsFlag(n)
	return nil
}

// check validates the flags and splits the arguments into NAME and CMD.
func (f *runFlags) check(args []string) (string, []string, error) {
	switch {
	case f.ttl <= 0:
		return "", nil, usageErrorf("--ttl %v: the lease length must be positive", f.ttl)
	case f.wait < 0:
		return "", nil, usageErrorf("--wait %v: must not be negative", f.wait)
	case f.grace < 0:
		return "", nil, usageErrorf("--grace %v: must not be negative", f.grace)
	case f.reader && f.limit > 1:
		return "", nil, usageErrorf("--shared and --limit %d contradict each other: a reader of a read-write lock, or a permit of a semaphore; give one", f.limit)
	case f.noWait && f.wait > 0:
		return "", nil, usageErrorf("--no-wait and --wait %v contradict each other; give one", f.wait)
	case f.timeout <= 0:
		return "", nil, usageErrorf("--timeout %v: must be positive", f.timeout)
	case len(args) == 0:
		return "", nil, usageErrorf("missing NAME and CMD: dlock run [flags] NAME -- CMD [ARGS...]")
	}
	name, argv := args[0], args[1:]
	switch {
	case len(argv) > 0 && argv[0] == "--":
		argv = argv[1:]
	case len(argv) > 0 && strings.HasPrefix(argv[0], "-"):
		// Flags end at NAME: "dlock run job --ttl 5s -- true" would
		// otherwise run "--ttl" as CMD.
		return "", nil, usageErrorf("%s after NAME %q: flags go before NAME (dlock run [flags] NAME -- CMD [ARGS...]); a CMD that begins with \"-\" goes after \"--\"", shown(argv[0]), name)
	}
	if f.waitGiven && f.wait == 0 {
		f.noWait = true
	}
	if err := dlock.ValidateName(name); err != nil {
		return "", nil, withStatus(exitUsage, fmt.Errorf("NAME %q: %w", name, err))
	}
	if len(argv) == 0 {
		return "", nil, usageErrorf("missing CMD: dlock run [flags] %s -- CMD [ARGS...]", name)
	}
	return name, argv, nil
}

// acquire connects to b and takes the lock, as the flags say. A signal
// abandons the attempt, and then kills dlock, as it would have without
// dlock catching it.
func (f *runFlags) acquire(env *cmdEnv, b *backend, name string, sigs <-chan os.Signal) (*dlock.Client, *dlock.Lease, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		c   *dlock.Client
		l   *dlock.Lease
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, l, err := f.tryAcquire(ctx, b, name)
		res <- result{c, l, err}
	}()
	select {
	case r := <-res:
		return r.c, r.l, r.err
	case s := <-sigs:
		cancel()
		if r := <-res; r.c != nil { // Close releases a lease granted meanwhile
			r.c.Close()
		}
		fmt.Fprintf(env.stderr, "%s: %v while waiting for %q; CMD was not started\n", env.name, s, name)
		dieOf(s.(syscall.Signal))
		return nil, nil, exitStatus(128 + int(s.(syscall.Signal)))
	}
}

func (f *runFlags) tryAcquire(ctx context.Context, b *backend, name string) (*dlock.Client, *dlock.Lease, error) {
	opts := []dlock.Option{dlock.WithTTL(f.ttl), dlock.WithNote(f.note), f.telemetry}
	if f.fair {
		opts = append(opts, dlock.WithFair())
	}
	c, err := f.open(ctx, b, opts...)
	if err != nil {
		return nil, nil, err
	}
	// One bounded round trip first, so that an unreachable backend is
	// reported as such within --timeout rather than as an endless wait.
	if _, err := f.inspect(ctx, c, b, name); err != nil {
		c.Close()
		return nil, nil, err
	}
	// --limit 1 is the plain lock; more is one permit of a semaphore.
	lock, tryLock := c.Mutex(name).Lock, c.Mutex(name).TryLock
	switch {
	case f.limit > 1:
		s := c.Semaphore(name, f.limit)
		lock, tryLock = s.Acquire, s.TryAcquire
	case f.reader:
		rw := c.RWMutex(name)
		lock, tryLock = rw.RLock, rw.TryRLock
	case f.elect:
		// Leadership is the mutex, with the value as its note (WithNote
		// above); Campaign waits in arrival order where it can.
		e := c.Election(name)
		lock = func(ctx context.Context) (*dlock.Lease, error) { return e.Campaign(ctx, f.note) }
	}
	var l *dlock.Lease
	switch {
	case f.noWait:
		tctx, cancel := context.WithTimeout(ctx, f.timeout)
		l, err = tryLock(tctx)
		cancel()
	case f.wait > 0:
		wctx, cancel := context.WithTimeout(ctx, f.wait)
		l, err = lock(wctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = dlock.ErrNotAcquired
		}
	default:
		l, err = lock(ctx)
	}
	if err == nil {
		return c, l, nil
	}
	defer c.Close()
	switch {
	case errors.Is(err, dlock.ErrNotAcquired):
		msg := fmt.Sprintf("%q is held", name)
		info, ierr := f.inspect(ctx, c, b, name)
		switch {
		case f.limit > 1:
			msg = fmt.Sprintf("all %d permits of %q are held", f.limit, name)
			if ierr == nil && len(info.Permits) > 0 {
				msg += " (" + describePermits(info.Permits) + ")"
			}
		case ierr == nil && info.Held:
			msg += " by " + describeHolder(info)
		}
		if f.wait > 0 {
			msg += fmt.Sprintf("; gave up after --wait %v", f.wait)
		}
		return nil, nil, withStatus(exitNotAcquired, errors.New(msg))
	case errors.Is(err, dlock.ErrUnsupported) && f.fair:
		return nil, nil, withStatus(exitUsage, fmt.Errorf("--fair: %w", err))
	case errors.Is(err, dlock.ErrUnsupported) && f.reader:
		return nil, nil, withStatus(exitUsage, fmt.Errorf("--shared: the backend %s has no read-write locks; leave --shared out (a plain lock), or use a backend that has them", b))
	case errors.Is(err, dlock.ErrUnsupported) && f.limit > 1:
		return nil, nil, withStatus(exitUsage, fmt.Errorf("--limit %d: the backend %s has no semaphores; use --limit 1 (a plain lock), or a backend that has them", f.limit, b))
	case errors.Is(err, dlock.ErrInvalidOption):
		return nil, nil, withStatus(exitUsage, err)
	}
	return nil, nil, b.failed(err)
}

// inspect is Client.Inspect bounded by --timeout.
func (bf *backendFlags) inspect(ctx context.Context, c *dlock.Client, b *backend, name string) (dlock.Info, error) {
	ctx, cancel := context.WithTimeout(ctx, bf.timeout)
	defer cancel()
	info, err := c.Inspect(ctx, name)
	if err != nil {
		return info, b.failed(err)
	}
	return info, nil
}

// runLocked runs CMD under the lease, through the supervisor (see
// supervisor.go), and returns dlock's exit status.
func (f *runFlags) runLocked(env *cmdEnv, b *backend, lease *dlock.Lease, argv []string, sigs chan os.Signal) (int, error) {
	fail := func(err error) (int, error) {
		f.release(env, lease)
		return 0, withStatus(exitOSErr, fmt.Errorf("starting CMD's supervisor: %w", err))
	}
	self := "/proc/self/exe" // this very binary, even if its file was replaced since
	if _, err := os.Stat(self); err != nil {
		if self, err = os.Executable(); err != nil {
			return fail(err)
		}
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	defer ctlW.Close() // dlock's exit, however it happens, is the supervisor's EOF
	evR, evW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		return fail(err)
	}
	defer evR.Close()
	sup := exec.Command(self, append([]string{superviseCmd, f.grace.String()}, argv...)...)
	sup.Args[0] = "dlock"
	sup.Stdin, sup.Stdout, sup.Stderr = os.Stdin, os.Stdout, os.Stderr
	sup.ExtraFiles = []*os.File{ctlR, evW}
	sup.Env = append(os.Environ(),
		"DLOCK_NAME="+lease.Name(),
		"DLOCK_TOKEN="+strconv.FormatUint(lease.Token(), 10),
		"DLOCK_LIMIT="+strconv.Itoa(f.limit),
		"DLOCK_BACKEND="+b.url)
	// The supervisor gets a process group of its own; it puts CMD in
	// dlock's, so that CMD stays in the shell's job, as with flock(1).
	sup.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	notify(sigs, jobControlSignals...)
	err = sup.Start()
	ctlR.Close()
	evW.Close()
	if err != nil {
		return fail(err)
	}
	events := make(chan string)
	go func() {
		sc := bufio.NewScanner(evR)
		for sc.Scan() {
			events <- sc.Text()
		}
		close(events) // the supervisor exited: no process of CMD's is left
	}()
	tell := func(format string, args ...any) { _, _ = fmt.Fprintf(ctlW, format+"\n", args...) }

	var (
		lost      error
		leaseDone = lease.Done()
		cmdWS     syscall.WaitStatus
		cmdExited bool
		started   bool
		startErr  error
		status    int
		stopping  syscall.Signal // a stop signal waiting for the supervisor's "stopped"
	)
loop:
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				break loop
			}
			verb, rest, _ := strings.Cut(ev, " ")
			switch verb {
			case "started":
				started = true
			case "failed":
				code, msg, _ := strings.Cut(rest, " ")
				status, _ = strconv.Atoi(code)
				startErr = fmt.Errorf("CMD %q: %s", argv[0], msg)
			case "exited":
				ws, left, _ := strings.Cut(rest, " ")
				n, _ := strconv.ParseUint(ws, 10, 32)
				cmdWS, cmdExited = syscall.WaitStatus(n), true
				if left != "0" && lost == nil {
					fmt.Fprintf(env.stderr, "%s: CMD exited; stopping the %s processes it left running before releasing %q\n", env.name, left, lease.Name())
				}
			case "stopped":
				if stopping != 0 {
					stopSelf(stopping)
					stopping = 0
					if lease.Err() == nil && time.Now().Before(lease.Expires()) {
						tell("cont")
					}
				}
			}
		case s := <-sigs:
			sig := s.(syscall.Signal)
			switch sig {
			case syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
				// Stop CMD's processes first, then dlock: the lease is not
				// renewed while dlock is stopped, so none of them may run.
				// SIGTTIN and SIGTTOU come from the terminal to the whole
				// job, and so does SIGTSTP when dlock is its foreground.
				verb := "stop"
				if started && (sig != syscall.SIGTSTP || foregroundOnTerminal()) {
					verb = "stop-outside"
				}
				tell("%s %d", verb, sig)
				stopping = sig
			case syscall.SIGCONT:
				if lease.Err() == nil && time.Now().Before(lease.Expires()) {
					tell("cont")
				}
			default:
				verb := "signal"
				if started && (sig == syscall.SIGINT || sig == syscall.SIGQUIT) && foregroundOnTerminal() {
					// The terminal sent it to the whole job, CMD included. Before
					// CMD started, it is CMD's all the same (the supervisor reads it
					// once CMD runs).
					verb = "signal-outside"
				}
				tell("%s %d", verb, sig)
			}
		case <-leaseDone:
			leaseDone = nil
			lost = lease.Err()
			fmt.Fprintf(env.stderr, "%s: %s; sending SIGTERM to every process of CMD's, SIGKILL in %v\n", env.name, oneLine(lost), f.grace)
			tell("terminate")
		}
	}
	supErr := sup.Wait()
	switch {
	case lost != nil:
		fmt.Fprintf(env.stderr, "%s: every process of CMD's has exited; exiting with status %d (lease lost)\n", env.name, exitLeaseLost)
		return exitLeaseLost, nil
	case startErr != nil:
		f.release(env, lease)
		return 0, withStatus(status, startErr)
	case !cmdExited:
		// Killed from outside: CMD died with it (its parent-death signal);
		// what CMD started may run on.
		f.release(env, lease)
		return 0, withStatus(exitOSErr, fmt.Errorf("CMD's supervisor process ended before CMD did (%v); processes CMD started may still run", supErr))
	}
	if err := f.release(env, lease); err != nil {
		return 0, err
	}
	if cmdWS.Signaled() {
		// Die of the same signal, as a shell does, so that the script
		// around dlock sees CMD's Ctrl-C and stops too.
		dieOf(cmdWS.Signal())
		return 128 + int(cmdWS.Signal()), nil
	}
	return cmdWS.ExitStatus(), nil
}

// release unlocks; losing the lease before the release is the lease-lost
// outcome, since CMD may not have run alone until its end.
func (f *runFlags) release(env *cmdEnv, lease *dlock.Lease) error {
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	err := lease.Unlock(ctx)
	switch {
	case err == nil:
		if f.verbose {
			fmt.Fprintf(env.stderr, "%s: released %q (token %d)\n", env.name, lease.Name(), lease.Token())
		}
		return nil
	case errors.Is(err, dlock.ErrLeaseLost):
		return withStatus(exitLeaseLost, fmt.Errorf("CMD exited, but %w", err))
	default:
		// The lock frees itself when its TTL runs out; CMD's result stands.
		fmt.Fprintf(env.stderr, "%s: releasing %q failed (it frees itself within --ttl %v): %s\n", env.name, lease.Name(), f.ttl, oneLine(err))
		return nil
	}
}

// describePermits says who holds the permits of a semaphore, for
// messages: the first few holders, and how many more.
func describePermits(ps []dlock.Permit) string {
	const shownMax = 3
	var parts []string
	for i, p := range ps {
		if i == shownMax {
			parts = append(parts, fmt.Sprintf("and %d more", len(ps)-shownMax))
			break
		}
		parts = append(parts, fmt.Sprintf("%s with token %d", holderText(p.Holder), p.Token))
	}
	return "by " + strings.Join(parts, ", ")
}

// describeHolder says who holds a lock, for messages: every holder of a
// semaphore or every reader, up to three.
func describeHolder(info dlock.Info) string {
	if len(info.Permits) > 1 {
		return strings.TrimPrefix(describePermits(info.Permits), "by ")
	}
	return holderText(info.Holder) + fmt.Sprintf(" with token %d", info.Token)
}
