package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// PostgresInstall is the command that installs the PostgreSQL server.
const PostgresInstall = "scripts/install-postgres.sh (apt-get install -y postgresql)"

// postgresUser is the unprivileged account the server runs as when the
// tests run as root: PostgreSQL refuses to run as root.
const postgresUser = "dlocktest"

// Postgres is a PostgreSQL server started for a test: a fresh cluster in a
// temporary directory, listening on a free loopback port, with a database
// named "dlock" owned by the superuser "dlock" (no password; trust
// authentication on loopback only).
type Postgres struct {
	Addr     string // host:port on 127.0.0.1
	Port     int
	Database string
	User     string // the superuser

	t       testing.TB
	bin     string // directory of the server binaries
	dataDir string
	sockDir string
	cred    *syscall.Credential // nil when not running as root
	proc    *Process
	// settings are server settings (name=value) given after the defaults.
	settings []string
}

// StartPostgres initialises a cluster in a temporary directory, starts the
// server and creates the database. Durability settings are PostgreSQL's
// defaults except fsync=off: a test crashes the server process (SIGKILL),
// never the machine, and what a crashed server has handed to the kernel
// survives; synchronous_commit stays on, so a commit that returned is in
// the WAL that crash recovery replays.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	return startPostgres(t, nil)
}

// StartPostgresWith is StartPostgres with more server settings
// ("name=value", each passed as -c after the defaults, so that they
// override them): a benchmark with hundreds of clients raises
// max_connections (default here 200).
func StartPostgresWith(t testing.TB, settings ...string) *Postgres {
	t.Helper()
	return startPostgres(t, settings)
}

func startPostgres(t testing.TB, settings []string) *Postgres {
	t.Helper()
	initdb := LookPath(t, "postgres", PostgresInstall, []string{"initdb"}, "/usr/lib/postgresql/*/bin")
	// initdb may be a symbolic link on PATH; the other binaries are where
	// it really lives (Debian: /usr/lib/postgresql/VERSION/bin).
	if real, err := filepath.EvalSymlinks(initdb); err == nil {
		initdb = real
	}
	p := &Postgres{t: t, bin: filepath.Dir(initdb), Database: "dlock", User: "dlock", settings: settings}

	root, err := os.MkdirTemp("", "dlock-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	p.dataDir = filepath.Join(root, "data")
	p.sockDir = filepath.Join(root, "sock")
	if err := os.Mkdir(p.sockDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		uid, gid, err := ensureUser(postgresUser)
		if err != nil {
			t.Fatalf("testenv: postgres: %v", err)
		}
		p.cred = &syscall.Credential{Uid: uid, Gid: gid}
		for _, d := range []string{root, p.sockDir} {
			if err := os.Chown(d, int(uid), int(gid)); err != nil {
				t.Fatal(err)
			}
		}
	}

	initCmd := exec.Command(initdb, "-D", p.dataDir, "-U", p.User, "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
	initCmd.Dir = root
	initCmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	if out, err := initCmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: initdb: %v\n%s", err, out)
	}
	p.Port = FreePort(t)
	p.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port))
	p.start()
	t.Cleanup(p.Kill)

	if out, err := p.psql("postgres", "CREATE DATABASE "+p.Database); err != nil {
		t.Fatalf("testenv: create database: %v\n%s", err, out)
	}
	return p
}

// URL is a postgres:// URL for the test database with extra query
// parameters (for example "table=locks"), connecting to addr (the server's
// address, or a proxy's) as the superuser.
func (p *Postgres) URL(addr, query string) string {
	u := fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", p.User, addr, p.Database)
	if query != "" {
		u += "&" + query
	}
	return u
}

// Exec runs SQL statements in the test database as the superuser, through
// psql over the server's Unix socket, and fails the test on error.
func (p *Postgres) Exec(sql string) string {
	p.t.Helper()
	out, err := p.psql(p.Database, sql)
	if err != nil {
		p.t.Fatalf("testenv: psql %q: %v\n%s", sql, err, out)
	}
	return out
}

