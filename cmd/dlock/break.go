package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock/dlock"
)

const breakUsage = `Usage:
  dlock break [flags] NAME

Frees the lock NAME whoever holds it: an administrator's tool for a stuck
holder. The next grant gets a higher fencing token, so the broken holder's
late writes can be refused. The holder learns of it at its next renewal (or
at once, on backends that push it): a "dlock run" that held NAME stops its
command's process group and exits with status 79.

Exit status: 0 when a holder was broken, 1 when NAME was not held, 64 for a
usage error, 69 when the backend cannot be reached.

Flags:
{{flags}}` + backendHelp + `
Example:
  dlock break nightly-backup
`

func breakCmd(ctx context.Context, env *cmdEnv, args []string) error {
	var bf backendFlags
	fs := newFlagSet("dlock break", breakUsage, env.stdout)
	bf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	name, err := nameArg(fs, "break")
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
	bctx, cancel := context.WithTimeout(ctx, bf.timeout)
	defer cancel()
	switch err := c.Break(bctx, name); {
	case errors.Is(err, dlock.ErrNotHeld):
		return withStatus(1, fmt.Errorf("%q is not held; nothing to break", name))
	case err != nil:
		return b.failed(err)
	}
	who := "its holder"
	if info.Held {
		who = describeHolder(info)
	}
	fmt.Fprintf(env.stdout, "broke %s: it was held by %s; the next holder gets a higher token\n", shown(name), who)
	return nil
}
