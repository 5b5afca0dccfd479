package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// MariaDBInstall is the command that installs the MariaDB server on Debian.
const MariaDBInstall = "scripts/install-mariadb.sh (apt-get install -y mariadb-server)"

// Accounts and database that StartMariaDB creates.
const (
	MariaDBDatabase = "dlock"
	// MariaDBUser may create tables in MariaDBDatabase.
	MariaDBUser     = "dlock"
	MariaDBPassword = "dlock-test-pw"
	// MariaDBLimitedUser may read and write MariaDBDatabase but not create
	// tables in it.
	MariaDBLimitedUser     = "dlock_limited"
	MariaDBLimitedPassword = "limited-pw"
)

// MariaDB is a mariadbd started for tests in a temporary data directory,
// listening on a free loopback port.
type MariaDB struct {
	Addr string   // 127.0.0.1:port
	Port int      // the port of Addr
	Dir  string   // data directory
	TLS  TLSFiles // with StartMariaDBTLS: the server's certificate and its CA

	bin  string
	args []string
	logs string
	proc *Process
}

// StartMariaDB initialises a data directory with mariadb-install-db, starts
// mariadbd on a free loopback port, and creates the database MariaDBDatabase
// and the users MariaDBUser and MariaDBLimitedUser. The server is killed and
// its directory removed when t ends. Start it once per test binary: it
// takes a few seconds.
func StartMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	return startMariaDB(t, nil, nil)
}

// StartMariaDBWith is StartMariaDB with more server options, given after
// the defaults (so that they override them): benchmarks use it to turn off
// the flush of every commit (--innodb-flush-log-at-trx-commit=0), which
// the restart tests need on.
func StartMariaDBWith(t testing.TB, serverArgs ...string) *MariaDB {
	t.Helper()
	return startMariaDB(t, nil, serverArgs)
}

// StartMariaDBTLS is StartMariaDB with TLS offered (not required) on the
// port, under a certificate for hosts alone (see GenerateCertFor), signed
// by a throwaway CA; m.TLS names the files.
func StartMariaDBTLS(t testing.TB, hosts ...string) *MariaDB {
	t.Helper()
	return startMariaDB(t, hosts, nil)
}

// StartMariaDBTLSWith is StartMariaDBTLS with more server options, as
// StartMariaDBWith.
func StartMariaDBTLSWith(t testing.TB, hosts []string, serverArgs ...string) *MariaDB {
	t.Helper()
	return startMariaDB(t, hosts, serverArgs)
}

func startMariaDB(t testing.TB, tlsHosts, serverArgs []string) *MariaDB {
	t.Helper()
	server := LookPath(t, "mariadb", MariaDBInstall, []string{"mariadbd", "mysqld"}, "/usr/sbin", "/usr/libexec")
	install := LookPath(t, "mariadb", MariaDBInstall, []string{"mariadb-install-db", "mysql_install_db"}, "/usr/bin", "/usr/scripts")
	base := t.TempDir()
	data := filepath.Join(base, "data")
	initOut, err := exec.Command(install,
		"--no-defaults", "--datadir="+data, "--user=root",
		"--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve",
	).CombinedOutput()
	if err != nil {
		t.Fatalf("testenv: %s: %v\n%s", install, err, initOut)
	}
	init := filepath.Join(base, "init.sql")
	if err := os.WriteFile(init, []byte(mariadbInitSQL), 0o644); err != nil {
		t.Fatal(err)
	}
	port := FreePort(t)
	m := &MariaDB{
		Addr: "127.0.0.1:" + strconv.Itoa(port),
		Port: port,
		Dir:  data,
		bin:  server,
		logs: base,
		args: []string{
			"--no-defaults", "--user=root",
			"--datadir=" + data,
			"--socket=" + filepath.Join(base, "mysqld.sock"),
			"--pid-file=" + filepath.Join(base, "mysqld.pid"),
			"--port=" + strconv.Itoa(port), "--bind-address=127.0.0.1",
			"--skip-networking=0", "--skip-name-resolve",
			"--init-file=" + init,
			"--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M",
			// Durable commits (the restart tests rely on them), without
			// forcing every write of the OS cache to the disk.
			"--innodb-flush-log-at-trx-commit=1", "--innodb-flush-method=O_DIRECT",
			"--innodb-doublewrite=0", "--skip-log-bin",
			"--performance-schema=0", "--max-connections=500",
			"--log-error=" + filepath.Join(base, "error.log"),
		},
	}
	if tlsHosts != nil {
		m.TLS = GenerateCertFor(t, base, tlsHosts...)
		m.args = append(m.args, "--ssl-ca="+m.TLS.CA, "--ssl-cert="+m.TLS.Cert, "--ssl-key="+m.TLS.Key)
	}
	m.args = append(m.args, serverArgs...)
	m.start(t)
	t.Cleanup(m.Kill)
	return m
}

