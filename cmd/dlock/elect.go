package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/dlock/dlock"
)

const electUsage = `Usage:
  dlock elect [flags] NAME -- CMD [ARGS...]
  dlock elect --observe [--json] NAME

Campaigns for the leadership of NAME and runs CMD only while this process
leads: a singleton worker across a fleet (Curator's LeaderLatch, etcd's
election). Leadership is a lease of NAME, held and renewed as dlock run
holds a lock, with everything dlock run does around CMD: if leadership is
lost (not renewed within --ttl, or taken by "dlock break"), CMD's processes
are killed at once and dlock exits with status 79; when CMD exits, the
leadership is resigned and dlock exits with CMD's status. Campaigners are
elected in the order they came, where the backend keeps a queue.

CMD's environment is dlock run's: DLOCK_TOKEN is the term, higher for every
later leader, so a resource that remembers the highest term it has seen can
refuse the writes of a deposed leader.

With --observe, dlock prints who leads now, then every change of leader,
one line each, until it is interrupted (on etcd every change, however
brief; elsewhere it looks every 100 ms, and a leadership shorter than that
may go unseen): the time, the term, the
leader's value, host and PID, or "no leader". With --json each line is a
JSON object, whose "complete" is true when no leadership can have come and
gone unreported since the line before (on etcd).

Flags:
{{flags}}
Exit statuses are dlock run's (dlock run --help).

Examples:
  dlock elect --value "$(hostname):8080" scheduler -- ./scheduler
  dlock elect --observe scheduler
`

func electCmd(_ context.Context, env *cmdEnv, args []string) error {
	var (
		f       runFlags
		observe bool
		asJSON  bool
	)
	fs := newFlagSet("dlock elect", electUsage, env.stdout)
	f.register(fs)
	fs.DurationVar(&f.ttl, "ttl", 15*time.Second, "lease length `D` of the leadership: renewed every D/3 while CMD runs; another is elected within D if dlock dies")
	fs.DurationVar(&f.wait, "wait", 0, "give up with status 75 if not elected within `D`; 0 gives up at once (default: campaign as long as it takes)")
	fs.DurationVar(&f.grace, "grace", 5*time.Second, "after SIGTERM to CMD's processes, wait `D` before SIGKILL")
	fs.StringVar(&f.note, "value", "", "the `value` this leader publishes (an address, an ID): dlock inspect and dlock elect --observe show it")
	fs.BoolVar(&observe, "observe", false, "print who leads and every change of leader, instead of campaigning")
	fs.BoolVar(&asJSON, "json", false, "with --observe: one JSON object a line")
	fs.BoolVar(&f.verbose, "verbose", false, "say on stderr when elected (with the term) and when resigning")
	fs.BoolVar(&f.verbose, "v", false, "short for --verbose")
	f.metrics.register(fs, true)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if observe {
		return f.observe(env, fs.Args(), asJSON)
	}
	if asJSON {
		return usageErrorf("--json goes with --observe")
	}
	fs.Visit(func(fl *flag.Flag) { f.waitGiven = f.waitGiven || fl.Name == "wait" })
	f.limit, f.elect = 1, true
	return f.run(env, fs.Args())
}

// observe prints the leadership of NAME and its changes until a signal.
func (f *runFlags) observe(env *cmdEnv, args []string, asJSON bool) error {
	if len(args) != 1 {
		return usageErrorf("--observe takes NAME alone: dlock elect --observe [--json] NAME")
	}
	name := args[0]
	if err := dlock.ValidateName(name); err != nil {
		return withStatus(exitUsage, fmt.Errorf("NAME %q: %w", name, err))
	}
	b, err := f.shared(env)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := f.open(ctx, b)
	if err != nil {
		return err
	}
	defer c.Close()
	// One bounded read first, so that an unreachable backend is reported
	// as such rather than as silence.
	if _, err := f.inspect(ctx, c, b, name); err != nil {
		return err
	}
	enc := json.NewEncoder(env.stdout)
	for ld := range c.Election(name).Observe(ctx) {
		now := time.Now().UTC().Format(time.RFC3339Nano)
		if asJSON {
			var holder *holderJSON
			if ld.Term != 0 {
				h := toHolderJSON(ld.Holder)
				holder = &h
			}
			if err := enc.Encode(leadershipJSON{Schema: 1, Time: now, Name: name, Term: ld.Term, Value: orNull(ld.Value), Holder: holder, Complete: ld.Complete}); err != nil {
				return err
			}
			continue
		}
		if ld.Term == 0 {
			fmt.Fprintf(env.stdout, "%s  no leader\n", now)
			continue
		}
		h := ld.Holder
		h.Note = "" // the value, shown before it
		fmt.Fprintf(env.stdout, "%s  term %d  %s  %s\n", now, ld.Term, strconv.Quote(ld.Value), holderText(h))
	}
	return nil
}

// leadershipJSON is a line of dlock elect --observe --json. Term is 0,
// Value and Holder null, when nobody leads. Complete is
// Leadership.Complete.
type leadershipJSON struct {
	Complete bool        `json:"complete"`
	Schema   int         `json:"schema"`
	Time     string      `json:"time"`
	Name     string      `json:"name"`
	Term     uint64      `json:"term"`
	Value    *string     `json:"value"`
	Holder   *holderJSON `json:"holder"`
}
