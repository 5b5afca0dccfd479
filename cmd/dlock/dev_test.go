package main

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/internal/testenv"
)

// exitWithin waits for b to exit within d; a process still running then
// fails the test.
func exitWithin(t *testing.T, b *background, d time.Duration) result {
	t.Helper()
	select {
	case <-b.done:
		return b.wait(t)
	case <-time.After(d):
		t.Fatalf("dlock (pid %d) still runs after %v; want it to refuse and exit\n%s%s", b.pid(), d, b.stdout.String(), b.stderr.String())
	}
	return result{}
}

func TestDevRefusesANonLoopbackListenWithoutAllowRemote(t *testing.T) {
	root := t.TempDir()
	env := cleanEnv("XDG_RUNTIME_DIR=" + filepath.Join(root, "run"))
	listen := fmt.Sprintf("0.0.0.0:%d", testenv.FreePort(t))
	b := startDlock(t, env, "dev", "--data-dir", filepath.Join(root, "data"), "--listen", listen)
	r := exitWithin(t, b, 60*time.Second)
	if r.code != exitUsage || !strings.Contains(r.stderr, "--allow-remote") {
		t.Fatalf("dlock dev --listen %s: %s; want status %d and advice to pass --allow-remote", listen, r, exitUsage)
	}

	// With --allow-remote it serves, warns, and announces a URL that works
	// on this machine: not 0.0.0.0.
	announce := filepath.Join(root, "run", "dlock", "dev.url")
	dev, err := startDevIn(env, announce, "--data-dir", filepath.Join(root, "data"), "--listen", listen, "--allow-remote")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dev.stop)
	if strings.Contains(dev.url, "0.0.0.0") || !strings.Contains(dev.url, "127.0.0.1") {
		t.Errorf("announced URL %q: want the loopback address", dev.url)
	}
	time.Sleep(100 * time.Millisecond) // let it print the rest of its banner
	if out := dev.out.String(); !strings.Contains(out, "WARNING") || strings.Contains(out, "etcd://0.0.0.0") {
		t.Errorf("dlock dev --allow-remote should warn and print no 0.0.0.0 URL:\n%s", out)
	}
	if r := runDlock(t, env, "list"); r.code != 0 {
		t.Errorf("list against the announced URL: %s", r)
	}
}

func TestDevIsFoundWithoutXDGRuntimeDir(t *testing.T) {
	root := t.TempDir()
	// As cron or ssh run a command: no XDG_RUNTIME_DIR.
	env := cleanEnv("TMPDIR="+root, "HOME="+filepath.Join(root, "home"), "XDG_CACHE_HOME=", "XDG_DATA_HOME=")
	announce := filepath.Join(root, fmt.Sprintf("dlock-%d", os.Geteuid()), "dev.url")
	dev, err := startDevIn(env, announce, "--data-dir", filepath.Join(root, "data"), "--listen", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dev.stop)
	fi, err := os.Stat(filepath.Dir(announce))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("announcement directory: %v, mode %v; want 0700", err, fi.Mode().Perm())
	}
	if r := runDlock(t, env, "run", "job", "--", "true"); r.code != 0 {
		t.Errorf("run without XDG_RUNTIME_DIR did not find dlock dev: %s", r)
	}
}

