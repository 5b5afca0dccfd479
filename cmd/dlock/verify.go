package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/verify"
)

const verifyUsage = `Usage: dlock verify --backend URL [flags]

Runs the verification workload against your own deployment: client
processes on this machine loop acquire → write their fencing token to a
fenced register → hold → release, while faults a client can inject on its
own side are applied; then the history is checked (see the documentation of
package github.com/dlock/dlock/verify) and a summary table printed.

Faults (--faults client): pause (a holder frozen with SIGSTOP past its TTL),
kill (a holder killed with SIGKILL), net (a holder's connections cut or
frozen through a local proxy; only when every URL host has a port and the
URL is not TLS). Each fault runs for --duration after a fault-free run.

Flags:
{{flags}}
Exit status: 0 when every run passed, 1 when a property was violated, 64 for
a usage error, 69 when the backend cannot be reached.

Example:
  dlock verify --backend redis://127.0.0.1:6379/0 --faults client --duration 30s
`

// runVerify is "dlock verify": it returns the exit status.
func runVerify(args []string) int {
	return verifyMain(args, os.Stdout, os.Stderr)
}

// runVerifyWorker is the hidden "dlock verify-worker": a client process of
// the workload, started by runVerify with its configuration in the
// environment.
func runVerifyWorker([]string) int {
	if !verify.IsWorker() {
		fmt.Fprintln(os.Stderr, "dlock verify-worker: internal command, started by dlock verify")
		return 64
	}
	return verify.WorkerMain()
}

func verifyMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dlock verify", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	backendURL := fs.String("backend", os.Getenv("DLOCK_BACKEND"), "backend `URL` (default $DLOCK_BACKEND)")
	clients := fs.Int("clients", 4, "client processes")
	duration := fs.Duration("duration", 20*time.Second, "length of each run")
	faults := fs.String("faults", "client", "client (pause, kill, net, after a fault-free run) or none")
	history := fs.String("history", "", "write the history to `FILE` (with several runs, FILE-<fault>.jsonl); default: a temporary directory")
	ttl := fs.Duration("ttl", 2*time.Second, "lease length the clients ask for")
	bound := fs.Duration("bound", 5*time.Second, "after a fault heals, a grant must come within TTL + this")
	usage := func() {
		var b strings.Builder
		fs.SetOutput(&b)
		fs.PrintDefaults()
		fmt.Fprint(stdout, strings.Replace(verifyUsage, "{{flags}}", b.String(), 1))
	}
	fail := func(status int, format string, a ...any) int {
		fmt.Fprintf(stderr, "dlock verify: "+format+"\n", a...)
		return status
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage()
			return 0
		}
		return fail(64, "%v (see dlock verify --help)", strings.ReplaceAll(err.Error(), "flag -", "flag --"))
	}
	switch {
	case fs.NArg() > 0:
		return fail(64, "unexpected argument %q (see dlock verify --help)", fs.Arg(0))
	case *backendURL == "":
		return fail(64, "--backend URL is required (or set DLOCK_BACKEND)")
	case *clients < 2 || *clients > 64:
		return fail(64, "--clients %d: want 2..64 client processes", *clients)
	case *duration < 5*time.Second:
		return fail(64, "--duration %v: want at least 5s", *duration)
	case *ttl <= 0 || *bound <= 0:
		return fail(64, "--ttl and --bound must be positive")
	}
	var runs []verify.Fault
	switch *faults {
	case "none":
		runs = []verify.Fault{verify.None}
	case "client":
		runs = append([]verify.Fault{verify.None}, verify.ClientFaults...)
	default:
		return fail(64, "--faults %q: want client or none", *faults)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	label := dlock.Redact(*backendURL)
	if u, err := url.Parse(*backendURL); err == nil && u.Scheme != "" {
		label = u.Scheme
	}
	// Check the backend before starting processes: a bad URL or an
	// unreachable server is reported once, plainly.
	octx, cancel := context.WithTimeout(ctx, 15*time.Second)
	c, err := dlock.Open(octx, *backendURL)
	cancel()
	switch {
	case errors.Is(err, dlock.ErrInvalidOption):
		return fail(64, "%v", err)
	case err != nil:
		return fail(69, "backend %s: %v", dlock.Redact(*backendURL), err)
	}
	caps := c.Capabilities()
	c.Close()
	if caps.InProcess {
		return fail(64, "backend %s keeps its locks inside one process; verify needs one that client processes share", label)
	}
	if caps.MinTTL > 0 && *ttl < caps.MinTTL {
		return fail(64, "--ttl %v: this backend's shortest lease is %v", *ttl, caps.MinTTL)
	}
	exe, err := os.Executable()
	if err != nil {
		return fail(1, "cannot find the dlock binary to start client processes: %v", err)
	}
	dir, err := os.MkdirTemp("", "dlock-verify-")
	if err != nil {
		return fail(1, "%v", err)
	}
	deploy := verify.DeploymentFromURL(*backendURL)

	var results []*verify.Result
	for _, f := range runs {
		if f == verify.Net && len(deploy.Endpoints) == 0 {
			fmt.Fprintf(stderr, "dlock verify: skipping the net fault: the URL's hosts need explicit ports, and TLS cannot be proxied\n")
			continue
		}
		res, err := verify.Run(ctx, verify.Config{
			Backend: label, Fault: f, Deploy: deploy, Clients: *clients, TTL: *ttl, Duration: *duration, Bound: *bound,
			Dir:   filepath.Join(dir, string(f)),
			Spawn: func() *exec.Cmd { return exec.Command(exe, "verify-worker") },
			Log:   stderr,
		})
		if err != nil {
			return fail(1, "run with fault %s: %v", f, err)
		}
		if *history != "" {
			dst := *history
			if len(runs) > 1 {
				dst = strings.TrimSuffix(dst, filepath.Ext(dst)) + "-" + string(f) + ".jsonl"
			}
			if err := copyFile(res.History, dst); err != nil {
				return fail(1, "write the history: %v", err)
			}
			res.History = dst
		}
		results = append(results, res)
	}

	fmt.Fprintln(stdout)
	verify.WriteTable(stdout, results)
	fmt.Fprintln(stdout)
	status := 0
	for _, r := range results {
		fmt.Fprintf(stdout, "%s × %s: %s; history %s\n", r.Backend, r.Fault, r.Verdict(), r.History)
		for i, v := range r.Violations {
			if i == 10 {
				fmt.Fprintf(stdout, "  … and %d more\n", len(r.Violations)-10)
				break
			}
			fmt.Fprintf(stdout, "  %s\n", v)
		}
		for i, n := range r.Notes {
			if i == 3 {
				fmt.Fprintf(stdout, "  note: … and %d more\n", len(r.Notes)-3)
				break
			}
			fmt.Fprintf(stdout, "  note: %s\n", n)
		}
		if r.Verdict() != "PASS" {
			status = 1
		}
	}
	if status == 0 {
		fmt.Fprintln(stdout, "verdict: PASS — no violation found")
	} else {
		fmt.Fprintln(stdout, "verdict: FAIL — see the violations above")
	}
	return status
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}
