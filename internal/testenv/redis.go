package testenv

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// RedisInstall is the command that installs redis-server.
const RedisInstall = "apt-get install -y redis-server"

// Redis is a redis-server started for a test.
type Redis struct {
	Addr string   // 127.0.0.1:port
	Dir  string   // working directory (AOF and RDB files)
	TLS  TLSFiles // with RedisTLS: the server's certificate and its CA

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
	tls      bool
	args     []string // more redis-server arguments
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

// RedisTLS makes the server accept TLS connections only, with a
// certificate for 127.0.0.1 and localhost signed by a throwaway CA (see
// Redis.CA). Clients need not present a certificate.
func RedisTLS() RedisOption {
	return func(c *redisConfig) { c.tls = true }
}

// RedisArgs passes more arguments to redis-server, for example
// "--maxmemory-policy", "allkeys-lru".
func RedisArgs(args ...string) RedisOption {
	return func(c *redisConfig) { c.args = append(c.args, args...) }
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
	if cfg.tls {
		r.TLS = GenerateCert(t, r.Dir)
		r.args[1] = "0" // no plain-text port
		r.args = append(r.args, "--tls-port", strconv.Itoa(port),
			"--tls-cert-file", r.TLS.Cert, "--tls-key-file", r.TLS.Key, "--tls-ca-cert-file", r.TLS.CA,
			"--tls-auth-clients", "no")
	}
	r.args = append(r.args, cfg.args...)
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

// RedisCluster is a Redis Cluster of masters without replicas, started for
// a test.
type RedisCluster struct {
	Nodes []*Redis
}

// Addrs are the masters' addresses.
func (c *RedisCluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// StartRedisCluster starts n (at least 3) redis-server masters with
// cluster mode on, each on a free loopback port (and a free cluster bus
// port) in a temporary directory, joins them with redis-cli --cluster
// create, which spreads the 16384 slots evenly, and waits until every
// node reports cluster_state:ok. The servers are killed when the test
// ends.
func StartRedisCluster(t testing.TB, n int, opts ...RedisOption) *RedisCluster {
	t.Helper()
	cli := LookPath(t, "redis", RedisInstall, []string{"redis-cli"})
	c := &RedisCluster{}
	for range n {
		node := append(slices.Clone(opts), RedisArgs("--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", // in the node's own directory
			"--cluster-port", strconv.Itoa(FreePort(t)), "--cluster-node-timeout", "5000"))
		c.Nodes = append(c.Nodes, StartRedis(t, node...))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append(append([]string{"--cluster", "create"}, c.Addrs()...), "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("testenv: redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, node := range c.Nodes {
		host, port, _ := net.SplitHostPort(node.Addr)
		for {
			out, err := exec.CommandContext(ctx, cli, "-h", host, "-p", port, "cluster", "info").CombinedOutput()
			if err == nil && strings.Contains(string(out), "cluster_state:ok") {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("testenv: redis cluster node %s not ok within a minute: %v\n%s", node.Addr, err, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return c
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
func (r *Redis) Pause() { r.proc.Pause() }

// Resume thaws a paused server (SIGCONT).
func (r *Redis) Resume() { r.proc.Resume() }

// String describes the server for test logs.
func (r *Redis) String() string {
	return fmt.Sprintf("redis-server at %s (pid %d)", r.Addr, r.proc.Cmd.Process.Pid)
}

// CommandCalls returns the number of commands the server has executed —
// the sum of the calls in INFO commandstats, which counts the commands a
// Lua script runs as well as those clients send — excluding INFO itself.
func (r *Redis) CommandCalls(t testing.TB) int64 {
	t.Helper()
	c, err := net.DialTimeout("tcp", r.Addr, 5*time.Second)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("INFO commandstats\r\n")); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	rd := bufio.NewReader(c)
	head, err := rd.ReadString('\n')
	if err != nil || !strings.HasPrefix(head, "$") {
		t.Fatalf("testenv: INFO commandstats: %q %v", head, err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(head[1:]))
	body := make([]byte, n+2)
	if _, err := io.ReadFull(rd, body); err != nil {
		t.Fatalf("testenv: INFO commandstats: %v", err)
	}
	var total int64
	for _, line := range strings.Split(string(body), "\r\n") {
		// cmdstat_get:calls=1,usec=2,...
		cmd, rest, ok := strings.Cut(line, ":calls=")
		if !ok || cmd == "cmdstat_info" {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		k, _ := strconv.ParseInt(calls, 10, 64)
		total += k
	}
	return total
}

// Contention is the outcome of Contend.
type Contention struct {
	Grants    int             // locks granted
	Changes   int             // grants that went to another worker than the previous grant
	PerWorker []int           // grants per worker
	Waits     []time.Duration // from calling lock to being granted, per grant
	Errors    int             // lock calls that failed (gave up)
	Elapsed   time.Duration
}

// Fairness is the fewest grants of a worker divided by the most.
func (c Contention) Fairness() float64 {
	lo, hi := c.PerWorker[0], c.PerWorker[0]
	for _, n := range c.PerWorker {
		lo, hi = min(lo, n), max(hi, n)
	}
	if hi == 0 {
		return 0
	}
	return float64(lo) / float64(hi)
}

// WaitQuantile returns the q-quantile (0..1) of the waits.
func (c Contention) WaitQuantile(q float64) time.Duration {
	if len(c.Waits) == 0 {
		return 0
	}
	w := slices.Clone(c.Waits)
	slices.Sort(w)
	return w[min(int(q*float64(len(w))), len(w)-1)]
}

// Contend runs the contended-lock scenario of the Redis benchmarks: each
// worker, in a loop, takes the one lock (lock blocks until granted and
// returns the unlock), holds it for hold, and releases it, until grants
// locks have been granted in all or duration has passed.
func Contend(workers []func(context.Context) (unlock func(), err error), grants int, hold, duration time.Duration) Contention {
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var mu sync.Mutex
	res := Contention{PerWorker: make([]int, len(workers))}
	last := -1
	start := time.Now()
	var wg sync.WaitGroup
	for i, lock := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				t0 := time.Now()
				unlock, err := lock(ctx)
				if err != nil {
					mu.Lock()
					if ctx.Err() == nil {
						res.Errors++
					}
					mu.Unlock()
					continue
				}
				waited := time.Since(t0)
				mu.Lock()
				done := res.Grants >= grants
				if !done {
					res.Grants++
					res.PerWorker[i]++
					res.Waits = append(res.Waits, waited)
					if last != i {
						res.Changes++
					}
					last = i
				}
				mu.Unlock()
				if done {
					unlock()
					cancel()
					return
				}
				time.Sleep(hold)
				unlock()
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res
}
