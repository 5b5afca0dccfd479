package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/dlock/dlock"
)

// flagSet is a subcommand's flags and its help text.
type flagSet struct {
	*flag.FlagSet
	help func()
}

// newFlagSet returns a subcommand's flags. Parse errors are returned, not
// printed (parseFlags makes them one line); --help prints usage to stdout
// with the flag list in place of "{{flags}}".
func newFlagSet(name, usage string, stdout io.Writer) *flagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // Parse calls it on errors too; help is printed by parseFlags
	if c, ok := stdout.(*flagCollector); ok {
		c.sets = append(c.sets, fs) // dlock completion asks for the flags
	}
	return &flagSet{fs, func() {
		fmt.Fprint(stdout, strings.Replace(usage, "{{flags}}", flagList(fs), 1))
	}}
}

// flagList formats the flags of fs as "  --name VALUE   usage (default x)".
func flagList(fs *flag.FlagSet) string {
	type row struct{ left, right string }
	var rows []row
	width := 0
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		left := flagWord(f.Name)
		if kind != "" {
			left += " " + kind
		}
		if d := f.DefValue; d != "" && d != "0" && d != "false" && d != "0s" && !strings.Contains(usage, "default") {
			usage += fmt.Sprintf(" (default %s)", d)
		}
		width = max(width, len(left))
		rows = append(rows, row{left, usage})
	})
	var b strings.Builder
	for _, r := range rows {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, r.left, r.right)
	}
	return b.String()
}

// flagWord is a flag as help shows and completion offers it: --name, or
// -v for a one-letter flag (not --v).
func flagWord(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// parseFlags parses args into fs. --help prints the usage and ends the
// command with status 0; a bad flag is a usage error naming it.
func parseFlags(fs *flagSet, args []string) error {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fs.help()
		return exitStatus(0)
	default:
		return usageErrorf("%s (see %s --help)", strings.NewReplacer("flag -", "flag --", "defined: -", "defined: --").Replace(err.Error()), fs.Name())
	}
}

// nameArg returns the one NAME argument of "dlock cmd", checked against the
// naming rule.
func nameArg(fs *flagSet, cmd string) (string, error) {
	if fs.NArg() != 1 {
		return "", usageErrorf("want exactly one NAME, got %d arguments: dlock %s [flags] NAME", fs.NArg(), cmd)
	}
	name := fs.Arg(0)
	if err := dlock.ValidateName(name); err != nil {
		return "", withStatus(exitUsage, fmt.Errorf("NAME %q: %w", name, err))
	}
	return name, nil
}
