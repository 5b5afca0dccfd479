package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

const devUsage = `Usage:
  dlock dev [flags]

Runs a single-node etcd server inside this process, for local work: the
"dlock run", "inspect", "list" and "break" commands on this machine share it.
It announces its URL in a file that they read when neither --backend nor
DLOCK_BACKEND is given ($XDG_RUNTIME_DIR/dlock/dev.url, or
~/.cache/dlock/dev.url without XDG_RUNTIME_DIR), and removes the file when
it stops. Ctrl-C (SIGINT) or SIGTERM stops it cleanly. Its data — and with
it the fencing tokens, which keep increasing across restarts — stays in
--data-dir.

Flags:
{{flags}}
Example:
  dlock dev &
  dlock run my-job -- ./job.sh
`

func devCmd(ctx context.Context, env *cmdEnv, args []string) error {
	fs := newFlagSet("dlock dev", devUsage, env.stdout)
	dataDir := fs.String("data-dir", "", "keep etcd's data in `DIR` (default ~/.cache/dlock/dev-etcd)")
	listen := fs.String("listen", "127.0.0.1:2379", "serve clients on `host:port` (port 0: a free port)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected argument %q: dlock dev takes only flags", fs.Arg(0))
	}
	if *dataDir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return usageErrorf("--data-dir: no default (%v); give one", err)
		}
		*dataDir = filepath.Join(cache, "dlock", "dev-etcd")
	}
	if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		return usageErrorf("--data-dir: %v", err)
	}
	unlock, err := lockDataDir(*dataDir)
	if err != nil {
		return err
	}
	defer unlock()
	announce, err := devFilePath()
	if err != nil {
		return err
	}
	if url, ok := readDevFile(announce); ok {
		return fmt.Errorf("a dlock dev server already runs at %s (announced in %s); stop it first", url, announce)
	}

	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	node, err := startEmbeddedBounded(sctx, *dataDir, *listen)
	cancel()
	if err != nil {
		return fmt.Errorf("start etcd on --listen %s with --data-dir %s: %w", *listen, *dataDir, err)
	}
	defer node.Close()
	url := node.URL()
	if err := writeDevFile(announce, url); err != nil {
		return err
	}
	defer removeDevFile(announce)

	fmt.Fprintf(env.stdout, "dlock dev: etcd serving %s (data in %s)\n", url, *dataDir)
	fmt.Fprintf(env.stdout, "Other dlock commands on this machine find it through %s;\n", announce)
	fmt.Fprintf(env.stdout, "elsewhere pass --backend %s, or export DLOCK_BACKEND=%s\n", url, url)
	fmt.Fprintf(env.stdout, "Ctrl-C stops it.\n")
	<-ctx.Done()
	fmt.Fprintf(env.stdout, "dlock dev: stopping\n")
	return nil
}

// lockDataDir keeps a second dlock dev off the same data directory, where
// etcd would wait for the first one's database lock without a word.
func lockDataDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, "dlock-dev.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, usageErrorf("--data-dir: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("--data-dir %s is in use by another dlock dev; stop it or give another directory", dir)
	}
	return func() { f.Close() }, nil
}

// writeDevFile announces url, atomically: readers never see half a file.
func writeDevFile(path, url string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := fmt.Sprintf("%s.%d", path, os.Getpid())
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%s\npid %d\n", url, os.Getpid()), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// removeDevFile removes the announcement if it is still this process's.
func removeDevFile(path string) {
	if b, err := os.ReadFile(path); err == nil {
		if _, pid, ok := parseDevFile(b); ok && pid == os.Getpid() {
			os.Remove(path)
		}
	}
}