func TestDevAnnouncementThatOthersCouldWriteIsRefused(t *testing.T) {
	dev := sharedDev(t)
	for _, c := range []struct {
		name, want string
		spoil      func(dir, file string) error
	}{
		{"group-writable file", "writable by other users", func(dir, file string) error { return os.Chmod(file, 0o620) }},
		{"world-writable directory", "writable by other users", func(dir, file string) error { return os.Chmod(dir, 0o777) }},
		{"another user's file", "another user", func(dir, file string) error { return os.Chown(file, 65534, 65534) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			xdg := t.TempDir()
			dir := filepath.Join(xdg, "dlock")
			file := filepath.Join(dir, "dev.url")
			b, err := os.ReadFile(filepath.Join(dev.xdg, "dlock", "dev.url"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := c.spoil(dir, file); err != nil {
				testenv.Missing(t, "root", "run the test as root, to give a file to another user", err)
			}
			r := runDlock(t, cleanEnv("XDG_RUNTIME_DIR="+xdg), "list")
			if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
				t.Errorf("list with a %s: %s; want status %d and %q", c.name, r, exitUsage, c.want)
			}
		})
	}
}

func TestDevStaleAnnouncementIsIgnoredAndSaidSo(t *testing.T) {
	dev := sharedDev(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, pidLine, want string
	}{
		{"dead PID", fmt.Sprintf("pid %d start 1", dead.Process.Pid), "has exited"},
		{"PID of another process", fmt.Sprintf("pid %d start 1", os.Getpid()), "belongs to another process"},
	} {
		t.Run(c.name, func(t *testing.T) {
			xdg := t.TempDir()
			if err := os.Mkdir(filepath.Join(xdg, "dlock"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(xdg, "dlock", "dev.url"), []byte(dev.url+"\n"+c.pidLine+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			r := runDlock(t, cleanEnv("XDG_RUNTIME_DIR="+xdg), "list")
			if r.code != exitUsage || !strings.Contains(r.stderr, "stale") || !strings.Contains(r.stderr, c.want) {
				t.Errorf("list with a stale announcement (%s): %s; want status %d, \"stale\" and %q", c.name, r, exitUsage, c.want)
			}
		})
	}
}

func TestDevRefusesClientsWithoutItsPassword(t *testing.T) {
	dev := sharedDev(t)
	u, err := url.Parse(dev.url)
	if err != nil {
		t.Fatal(err)
	}
	password, ok := u.User.Password()
	if !ok || password == "" {
		t.Fatalf("announced URL %s carries no password", dlock.Redact(dev.url))
	}
	if strings.Contains(dev.out.String(), password) {
		t.Errorf("dlock dev printed its password:\n%s", dev.out.String())
	}
	fi, err := os.Stat(filepath.Join(dev.xdg, "dlock", "dev.url"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("announcement: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}

	// Another user's program knows the port, not the password.
	plain := "etcd://" + u.Host
	for _, args := range [][]string{
		{"list", "--timeout", "5s", "--backend", plain},
		{"break", "--timeout", "5s", "--yes", "--backend", plain, "x"},
		{"run", "--timeout", "5s", "--backend", plain, "x", "--", "true"},
		{"list", "--timeout", "5s", "--backend", "etcd://root:wrong@" + u.Host},
	} {
		r := runDlock(t, cleanEnv(), args...)
		if r.code != exitUnavailable || !strings.Contains(r.stderr, "auth") && !strings.Contains(r.stderr, "user name") {
			t.Errorf("dlock %s: %s; want status %d and an authentication error", strings.Join(args, " "), r, exitUnavailable)
		}
	}
	if r := runDlock(t, dev.env(), "list"); r.code != 0 {
		t.Errorf("list with the announced credential: %s", r)
	}
}

func TestDevKeepsItsDataOutsideTheCacheByDefault(t *testing.T) {
	root := t.TempDir()
	home := filepath.Join(root, "home")
	xdg := filepath.Join(root, "run")
	env := cleanEnv("XDG_RUNTIME_DIR="+xdg, "HOME="+home, "XDG_DATA_HOME=", "XDG_CACHE_HOME=")
	dev, err := startDevIn(env, filepath.Join(xdg, "dlock", "dev.url"), "--listen", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dev.stop)
	data := filepath.Join(home, ".local", "share", "dlock", "dev")
	if _, err := os.Stat(filepath.Join(data, "member")); err != nil {
		t.Errorf("etcd's data is not in %s: %v\n%s", data, err, dev.out.String())
	}
	if strings.HasSuffix(dev.url, ":0") {
		t.Errorf("--listen 127.0.0.1:0 announced %s; want the port it serves on", dlock.Redact(dev.url))
	}
	if r := runDlock(t, env, "list"); r.code != 0 {
		t.Errorf("list: %s", r)
	}
}
