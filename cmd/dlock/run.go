package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
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

Flags:
{{flags}}
CMD's environment, besides dlock's own:
  DLOCK_NAME     the lock's name
  DLOCK_TOKEN    the fencing token of this grant: it increases with every
                 grant of NAME, so a resource that remembers the highest
                 token it has seen can refuse the writes of a stale holder
  DLOCK_BACKEND  the backend URL, so that CMD can run dlock itself. It keeps
                 its password, if it has one: CMD runs as the same user as
                 dlock, and a redacted URL could not connect.

CMD runs in its own process group, and the lock covers the whole group:
  - If the lease is lost (it could not be renewed within --ttl, or
    "dlock break" took it), every process in the group gets SIGTERM at once,
    and SIGKILL after --grace; dlock then exits with status 79.
  - SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to dlock are
    passed on to the group; the lock is released when CMD exits. On a
    terminal, CMD's group is the foreground group, so Ctrl-C reaches it
    directly.
  - When CMD exits, processes it left running in its group get SIGTERM
    (SIGKILL after --grace) before the lock is released, so that none of
    them runs unlocked. Processes that left the group (setsid, daemons)
    are not covered.
  - If dlock itself is killed with SIGKILL, CMD is killed too (Linux's
    parent-death signal), and the lock frees itself within --ttl.

Exit status:
  CMD's status  CMD ran and exited by itself; 128+N if signal N killed it
  64            usage error: a bad flag, lock name or backend URL, or no CMD
  69            the backend could not be reached, or failed
  75            not acquired: NAME was held and --no-wait was given, or
                --wait ran out (EX_TEMPFAIL: try again later)
  79            the lease was lost while CMD ran, and CMD's group was stopped
  126, 127      CMD could not be executed, or was not found (as in the shell)
  64, 69 and 75 are sysexits.h's EX_USAGE, EX_UNAVAILABLE and EX_TEMPFAIL;
  79 is the first value past that range. None of them is 1 or 2 (most
  commands' failures), 126 or 127 (the shell's), or 128+N (a signal), but a
  CMD that itself exits with one of them cannot be told apart.
` + backendHelp + `
Examples:
  dlock run nightly-backup -- ./backup.sh
  dlock run --no-wait deploy -- make deploy || echo "a deploy is running"
  dlock run --wait 1m --ttl 30s counter -- sh -c 'echo "token $DLOCK_TOKEN"'
