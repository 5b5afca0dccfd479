package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/dlock/dlock"
)

const backendHelp = `
Choosing the backend (every command but dev, which is one):
  1. --backend URL, given before or after the command name; else
  2. the environment variable DLOCK_BACKEND; else
  3. run, inspect, list, break, ui: the "dlock dev" server running on this machine,
     found through the file it writes (see "dlock dev --help"); with none
     running they stop with an error that says to start "dlock dev" or to
     pass --backend;
     demo, bench: a throwaway single-node etcd in a temporary directory.
  URLs: etcd://h1:2379,h2:2379  redis://[user:pass@]host:6379/0  redlock://h1,h2,h3
        zk://h1:2181/chroot  postgres://…  mysql://user:pass@host:3306/db
        temporal://host:7233/namespace  mem:// (in-process only)
  Passwords in URLs are never printed. Prefer DLOCK_BACKEND to --backend for
  a URL with a password: other users can read a process's arguments, not its
  environment.
`

// backendFlags are the flags of every command that talks to a backend.
type backendFlags struct {
	url     string
	timeout time.Duration
}

func (bf *backendFlags) register(fs *flagSet) {
	fs.StringVar(&bf.url, "backend", "", "backend `URL` (default: $DLOCK_BACKEND, else as described below)")
	fs.DurationVar(&bf.timeout, "timeout", 10*time.Second, "how long `D` to wait for the backend to answer")
}

// backend is the URL a command uses and where it came from.
type backend struct {
	url    string       // may hold a password: print String(), never url
	source string       // "--backend", "DLOCK_BACKEND", "dlock dev", "embedded"
	stop   func() error // stops a throwaway node; nil otherwise
}

// String is the URL with its password redacted, and where it came from.
func (b *backend) String() string { return fmt.Sprintf("%s (%s)", dlock.Redact(b.url), b.source) }

// Close stops a throwaway node.
func (b *backend) Close() error {
	if b.stop == nil {
		return nil
	}
	return b.stop()
}

// configured returns the backend given by --backend (after or before the
// command name) or DLOCK_BACKEND, or nil.
func (bf *backendFlags) configured(env *cmdEnv) *backend {
	switch {
	case bf.url != "":
		return &backend{url: bf.url, source: "--backend"}
	case env.backend != "":
		return &backend{url: env.backend, source: "--backend"}
	case os.Getenv("DLOCK_BACKEND") != "":
		return &backend{url: os.Getenv("DLOCK_BACKEND"), source: "DLOCK_BACKEND"}
	}
	return nil
}

// shared returns the configured backend, else the running "dlock dev"
// server: the backends that several processes share (run, inspect, list,
// break).
func (bf *backendFlags) shared(env *cmdEnv) (*backend, error) {
	if b := bf.configured(env); b != nil {
		return b, nil
	}
	path, err := devFilePath(false)
	if err != nil {
		return nil, usageErrorf("no backend: pass --backend URL or set DLOCK_BACKEND (%v)", err)
	}
	url, err := readDevFile(path)
	switch {
	case err == nil:
		return &backend{url: url, source: "dlock dev"}, nil
	case errors.Is(err, os.ErrNotExist):
		return nil, usageErrorf("no backend: start one with \"dlock dev\" in another terminal, or pass --backend URL (or set DLOCK_BACKEND)")
	}
	return nil, usageErrorf("no backend: %v; start \"dlock dev\", or pass --backend URL (or set DLOCK_BACKEND)", err)
}

// ownOrEmbedded returns the configured backend, else starts a throwaway
// embedded etcd node in a temporary directory (demo, bench). Progress goes to
// log.
func (bf *backendFlags) ownOrEmbedded(ctx context.Context, env *cmdEnv, log io.Writer) (*backend, error) {
	if b := bf.configured(env); b != nil {
		return b, nil
	}
	dir, err := os.MkdirTemp("", "dlock-etcd-")
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "starting a throwaway embedded etcd node in %s …\n", dir)
	ctx, cancel := context.WithTimeout(ctx, max(bf.timeout, embeddedStartMin))
	defer cancel()
	node, err := startEmbeddedBounded(ctx, dir, "", "")
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start the embedded etcd: %w", err)
	}
	return &backend{url: node.URL(), source: "throwaway embedded etcd", stop: func() error {
		err := node.Close()
		os.RemoveAll(dir)
		return err
	}}, nil
}

// open connects to b. Errors say which backend and where it came from, and
// carry the exit status: usage for a bad URL, unavailable otherwise.
func (bf *backendFlags) open(ctx context.Context, b *backend, opts ...dlock.Option) (*dlock.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, bf.timeout)
	defer cancel()
	c, err := dlock.Open(ctx, b.url, opts...)
	if err != nil {
		return nil, b.failed(err)
	}
	return c, nil
}

// checkShared makes sure that worker processes can share b: it answers
// within --timeout, and keeps its locks outside this process.
func (bf *backendFlags) checkShared(ctx context.Context, b *backend) error {
	c, err := bf.open(ctx, b)
	if err != nil {
		return err
	}
	defer c.Close()
	if c.Capabilities().InProcess {
		return withStatus(exitUsage, fmt.Errorf("%s: %s keeps its locks inside one process; the demo's workers are separate processes", b.source, dlock.Redact(b.url)))
	}
	_, err = bf.inspect(ctx, c, b, "dlock/ping")
	return err
}

// failed describes an error of backend b, naming the input it came from.
func (b *backend) failed(err error) error {
	switch {
	case errors.Is(err, dlock.ErrInvalidOption), errors.Is(err, dlock.ErrUnsupported):
		return withStatus(exitUsage, fmt.Errorf("%s: %w", b.source, err))
	case errors.Is(err, context.DeadlineExceeded):
		return withStatus(exitUnavailable, fmt.Errorf("backend %s did not answer in time: %w", b, err))
	case errors.Is(err, dlock.ErrUnavailable):
		return withStatus(exitUnavailable, fmt.Errorf("backend %s: %w", b, err))
	}
	return err
}

// embeddedStartMin is the least time a throwaway embedded etcd gets to
// start, whatever -timeout says: an empty node starts within seconds, but
// on a loaded machine its first disk syncs can take several.
const embeddedStartMin = 30 * time.Second

// startEmbeddedBounded is startEmbedded that returns when ctx ends even if
// the server's start is stuck (etcd waits for its database's file lock
// without a timeout). A node that starts after that is closed.
func startEmbeddedBounded(ctx context.Context, dir, listen, password string) (embeddedNode, error) {
	type started struct {
		n   embeddedNode
		err error
	}
	ch := make(chan started, 1)
	go func() {
		n, err := startEmbedded(ctx, dir, listen, password)
		ch <- started{n, err}
	}()
	select {
	case s := <-ch:
		return s.n, s.err
	case <-ctx.Done():
		go func() {
			if s := <-ch; s.n != nil {
				s.n.Close()
			}
		}()
		return nil, fmt.Errorf("etcd did not start: %w", ctx.Err())
	}
}

// connect opens the backend that the flags, the environment or the running
// "dlock dev" server choose, for the commands that act on existing locks.
func (bf *backendFlags) connect(ctx context.Context, env *cmdEnv) (*backend, *dlock.Client, error) {
	b, err := bf.shared(env)
	if err != nil {
		return nil, nil, err
	}
	c, err := bf.open(ctx, b)
	if err != nil {
		return nil, nil, err
	}
	return b, c, nil
}
