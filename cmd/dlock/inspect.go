package main

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock/dlock"
)

const inspectUsage = `Usage:
  dlock inspect [flags] NAME

Shows the state of the lock NAME: whether it is held, the holder's fencing
token, host and process ID, note, when it was acquired (by the holder's
clock), how long its lease has left (by the backend's clock, where the
backend says), and the waiters in order (on backends with a queue).

With --json: {"schema": 1, "name", "held", "token", "holder": HOLDER,
"expires_in_seconds", "waiters": [HOLDER, …]}, a HOLDER being {"host",
"pid", "note", "acquired_at"}. No key is ever left out: a value that is
unknown or does not apply (a free lock's token and holder, a missing note)
is null. "schema" changes only when a field is removed or changes meaning.

Flags:
{{flags}}` + backendHelp + `
Example:
  dlock inspect nightly-backup
  dlock inspect --json orders/42 | jq .token
`

func inspectCmd(ctx context.Context, env *cmdEnv, args []string) error {
	var bf backendFlags
	fs := newFlagSet("dlock inspect", inspectUsage, env.stdout)
	bf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	name, err := nameArg(fs, "inspect")
	if err != nil {
		return err
	}
	b, c, err := bf.connect(ctx, env)
	if err != nil {
		return err
	}
	defer c.Close()
	info, err := bf.inspect(ctx, c, b, name)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(env.stdout, inspectJSON{jsonSchema, toJSON(info)})
	}
	now := time.Now()
	t := newTable(env.stdout)
	fmt.Fprintf(t, "name\t%s\n", shown(info.Name))
	if !info.Held {
		fmt.Fprintf(t, "state\tfree\n")
	} else {
		h := info.Holder
		fmt.Fprintf(t, "state\theld\n")
		fmt.Fprintf(t, "token\t%d\n", info.Token)
		fmt.Fprintf(t, "holder\t%s\n", holderText(dlock.Holder{Host: h.Host, PID: h.PID}))
		if h.Note != "" {
			fmt.Fprintf(t, "note\t%q\n", h.Note)
		}
		if !h.AcquiredAt.IsZero() {
			fmt.Fprintf(t, "acquired\t%s (%s)\n", h.AcquiredAt.Local().Format("2006-01-02 15:04:05.000 MST"), ago(h.AcquiredAt, now))
		}
		if info.ExpiresIn > 0 {
			fmt.Fprintf(t, "expires in\t%v\n", round(info.ExpiresIn))
		} else {
			fmt.Fprintf(t, "expires in\t- (the backend does not say; the lease ends with the holder's session)\n")
		}
	}
	fmt.Fprintf(t, "waiters\t%d\n", len(info.Waiters))
	for i, w := range info.Waiters {
		waiting := ""
		if !w.AcquiredAt.IsZero() {
			waiting = fmt.Sprintf(", waiting for %v", round(now.Sub(w.AcquiredAt)))
		}
		fmt.Fprintf(t, "  %d.\t%s%s\n", i+1, holderText(w), waiting)
	}
	return t.Flush()
}