`

type runFlags struct {
	backendFlags
	ttl     time.Duration
	wait    time.Duration
	noWait  bool
	fair    bool
	grace   time.Duration
	note    string
	verbose bool
}

func runCmd(_ context.Context, env *cmdEnv, args []string) error {
	var f runFlags
	fs := newFlagSet("dlock run", runUsage, env.stdout)
	f.register(fs)
	fs.DurationVar(&f.ttl, "ttl", 15*time.Second, "lease length `D`: renewed every D/3 while CMD runs; frees within D if dlock dies")
	fs.DurationVar(&f.wait, "wait", 0, "give up with status 75 if NAME is not acquired within `D` (default: wait as long as it takes)")
	fs.BoolVar(&f.noWait, "no-wait", false, "give up at once with status 75 if NAME is held")
	fs.BoolVar(&f.fair, "fair", false, "wait in a first-come first-served queue (backends with a queue)")
	fs.DurationVar(&f.grace, "grace", 5*time.Second, "after SIGTERM to CMD's group, wait `D` before SIGKILL")
	fs.StringVar(&f.note, "note", "", "free `text` that dlock inspect shows next to this holder")
	fs.BoolVar(&f.verbose, "verbose", false, "say on stderr when the lock is acquired (with its token) and released")
	fs.BoolVar(&f.verbose, "v", false, "short for --verbose")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	name, argv, err := f.check(fs.Args())
	if err != nil {
		return err
	}
	b, err := f.shared(env)
	if err != nil {
		return err
	}

	// From here on, signals are ours: before CMD starts they abandon the
	// wait (leaving nothing behind), afterwards they go to CMD's group.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)

	c, lease, err := f.acquire(env, b, name, sigs)
	if err != nil {
		return err
	}
	defer c.Close()
	if f.verbose {
		fmt.Fprintf(env.stderr, "%s: acquired %q with token %d on %s\n", env.name, name, lease.Token(), b)
	}
	status, err := f.runLocked(env, b, lease, argv, sigs)
	if err != nil {
		return err
	}
	return exitStatus(status)
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
	case f.noWait && f.wait > 0:
		return "", nil, usageErrorf("--no-wait and --wait %v contradict each other; give one", f.wait)
	case f.timeout <= 0:
		return "", nil, usageErrorf("--timeout %v: must be positive", f.timeout)
	case len(args) == 0:
		return "", nil, usageErrorf("missing NAME and CMD: dlock run [flags] NAME -- CMD [ARGS...]")
	}
	name, argv := args[0], args[1:]
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
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
// abandons the attempt: the exit status is then 128+N, as if the signal had
// killed dlock.
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
		return nil, nil, exitStatus(128 + int(s.(syscall.Signal)))
	}
}

func (f *runFlags) tryAcquire(ctx context.Context, b *backend, name string) (*dlock.Client, *dlock.Lease, error) {
	opts := []dlock.Option{dlock.WithTTL(f.ttl), dlock.WithNote(f.note)}
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
	m := c.Mutex(name)
	var l *dlock.Lease
	switch {
	case f.noWait:
		tctx, cancel := context.WithTimeout(ctx, f.timeout)
		l, err = m.TryLock(tctx)
		cancel()
	case f.wait > 0:
		wctx, cancel := context.WithTimeout(ctx, f.wait)
		l, err = m.Lock(wctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = dlock.ErrNotAcquired
		}
	default:
		l, err = m.Lock(ctx)
	}
	if err == nil {
		return c, l, nil
	}
	defer c.Close()
	switch {
	case errors.Is(err, dlock.ErrNotAcquired):
		msg := fmt.Sprintf("%q is held", name)
		if info, ierr := f.inspect(ctx, c, b, name); ierr == nil && info.Held {
			msg += " by " + describeHolder(info)
		}
		if f.wait > 0 {
			msg += fmt.Sprintf("; gave up after --wait %v", f.wait)
		}
		return nil, nil, withStatus(exitNotAcquired, errors.New(msg))
	case errors.Is(err, dlock.ErrUnsupported) && f.fair:
		return nil, nil, withStatus(exitUsage, fmt.Errorf("--fair: %w", err))
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

// runLocked runs CMD under the lease and returns dlock's exit status.
func (f *runFlags) runLocked(env *cmdEnv, b *backend, lease *dlock.Lease, argv []string, sigs <-chan os.Signal) (int, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		"DLOCK_NAME="+lease.Name(),
		"DLOCK_TOKEN="+strconv.FormatUint(lease.Token(), 10),
		"DLOCK_BACKEND="+b.url)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	tty, onTerminal := foregroundTerminal()
	if onTerminal {
		cmd.SysProcAttr.Foreground, cmd.SysProcAttr.Ctty = true, tty
	}
	if err := cmd.Start(); err != nil {
		f.release(env, lease)
		status := 126
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			status = 127
		}
		return 0, withStatus(status, fmt.Errorf("CMD %q: %w", argv[0], err))
	}
	g := processGroup(cmd.Process.Pid)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var lost error
	leaseDone := lease.Done()
	var killAt <-chan time.Time
	var cmdErr error
wait:
	for {
		select {
		case cmdErr = <-exited:
			break wait
		case s := <-sigs:
			g.signal(s.(syscall.Signal))
		case <-leaseDone:
			leaseDone = nil
			lost = lease.Err()
			fmt.Fprintf(env.stderr, "%s: %s; sending SIGTERM to CMD's process group %d, SIGKILL in %v\n", env.name, oneLine(lost), g, f.grace)
			g.signal(syscall.SIGTERM)
			killAt = time.After(f.grace)
		case <-killAt:
			killAt = nil
			g.signal(syscall.SIGKILL)
		}
	}
	if onTerminal {
		takeTerminalBack(tty)
	}
	// The group may outlive its leader: stop what CMD left behind before
	// the lock is released (or, after a loss, before dlock reports it).
	if g.alive() {
		if lost == nil {
			fmt.Fprintf(env.stderr, "%s: CMD exited; stopping the processes it left in its process group %d before releasing %q\n", env.name, g, lease.Name())
		}
		g.stop(f.grace, sigs)
	}
	if lost != nil {
		fmt.Fprintf(env.stderr, "%s: CMD's process group %d is stopped; exiting with status %d (lease lost)\n", env.name, g, exitLeaseLost)
		return exitLeaseLost, nil
	}
	if err := f.release(env, lease); err != nil {
		return 0, err
	}
	return cmdStatus(cmdErr), nil
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

// cmdStatus is the shell's view of how CMD ended.
func cmdStatus(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 1
}

// describeHolder says who holds a lock, for messages.
func describeHolder(info dlock.Info) string {
	h := info.Holder
	s := ""
	if h.Host != "" {
		s = h.Host + " "
	}
	if h.PID != 0 {
		s += fmt.Sprintf("pid %d ", h.PID)
	}
	s += fmt.Sprintf("with token %d", info.Token)
	if h.Note != "" {
		s += fmt.Sprintf(" (%q)", h.Note)
	}
	return s
}
