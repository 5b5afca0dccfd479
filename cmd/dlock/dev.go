package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dlock/dlock"
)

const devUsage = `Usage:
  dlock dev [flags]

Runs a single-node etcd server inside this process, for local work: the
"dlock run", "inspect", "list" and "break" commands of the same user on
this machine share it. It announces its URL in a file that they read when
neither --backend nor DLOCK_BACKEND is given, and removes the file when it
stops: dev.url in $XDG_RUNTIME_DIR/dlock/, else in /run/user/UID/dlock/ if
that exists, else in $TMPDIR/dlock-UID/ (TMPDIR defaults to /tmp), so that
cron jobs and ssh sessions without XDG_RUNTIME_DIR find it too. The
directory is created mode 0700; a file or directory that another user owns
or can write is refused, and a file left by a dev server that has died is
ignored with a message that says so.

It serves on the loopback interface only, unless --allow-remote lets
--listen name another address. Clients must log in: at its first start it
makes a random password for etcd's user root, kept in the data directory
(dlock-dev.password, mode 0600), and the announcement (mode 0600) carries
it to the other commands of the same user. The password is never printed.
A client without it is refused: "user name is empty" or "authentication
failed", exit status 69.

Ctrl-C (SIGINT) or SIGTERM stops it cleanly. Its data — and with it the
fencing tokens, which keep increasing across restarts — stays in --data-dir,
by default $XDG_DATA_HOME/dlock/dev (~/.local/share/dlock/dev): not a cache
directory, since deleting it restarts the tokens from 1.

Flags:
{{flags}}` + metricsHelp + `
Example:
  dlock dev &
  dlock run my-job -- ./job.sh
`

func devCmd(ctx context.Context, env *cmdEnv, args []string) error {
	fs := newFlagSet("dlock dev", devUsage, env.stdout)
	dataDir := fs.String("data-dir", "", "keep etcd's data in `DIR` (default $XDG_DATA_HOME/dlock/dev or ~/.local/share/dlock/dev)")
	listen := fs.String("listen", "127.0.0.1:2379", "serve clients on `host:port` (port 0: a free port); a loopback address unless --allow-remote")
	allowRemote := fs.Bool("allow-remote", false, "let --listen and --metrics-addr name addresses other machines can reach")
	var metrics metricsFlags
	metrics.register(fs, false)
	// dev is the one command without --backend: it is the backend. Given
	// after "dev" the flag package would only say it is not defined; given
	// before, it would be ignored while a server starts. Either is a
	// usage error that says why.
	given := env.backend != ""
	for _, a := range args {
		if a == "--" {
			break
		}
		if n := strings.TrimLeft(a, "-"); n != a && (n == "backend" || strings.HasPrefix(n, "backend=")) {
			given = true
		}
	}
	if given {
		return usageErrorf("--backend: dev runs its own etcd server and connects to no backend; --listen chooses where it serves, and the other commands find it or take --backend with its URL")
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected argument %q: dlock dev takes only flags", fs.Arg(0))
	}
	host, port, loopback, err := checkListen("--listen", *listen, *allowRemote, "the server")
	if err != nil {
		return err
	}
	// dev takes no lock: its /metrics has the embedded etcd server's
	// metrics and the process's.
	metrics.allowRemote = *allowRemote
	ms, err := metrics.start(env, "etcd://")
	if err != nil {
		return err
	}
	defer ms.Close()
	if port == "0" {
		// etcd would listen on a free port but announce port 0.
		l, err := net.Listen("tcp", *listen)
		if err != nil {
			return usageErrorf("--listen %s: %v", *listen, err)
		}
		*listen = l.Addr().String()
		_, port, _ = net.SplitHostPort(*listen)
		l.Close()
	}
	if *dataDir == "" {
		d, err := defaultDevDataDir(env)
		if err != nil {
			return usageErrorf("--data-dir: no default (%v); give one", err)
		}
		*dataDir = d
	}
	if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		return usageErrorf("--data-dir: %v", err)
	}
	unlock, err := lockDataDir(*dataDir)
	if err != nil {
		return err
	}
	defer unlock()
	announce, err := devFilePath(true)
	if err != nil {
		return fmt.Errorf("the announcement directory: %w", err)
	}
	switch url, err := readDevFile(announce); {
	case err == nil:
		return fmt.Errorf("a dlock dev server already runs at %s (announced in %s); stop it first", dlock.Redact(url), announce)
	case !errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(env.stderr, "dlock dev: %v\n", err)
	}

	password, passwordFile, err := devPassword(*dataDir)
	if err != nil {
		return err
	}

	sctx, cancel := context.WithTimeout(ctx, devStartTimeout)
	node, err := startEmbeddedBounded(sctx, *dataDir, *listen, password)
	cancel()
	if err != nil {
		return fmt.Errorf("start etcd on --listen %s with --data-dir %s: %w", *listen, *dataDir, err)
	}
	defer node.Close()
	url := node.URL()
	if !loopback {
		fmt.Fprintf(env.stderr, "dlock dev: WARNING: serving on %s, which other machines can reach\n", *listen)
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			// Clients on this machine use the loopback address; others
			// need a name of this machine.
			url = strings.Replace(url, *listen, net.JoinHostPort("127.0.0.1", port), 1)
		}
	}
	if err := writeDevFile(announce, url); err != nil {
		return err
	}
	defer removeDevFile(announce)

	fmt.Fprintf(env.stdout, "dlock dev: etcd serving %s (data in %s)\n", dlock.Redact(url), *dataDir)
	fmt.Fprintf(env.stdout, "Other dlock commands of this user on this machine find it, with its password, through %s;\n", announce)
	if remote := remoteURL(url, host, port); remote != url {
		fmt.Fprintf(env.stdout, "from other machines set DLOCK_BACKEND=%s, the password from %s\n", dlock.Redact(remote), passwordFile)
	} else {
		fmt.Fprintf(env.stdout, "other programs log in as root with the password in %s\n", passwordFile)
	}
	fmt.Fprintf(env.stdout, "Ctrl-C stops it.\n")
	<-ctx.Done()
	fmt.Fprintf(env.stdout, "dlock dev: stopping\n")
	return nil
}

