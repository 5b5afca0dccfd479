package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"unicode"

	"github.com/dlock/dlock/driver"
)

func main() {
	os.Exit(dlockMain(os.Args[1:], os.Stdout, os.Stderr))
}

// command is one subcommand; each lives in its own file.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *cmdEnv, args []string) error
	hidden  bool // internal worker processes of the demos
}

// cmdEnv is what every command is given: where to write, and the
// --backend given before the command name, if any.
type cmdEnv struct {
	stdout, stderr io.Writer
	name           string // "run", "demo seckill", …: prefixes error messages
	backend        string
}

func commands() []command {
	return []command{
		{name: "run", summary: "hold a lock while a command runs", run: runCmd},
		{name: "elect", summary: "run a command only while this process leads; --observe: print every change of leader", run: electCmd},
		{name: "inspect", summary: "show who holds a lock, its token, expiry and waiters", run: inspectCmd},
		{name: "list", summary: "list the locks held or waited on", run: listCmd},
		{name: "break", summary: "force-release a lock; the next holder gets a higher token", run: breakCmd},
		{name: "dev", summary: "run a single-node etcd that dlock commands on this machine share", run: devCmd},
		{name: "demo", summary: "demonstrations: seckill (the flash-sale race), fencing (a paused holder)", run: demoCmd},
		{name: "ui", summary: "serve a live dashboard of the locks to a web browser", run: uiCmd},
		{name: "bench", summary: "measure a backend: throughput, acquire and hand-off latency, fairness", run: benchCmd},
		{name: "verify", summary: "check a backend's guarantees under client-side faults (workload, history, checkers)", run: verifyCmd},
		{name: "help", summary: "show help for a command", run: helpCmd},
		{name: "completion", summary: "print a shell completion script: dlock completion bash|zsh|fish", run: completionCmd},
		{name: superviseCmd, run: supervise, hidden: true},
		{name: seckillWorkerCmd, run: seckillWorker, hidden: true},
		{name: fencingHolderCmd, run: fencingHolder, hidden: true},
		{name: verifyWorkerCmd, run: verifyWorker, hidden: true},
	}
}

const mainUsage = `dlock — distributed locks with leases and fencing tokens

Usage:
  dlock [--backend URL] COMMAND [flags] [args]

Commands:
%s
Run "dlock COMMAND --help" for a command's flags and an example, and
"dlock --version" for the version.
` + backendHelp + `
Exit status: 0 on success, 64 for a usage error (bad flag, name or URL),
69 when the backend cannot be reached; verify and bench: 1 when a violation
was found, 70 when the run itself failed; "dlock run --help" lists the others.

Example:
  dlock dev &                                  # a local etcd, found by the other commands
  dlock run backup -- ./backup.sh              # at most one backup at a time
  dlock list
`

func printMainUsage(w io.Writer) {
	var b strings.Builder
	width := 0
	for _, c := range commands() {
		if !c.hidden {
			width = max(width, len(c.name))
		}
	}
	for _, c := range commands() {
		if !c.hidden {
			fmt.Fprintf(&b, "  %-*s  %s\n", width, c.name, c.summary)
		}
	}
	fmt.Fprintf(w, mainUsage, b.String())
}

// dlockMain runs the command line args and returns the exit status.
func dlockMain(args []string, stdout, stderr io.Writer) int {
	env := &cmdEnv{stdout: stdout, stderr: stderr, name: "dlock"}
	c, args, err := parseCommandLine(env, args)
	if err != nil {
		return report(env, err)
	}
	env.name = "dlock " + c.name
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if c.name == "run" || c.hidden {
		stop() // run forwards signals to its command itself; workers die with their parent
		ctx = context.Background()
	}
	return report(env, c.run(ctx, env, args))
}

// parseCommandLine parses the flags before the command name into env and
// returns the command args names, with the arguments that follow its name.
// It does no I/O beyond printing help; an error (a usage error, or --help's
// exitStatus(0)) is for report.
func parseCommandLine(env *cmdEnv, args []string) (command, []string, error) {
	fs := newFlagSet("dlock", "", env.stdout)
	fs.help = func() { printMainUsage(env.stdout) }
	fs.StringVar(&env.backend, "backend", "", "backend URL")
	showVersion := fs.Bool("version", false, "print the version")
	if err := parseFlags(fs, args); err != nil {
		return command{}, nil, err
	}
	if *showVersion {
		fmt.Fprintln(env.stdout, version())
		return command{}, nil, exitStatus(0)
	}
	args = fs.Args()
	if len(args) == 0 {
		printMainUsage(env.stderr)
		return command{}, nil, exitStatus(exitUsage)
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c, args[1:], nil
		}
	}
	var visible []string
	for _, c := range commands() {
		if !c.hidden {
			visible = append(visible, c.name)
		}
	}
	guess := driver.Closest(args[0], visible)
	if guess != "" {
		return command{}, nil, usageErrorf("unknown command %q; did you mean %q? (see dlock --help)", args[0], guess)
	}
	var names []string
	for _, c := range commands() {
		if !c.hidden && c.name != "help" {
			names = append(names, c.name)
		}
	}
	return command{}, nil, usageErrorf("unknown command %q; the commands are: %s (see dlock --help)", args[0], strings.Join(names, ", "))
}

// version says which build this is: the module version, the commit it was
// built from (when the build recorded it), and the Go release.
func version() string {
	v := "dlock (devel)"
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v + " " + runtime.Version()
	}
	if info.Main.Version != "" && info.Main.Version != "(devel)" {
		v = "dlock " + info.Main.Version
	}
	var rev, at, dirty string
	for _, kv := range info.Settings {
		switch kv.Key {
		case "vcs.revision":
			rev = kv.Value
		case "vcs.time":
			at = kv.Value
		case "vcs.modified":
			if kv.Value == "true" {
				dirty = ", modified"
			}
		}
	}
	if rev != "" {
		v += fmt.Sprintf(" (commit %.12s of %s%s)", rev, at, dirty)
	}
	return fmt.Sprintf("%s, %s %s/%s", v, info.GoVersion, runtime.GOOS, runtime.GOARCH)
}

func helpCmd(_ context.Context, env *cmdEnv, args []string) error {
	if len(args) == 0 {
		printMainUsage(env.stdout)
		return nil
	}
	// "dlock help demo seckill" is "dlock demo seckill --help".
	return exitStatus(dlockMain(append(args[:len(args):len(args)], "--help"), env.stdout, env.stderr))
}

// report prints err as one line prefixed with the command's name and returns
// the exit status it maps to.
func report(env *cmdEnv, err error) int {
	if err == nil {
		return 0
	}
	var st exitStatus
	if errors.As(err, &st) {
		return int(st)
	}
	fmt.Fprintf(env.stderr, "%s: %s\n", env.name, oneLine(err))
	return statusOf(err)
}

// oneLine flattens an error message for a one-line report, escapes any
// control character left in it (an error may quote what a backend said),
// and drops the "dlock: " prefix of the library's errors, which the
// command name repeats.
func oneLine(err error) string {
	msg := strings.NewReplacer("\n\t", "; ", "\n", "; ", "\t", " ").Replace(strings.TrimSpace(err.Error()))
	msg = strings.ReplaceAll(msg, ": dlock: ", ": ")
	msg = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) || r == ' ' {
			return r
		}
		return '?'
	}, msg)
	return strings.TrimPrefix(msg, "dlock: ")
}