// mariadbInitSQL runs at every start of the server (it must be idempotent).
const mariadbInitSQL = `
CREATE DATABASE IF NOT EXISTS ` + MariaDBDatabase + `;
CREATE USER IF NOT EXISTS '` + MariaDBUser + `'@'%' IDENTIFIED BY '` + MariaDBPassword + `';
GRANT ALL ON ` + MariaDBDatabase + `.* TO '` + MariaDBUser + `'@'%';
CREATE USER IF NOT EXISTS '` + MariaDBLimitedUser + `'@'%' IDENTIFIED BY '` + MariaDBLimitedPassword + `';
GRANT SELECT, INSERT, UPDATE, DELETE ON ` + MariaDBDatabase + `.* TO '` + MariaDBLimitedUser + `'@'%';
`

func (m *MariaDB) start(t testing.TB) {
	t.Helper()
	p, err := StartProcess("mariadbd", exec.Command(m.bin, m.args...), m.logs)
	if err != nil {
		t.Fatalf("testenv: start mariadbd: %v", err)
	}
	m.proc = p
	// The port opens only after recovery and the init file have run.
	if err := p.WaitTCP(m.Addr, 60*time.Second); err != nil {
		p.Kill()
		b, _ := os.ReadFile(filepath.Join(m.logs, "error.log"))
		t.Fatalf("testenv: %v\n%s", err, mariadbLogTail(b, 30))
	}
}

func mariadbLogTail(b []byte, n int) string {
	lines := 0
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			lines++
			if lines > n {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}

// DSN returns a go-sql-driver/mysql data source name for user on the test
// database.
func (m *MariaDB) DSN(user, password string) string {
	return fmt.Sprintf("%s:%s@tcp(%s)/%s", user, password, m.Addr, MariaDBDatabase)
}

// URL returns a mysql:// URL for user on the test database, at addr (the
// server's address, or a proxy's).
func (m *MariaDB) URL(user, password, addr string) string {
	return fmt.Sprintf("mysql://%s:%s@%s/%s", user, password, addr, MariaDBDatabase)
}

// Restart stops the server (SIGTERM, a clean shutdown) and starts it again
// on the same port with the same data.
func (m *MariaDB) Restart(t testing.TB) {
	t.Helper()
	m.proc.Stop(30 * time.Second)
	m.start(t)
}

// Crash kills the server with SIGKILL and starts it again on the same port
// with the same data: committed transactions must survive.
func (m *MariaDB) Crash(t testing.TB) {
	t.Helper()
	m.proc.Kill()
	m.start(t)
}

// Kill stops the server with SIGKILL.
func (m *MariaDB) Kill() { m.proc.Kill() }

// Pause freezes the server (SIGSTOP); Resume thaws it.
func (m *MariaDB) Pause() { m.proc.Pause() }

// Resume thaws a paused server (SIGCONT).
func (m *MariaDB) Resume() { m.proc.Resume() }
