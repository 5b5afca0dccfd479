package testenv

import (
	"fmt"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// RedisInstall is the command that installs redis-server.
const RedisInstall = "apt-get install -y redis-server"

// Redis is a redis-server started for a test.
type Redis struct {
	Addr string // 127.0.0.1:port
	Dir  string // working directory (AOF and RDB files)

	t    testing.TB
	bin  string
	args []string
	proc *Process
	runs int
}

// RedisOption configures StartRedis.
type RedisOption func(*redisConfig)

type redisConfig struct {
	password string
	users    [][]string
	aof      bool
}

// RedisPassword requires clients to authenticate as the default user with pw.
func RedisPassword(pw string) RedisOption {
	return func(c *redisConfig) { c.password = pw }
}

// RedisUser adds an ACL user with password pw and the given rules (for
// example "~*", "&*", "+@all"; nothing means no permissions).
func RedisUser(name, pw string, rules ...string) RedisOption {
	return func(c *redisConfig) { c.users = append(c.users, append([]string{name, "on", ">" + pw}, rules...)) }
}

// RedisAOF turns on the append-only file with appendfsync always, so that
// every acknowledged write survives a kill and Restart.
func RedisAOF() RedisOption {
	return func(c *redisConfig) { c.aof = true }
}

// StartRedis starts redis-server on a free loopback port in a temporary
// directory, by default without any persistence (no RDB snapshots, no
// AOF). It is killed when the test ends. A missing binary stops the test
// with Missing.
func StartRedis(t testing.TB, opts ...RedisOption) *Redis {
	t.Helper()
	var cfg redisConfig
	for _, o := range opts {
		o(&cfg)
	}
	bin := LookPath(t, "redis", RedisInstall, []string{"redis-server"})
	port := FreePort(t)
	r := &Redis{Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: t.TempDir(), t: t, bin: bin}
	r.args = []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", r.Dir,
		"--save", "", "--daemonize", "no", "--protected-mode", "no", "--loglevel", "notice",
	}
	if cfg.aof {
		r.args = append(r.args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		r.args = append(r.args, "--appendonly", "no")
	}
	if cfg.password != "" {
		r.args = append(r.args, "--requirepass", cfg.password)
	}
	for _, u := range cfg.users {
		r.args = append(append(r.args, "--user"), u...)
	}
	r.start()
	t.Cleanup(r.Kill)
	return r
}

func (r *Redis) start() {
	r.t.Helper()
	r.runs++ // a fresh log per run, so that WaitLog sees this run's lines
	p, err := StartProcess(fmt.Sprintf("redis-%d", r.runs), exec.Command(r.bin, r.args...), r.Dir)
	if err != nil {
		r.t.Fatalf("testenv: start redis-server: %v", err)
	}
	r.proc = p
	if err := p.WaitLog("Ready to accept connections", 20*time.Second); err != nil {
		p.Kill()
		r.t.Fatalf("testenv: %v", err)
	}
}

// Kill stops the server at once (SIGKILL): what it had not persisted is lost.
func (r *Redis) Kill() { r.proc.Kill() }

// Restart kills the server and starts it again on the same port and
// directory: with RedisAOF it comes back with every acknowledged write,
// without it empty.
func (r *Redis) Restart() {
	r.t.Helper()
	r.proc.Kill()
	r.start()
}

// Start starts a killed server again, as Restart does.
func (r *Redis) Start() {
	r.t.Helper()
	select {
	case <-r.proc.Exited():
	default:
		r.t.Fatalf("testenv: redis %s is still running", r.Addr)
	}
	r.start()
}

// Pause freezes the server (SIGSTOP): it keeps its connections and answers
// nothing. Resume thaws it.
func (r *Redis) Pause()  { r.proc.Pause() }
func (r *Redis) Resume() { r.proc.Resume() }

// String describes the server for test logs.
func (r *Redis) String() string {
	return fmt.Sprintf("redis-server at %s (pid %d)", r.Addr, r.proc.Cmd.Process.Pid)
}
