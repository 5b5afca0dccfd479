package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"github.com/dlock/dlock"
)

const breakUsage = `Usage:
  dlock break [flags] NAME

Frees the lock NAME: an administrator's tool for a stuck holder. The next
grant gets a higher fencing token, so the broken holder's late writes can
be refused. The holder learns of it at its next renewal (or at once, on
backends that push it): a "dlock run" that held NAME stops every process
of its command's and exits with status 79.

On a terminal, dlock break shows the holder and its token and asks before
it breaks (--yes skips the question); it then breaks the lock only if that
grant still holds it. --token N does the same for scripts: break only if
the grant with token N holds NAME. It prints whom it broke: the holder's
host, process ID, note and token.

The check and the break are two requests: a grant that takes NAME in
between (its holder released it and another took it, within that moment)
is broken in its place. The output then names the grant that was checked.

Exit status: 0 when a holder was broken; 1 when nothing was broken (NAME
was not held, held under another token than --token, or the question was
not answered yes); 64 for a usage error; 69 when the backend cannot be
reached.

Flags:
{{flags}}` + backendHelp + `
Example:
  dlock break nightly-backup
  dlock break --token 4711 --yes nightly-backup
`

func breakCmd(ctx context.Context, env *cmdEnv, args []string) error {
	var bf backendFlags
	fs := newFlagSet("dlock break", breakUsage, env.stdout)
	bf.register(fs)
	token := fs.Uint64("token", 0, "break only if the grant with fencing token `N` holds the lock")
	yes := fs.Bool("yes", false, "do not ask on a terminal")
	fs.BoolVar(yes, "y", false, "short for --yes")
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
	asked := !*yes && askable(os.Stdin)
	if asked {
		info, err := bf.checkGrant(ctx, c, b, name, *token)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.stderr, "break %s, held by %s? [y/N] ", shown(name), describeHolder(info))
		if !answeredYes(os.Stdin) {
			return withStatus(1, fmt.Errorf("%s not broken", shown(name)))
		}
		// The answer may come long after the look: break only the grant
		// that was shown.
		*token = info.Token
	}
	info, err := bf.breakGrant(ctx, c, b, name, *token)
	switch {
	case asked && errors.Is(err, errNothingBroken):
		return withStatus(1, fmt.Errorf("%s changed hands while you answered; nothing broken (run dlock break again)", shown(name)))
	case err != nil:
		return err
	}
	fmt.Fprintf(env.stdout, "broke %s: it was held by %s; the next holder gets a higher token\n", shown(name), describeHolder(info))
	return nil
}

// errNothingBroken ends the errors of checkGrant and breakGrant that mean
// the grant asked for does not hold the lock (exit status 1).
var errNothingBroken = errors.New("nothing broken")

// checkGrant inspects name and returns what it saw if the lock is held
// and, when token is not 0, held by the grant with that token.
func (bf *backendFlags) checkGrant(ctx context.Context, c *dlock.Client, b *backend, name string, token uint64) (dlock.Info, error) {
	info, err := bf.inspect(ctx, c, b, name)
	switch {
	case err != nil:
		return info, err
	case !info.Held:
		return info, withStatus(1, fmt.Errorf("%s is not held; %w", shown(name), errNothingBroken))
	case token != 0 && info.Token != token:
		return info, withStatus(1, fmt.Errorf("%s is held by %s, not by token %d; %w", shown(name), describeHolder(info), token, errNothingBroken))
	}
	return info, nil
}

// breakGrant breaks name if checkGrant finds the grant asked for, and
// returns the holder it broke: "dlock break" and the Break button of
// "dlock ui". The check and the break are two requests (see breakUsage).
func (bf *backendFlags) breakGrant(ctx context.Context, c *dlock.Client, b *backend, name string, token uint64) (dlock.Info, error) {
	info, err := bf.checkGrant(ctx, c, b, name, token)
	if err != nil {
		return info, err
	}
	bctx, cancel := context.WithTimeout(ctx, bf.timeout)
	defer cancel()
	switch err := c.Break(bctx, name); {
	case errors.Is(err, dlock.ErrNotHeld):
		return info, withStatus(1, fmt.Errorf("%s was released meanwhile; %w", shown(name), errNothingBroken))
	case err != nil:
		return info, b.failed(err)
	}
	return info, nil
}

// askable reports whether f is a terminal someone can answer on: a
// terminal's attributes can be read (TCGETS), which /dev/null's cannot,
// though both are character devices.
func askable(f *os.File) bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}