func (p *Postgres) psql(db, sql string) (string, error) {
	cmd := exec.Command(filepath.Join(p.bin, "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
		"-h", p.sockDir, "-p", strconv.Itoa(p.Port), "-U", p.User, "-d", db, "-c", sql)
	cmd.Dir = filepath.Dir(p.dataDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (p *Postgres) start() {
	p.t.Helper()
	args := []string{"-D", p.dataDir, "-p", strconv.Itoa(p.Port),
		"-k", p.sockDir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
		"-c", "max_connections=200", "-c", "shared_buffers=16MB", "-c", "log_min_messages=warning",
		// Dynamic shared memory in the data directory, not in /dev/shm:
		// a server killed at the end of a test leaves its segments
		// behind, and there they would outlive the test's directory.
		"-c", "dynamic_shared_memory_type=mmap"}
	for _, s := range p.settings {
		args = append(args, "-c", s)
	}
	cmd := exec.Command(filepath.Join(p.bin, "postgres"), args...)
	cmd.Dir = filepath.Dir(p.dataDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	// The log goes to the cluster's directory, which the server's user owns.
	proc, err := StartProcess("postgres", cmd, filepath.Dir(p.dataDir))
	if err != nil {
		p.t.Fatalf("testenv: start postgres: %v", err)
	}
	p.proc = proc
	if err := p.waitReady(60 * time.Second); err != nil {
		proc.Kill()
		p.t.Fatal(err)
	}
}

// waitReady waits until the server accepts queries (not only connections:
// during crash recovery it accepts and refuses them).
func (p *Postgres) waitReady(timeout time.Duration) error {
	exited := false
	err := Poll(timeout, func() error {
		select {
		case <-p.proc.Exited():
			exited = true
			return Final(fmt.Errorf("testenv: postgres exited during startup\n%s", p.proc.Tail(20)))
		default:
		}
		if out, err := p.psql("postgres", "SELECT 1"); err != nil {
			return fmt.Errorf("%v %s", err, out)
		}
		return nil
	})
	if err == nil || exited {
		return err
	}
	return fmt.Errorf("testenv: postgres not ready within %v: %v\n%s", timeout, err, p.proc.Tail(20))
}

// Restart crashes the server (SIGKILL, no shutdown checkpoint) and starts it
// again on the same port with the same data: what survives is what crash
// recovery replays from the WAL.
func (p *Postgres) Restart(t testing.TB) {
	t.Helper()
	p.Kill()
	p.start()
}

// Kill stops the server with SIGKILL; Restart brings it back. Every
// server process is killed, not only the postmaster: PostgreSQL's backends
// leave the postmaster's process group (setsid), and one that has not yet
// noticed its postmaster's death keeps the shared memory attached, which
// makes the next postmaster on the same data refuse to start.
//
// The postmaster is frozen first, so that it neither forks nor reaps: the
// children's PIDs stay theirs until they are killed.
func (p *Postgres) Kill() {
	select {
	case <-p.proc.Exited():
		return
	default:
	}
	p.proc.Pause()
	kids := p.children()
	for _, pid := range kids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, pid := range kids {
		waitGone(pid, 10*time.Second)
	}
	p.proc.Kill()
}

// Pause freezes the server (SIGSTOP), backends included; Resume thaws it.
func (p *Postgres) Pause() {
	p.proc.Pause()
	for _, pid := range p.children() {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
}

// Resume thaws a paused server (SIGCONT).
func (p *Postgres) Resume() {
	for _, pid := range p.children() {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	p.proc.Resume()
}

// children are the postmaster's live child processes.
func (p *Postgres) children() []int {
	select {
	case <-p.proc.Exited():
		return nil
	default:
	}
	return childPIDs(p.proc.Cmd.Process.Pid)
}

// Log returns the tail of the server's log, for failure messages.
func (p *Postgres) Log(n int) string { return p.proc.Tail(n) }

// ensureUser creates the unprivileged system account name if it does not
// exist, and returns its uid and gid.
func ensureUser(name string) (uint32, uint32, error) {
	u, err := user.Lookup(name)
	if err != nil {
		out, aerr := exec.Command("useradd", "--system", "--user-group", "--no-create-home",
			"--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name).CombinedOutput()
		if u, err = user.Lookup(name); err != nil {
			return 0, 0, fmt.Errorf("create user %s: %v: %s", name, aerr, out)
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return 0, 0, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return 0, 0, err
	}
	return uint32(uid), uint32(gid), nil
}