// checkListen checks a --listen address: host:port, on the loopback
// interface unless allowRemote; what is what other machines could reach.
func checkListen(flag, listen string, allowRemote bool, what string) (host, port string, loopback bool, err error) {
	host, port, err = net.SplitHostPort(listen)
	if err != nil {
		return "", "", false, usageErrorf("%s %q: want host:port (%v)", flag, listen, err)
	}
	loopback = isLoopback(host)
	if !loopback && !allowRemote {
		return "", "", false, usageErrorf("%s %s: not a loopback address; other machines could reach %s: pass --allow-remote to mean it", flag, listen, what)
	}
	return host, port, loopback, nil
}

// isLoopback reports whether host names this machine's loopback interface
// only.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// remoteURL is url as another machine writes it when the server listens
// on all interfaces: with this machine's name.
func remoteURL(url, host, port string) string {
	ip := net.ParseIP(host)
	if host != "" && (ip == nil || !ip.IsUnspecified()) {
		return url
	}
	name, err := os.Hostname()
	if err != nil {
		return url
	}
	return strings.Replace(url, net.JoinHostPort("127.0.0.1", port), net.JoinHostPort(name, port), 1)
}

// defaultDevDataDir is $XDG_DATA_HOME/dlock/dev, else
// ~/.local/share/dlock/dev: data, not a cache, since the fencing tokens
// must keep increasing. A directory at the former default in the cache
// directory is kept in use, with a note.
func defaultDevDataDir(env *cmdEnv) (string, error) {
	base := os.Getenv("XDG_DATA_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		base = filepath.Join(home, ".local", "share")
	}
	dir := filepath.Join(base, "dlock", "dev")
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if cache, err := os.UserCacheDir(); err == nil {
			old := filepath.Join(cache, "dlock", "dev-etcd")
			if _, err := os.Stat(old); err == nil {
				fmt.Fprintf(env.stderr, "dlock dev: using the data of an earlier version in %s; a cache cleaner may delete it and restart the fencing tokens: stop dlock dev and move it to %s\n", old, dir)
				return old, nil
			}
		}
	}
	return dir, nil
}

// devPassword returns root's password for the server with its data in
// dir, from dir/dlock-dev.password, which it creates (mode 0600, a random
// password) at the first start. A file that others can read is refused.
func devPassword(dir string) (password, path string, err error) {
	path = filepath.Join(dir, "dlock-dev.password")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		var b [16]byte
		_, _ = rand.Read(b[:])
		password = hex.EncodeToString(b[:])
		_, err = fmt.Fprintln(f, password)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(path)
			return "", "", fmt.Errorf("--data-dir: %w", err)
		}
		return password, path, nil
	}
	if !errors.Is(err, os.ErrExist) {
		return "", "", fmt.Errorf("--data-dir: %w", err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return "", "", fmt.Errorf("--data-dir: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o077 != 0 {
		return "", "", fmt.Errorf("%s must be a file of yours that only you can read and write (chmod 600 it)", path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", "", fmt.Errorf("--data-dir: %w", err)
	}
	if password = strings.TrimSpace(string(b)); password == "" {
		return "", "", fmt.Errorf("%s is empty", path)
	}
	return password, path, nil
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

// devStartTimeout bounds the start of dlock dev's node: more than a
// throwaway node gets (embeddedStartMin), since it may first replay a
// large data directory; a start stuck longer (another etcd holding the
// database's file lock) is reported rather than waited on.
const devStartTimeout = 60 * time.Second
