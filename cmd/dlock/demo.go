package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

const demoUsage = `Usage:
  dlock demo seckill [flags]   N worker processes race to buy K items from a
                               shared store: without the lock they oversell
  dlock demo fencing [flags]   a lock holder is paused past its TTL; its
                               late write is refused by the fencing token

With no --backend (or DLOCK_BACKEND) a demo starts a throwaway single-node
etcd in a temporary directory. "dlock demo seckill --help" and
"dlock demo fencing --help" show their flags.

Example:
  dlock demo seckill --no-lock
  dlock demo fencing
`

// demos are the subcommands of dlock demo.
func demos() []command {
	return []command{
		{name: "seckill", summary: "N worker processes race to buy K items; without the lock they oversell", run: seckillCmd},
		{name: "fencing", summary: "a holder paused past its TTL; its late write is refused by the fencing token", run: fencingCmd},
	}
}

func demoCmd(ctx context.Context, env *cmdEnv, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(env.stderr, demoUsage)
		return exitStatus(exitUsage)
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(env.stdout, demoUsage)
		return nil
	}
	for _, d := range demos() {
		if d.name == args[0] {
			env.name = "dlock demo " + d.name
			return d.run(ctx, env, args[1:])
		}
	}
	return usageErrorf("unknown demo %q; the demos are seckill and fencing", args[0])
}

// selfCommand runs this dlock binary again as a demo's worker process, with
// the backend URL in its environment (not in its arguments, which other
// users can read).
func selfCommand(b *backend, args ...string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the dlock binary to start workers: %w", err)
	}
	cmd := exec.Command(self, args...)
	cmd.Env = os.Environ()
	if b != nil {
		cmd.Env = append(cmd.Env, "DLOCK_BACKEND="+b.url)
	}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // none outlives the demo
	return cmd, nil
}

// killAll stops worker processes still running when a demo ends early.
func killAll(cmds []*exec.Cmd) {
	for _, c := range cmds {
		if c != nil && c.Process != nil {
			_ = c.Process.Kill() // an error only says it has exited already
		}
	}
}

// since formats the time from start for a timeline.
func since(start time.Time) string {
	return fmt.Sprintf("+%.2fs", time.Since(start).Seconds())
}
