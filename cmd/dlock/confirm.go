package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
)

// confirmWrites states what cmd is about to write to b, and on a backend
// that is neither a throwaway nor this user's "dlock dev" asks first: on a
// terminal it asks (yes skips the question); without one it refuses unless
// yes, since a script must opt in to writing to a real backend.
func confirmWrites(env *cmdEnv, cmd string, b *backend, what string, yes bool) error {
	fmt.Fprintf(env.stderr, "dlock %s writes to %s: %s\n", cmd, b, what)
	if yes || b.stop != nil || b.isDev() {
		return nil
	}
	if !askable(os.Stdin) {
		return usageErrorf("%s is not a throwaway backend nor this user's dlock dev: pass --yes to write to it", b)
	}
	fmt.Fprintf(env.stderr, "write to %s? [y/N] ", b)
	if !answeredYes(os.Stdin) {
		return withStatus(1, fmt.Errorf("nothing written to %s", b))
	}
	return nil
}

// answeredYes reads one line from r: y or yes.
func answeredYes(r io.Reader) bool {
	answer, _ := bufio.NewReader(r).ReadString('\n')
	a := strings.ToLower(strings.TrimSpace(answer))
	return a == "y" || a == "yes"
}

// isDev reports whether b is the "dlock dev" server that this user runs on
// this machine, found through its announcement or given by its URL.
func (b *backend) isDev() bool {
	if b.source == "dlock dev" {
		return true
	}
	path, err := devFilePath(false)
	if err != nil {
		return false
	}
	url, err := readDevFile(path)
	return err == nil && url == b.url
}
