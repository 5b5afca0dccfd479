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
backend says), and the waiters in order (on backends with a queue). For a
semaphore (dlock run --limit N), it shows how many of its N permits are
held, and each holder of one, in grant order, as it would the holder of a
lock.

With --json: {"schema": 1, "name", "held", "token", "holder": HOLDER,
"expires_in_seconds", "waiters": [HOLDER, …], "limit", "permits":
[PERMIT, …]}, a HOLDER being {"host", "pid", "note", "acquired_at"} and a
PERMIT {"token", "holder": HOLDER, "limit", "expires_in_seconds"}. For a
semaphore, "limit" is N, "permits" lists its holders, and "token",
"holder" and "expires_in_seconds" are those of the first of them; for a
plain lock, "limit" is null and "permits" is [] (for a read-write lock
held by readers, "permits" lists them, and "limit" is null). No key is
ever left out: a value that is unknown or does not apply (a free lock's
token and holder, a missing note) is null. "schema" changes only when a
field is removed or changes meaning.

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
	switch {
	case !info.Held:
		fmt.Fprintf(t, "state\tfree\n")
	case len(info.Permits) > 0:
		// A semaphore: every permit holder, in grant order.
		fmt.Fprintf(t, "state\theld: %s\n", permitsHeld(info))
		fmt.Fprintf(t, "permits\t%d\n", len(info.Permits))
		for i, p := range info.Permits {
			expires := "expires in -"
			if p.ExpiresIn > 0 {
				expires = fmt.Sprintf("expires in %v", round(p.ExpiresIn))
			}
			fmt.Fprintf(t, "  %d.\ttoken %d\t%s\tacquired %s\t%s\n", i+1, p.Token, holderText(p.Holder), ago(p.Holder.AcquiredAt, now), expires)
		}
	default:
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
