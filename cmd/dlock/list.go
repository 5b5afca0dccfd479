package main

import (
	"context"
	"fmt"
	"time"
)

const listUsage = `Usage:
  dlock list [flags] [PREFIX]

Lists the locks whose names begin with PREFIX (all when it is left out)
that are held or waited on: name, token, holder, when acquired, how long
the lease has left, and how many wait. A semaphore (dlock run --limit N)
has a row saying how many of its N permits are held, followed by a row for
each holder of one.

With --json: {"schema": 1, "locks": [LOCK, …]}, each LOCK as "dlock
inspect --json" prints it, without its "schema".

Flags:
{{flags}}` + backendHelp + `
Example:
  dlock list
  dlock list --json orders/
`

func listCmd(ctx context.Context, env *cmdEnv, args []string) error {
	var bf backendFlags
	fs := newFlagSet("dlock list", listUsage, env.stdout)
	bf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return usageErrorf("want at most one PREFIX, got %d arguments: dlock list [flags] [PREFIX]", fs.NArg())
	}
	b, c, err := bf.connect(ctx, env)
	if err != nil {
		return err
	}
	defer c.Close()
	lctx, cancel := context.WithTimeout(ctx, bf.timeout)
	defer cancel()
	infos, err := c.List(lctx, fs.Arg(0))
	if err != nil {
		return b.failed(err)
	}
	if *asJSON {
		out := listJSON{Schema: jsonSchema, Locks: make([]lockJSON, 0, len(infos))}
		for _, in := range infos {
			out.Locks = append(out.Locks, toJSON(in))
		}
		return writeJSON(env.stdout, out)
	}
	if len(infos) == 0 {
		what := "no locks are held or waited on"
		if fs.Arg(0) != "" {
			what = fmt.Sprintf("no lock whose name begins with %q is held or waited on", fs.Arg(0))
		}
		fmt.Fprintln(env.stdout, what)
		return nil
	}
	now := time.Now()
	t := newTable(env.stdout)
	fmt.Fprintln(t, "NAME\tTOKEN\tHOLDER\tACQUIRED\tEXPIRES IN\tWAITERS")
	for _, in := range infos {
		token, holder, acquired, expires := "-", "(free)", "-", "-"
		if in.Held {
			token = fmt.Sprint(in.Token)
			holder = holderText(in.Holder)
			acquired = ago(in.Holder.AcquiredAt, now)
			if in.ExpiresIn > 0 {
				expires = round(in.ExpiresIn).String()
			}
		}
		if len(in.Permits) > 0 {
			// A semaphore: a row for it, then one for each permit holder.
			fmt.Fprintf(t, "%s\t-\t%s\t-\t-\t%d\n", shown(in.Name), permitsHeld(in), len(in.Waiters))
			for i, p := range in.Permits {
				expires := "-"
				if p.ExpiresIn > 0 {
					expires = round(p.ExpiresIn).String()
				}
				fmt.Fprintf(t, "  permit %d\t%d\t%s\t%s\t%s\n", i+1, p.Token, holderText(p.Holder), ago(p.Holder.AcquiredAt, now), expires)
			}
			continue
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%d\n", shown(in.Name), token, holder, acquired, expires, len(in.Waiters))
	}
	return t.Flush()
}
