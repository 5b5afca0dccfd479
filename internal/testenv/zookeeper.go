package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// ZooKeeperInstall is the command that installs what StartZooKeeper needs.
const ZooKeeperInstall = "scripts/install-zookeeper.sh (apt-get install -y zookeeper default-jre-headless)"

// Debian's ZooKeeper: the server's jar names its dependencies in its
// manifest, so the jar alone is the class path; slf4j-simple (a dependency
// of the package) sends the server's log to stderr, hence to the log file.
const (
	zkJar         = "/usr/share/java/zookeeper.jar"
	zkLogBinding  = "/usr/share/java/slf4j-simple.jar"
	zkMain        = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
	zkStartWithin = 90 * time.Second // a JVM on a busy 2-core machine
)

// ZooKeeperOptions tunes a test deployment. The zero value is a good default.
type ZooKeeperOptions struct {
	// Tick is ZooKeeper's tickTime, its unit of time: a session timeout is
	// negotiated between 2 and 600 ticks. Default 200ms, so that sessions
	// in tests time out in seconds.
	Tick time.Duration
	// ContainerCheck is how often the server deletes empty container nodes
	// (znode.container.checkIntervalMs). Default 500ms; ZooKeeper's own
	// default is a minute.
	ContainerCheck time.Duration
	// NoSync turns off the fsync of the transaction log before each write
	// is acknowledged (forceSync=no): unsafe for data, but it takes the
	// disk out of benchmarks of client round trips.
	NoSync bool
	// SyncLimit is ZooKeeper's syncLimit, in ticks: how long a follower
	// goes without hearing from the leader before it gives the leader up
	// (and drops its clients), and the leader a follower. Default 10.
	SyncLimit int
	// PeerProxies routes the quorum and election traffic between the
	// servers of an ensemble through Proxies in the test process (each
	// server's zoo.cfg names the other servers by proxy addresses), so that
	// a test can cut one server off from the others with Isolate while its
	// clients still reach it.
	PeerProxies bool
	// Heap is the JVM's largest heap (-Xmx), e.g. "2g"; default 256m. A
	// benchmark that holds a million ephemeral nodes needs more.
	Heap string
}

// ZooKeeper is a ZooKeeper deployment started for a test: one standalone
// server, or an ensemble of servers on loopback, each with its own ports and
// data directory. It is stopped when the test that started it ends.
type ZooKeeper struct {
	Servers []*ZooKeeperServer
}

// ZooKeeperServer is one server of a deployment.
type ZooKeeperServer struct {
	ID   int    // myid, from 1
	Addr string // client address, 127.0.0.1:port

	java    string
	jvmArgs []string
	cfg     string // path of zoo.cfg
	logDir  string

	mu   sync.Mutex
	proc *Process

	links []*Proxy // with PeerProxies: its traffic to and from the other servers
}

// StartZooKeeper starts a standalone ZooKeeper server on a free loopback
// port with a temporary data directory.
func StartZooKeeper(t testing.TB, opts ZooKeeperOptions) *ZooKeeper {
	t.Helper()
	return startZooKeeper(t, 1, opts)
}

// StartZooKeeperEnsemble starts n servers (3 for a quorum that survives the
// loss of one) that form one ensemble on loopback, and waits until it serves.
func StartZooKeeperEnsemble(t testing.TB, n int, opts ZooKeeperOptions) *ZooKeeper {
	t.Helper()
	if n < 2 {
		t.Fatalf("testenv: an ensemble needs at least 2 servers, got %d", n)
	}
	return startZooKeeper(t, n, opts)
}

func startZooKeeper(t testing.TB, n int, opts ZooKeeperOptions) *ZooKeeper {
	t.Helper()
	java := LookPath(t, "zookeeper", ZooKeeperInstall, []string{"java"}, "/usr/lib/jvm/*/bin")
	if _, err := os.Stat(zkJar); err != nil {
		Missing(t, "zookeeper", ZooKeeperInstall, err)
	}
	if opts.Tick <= 0 {
		opts.Tick = 200 * time.Millisecond
	}
	if opts.ContainerCheck <= 0 {
		opts.ContainerCheck = 500 * time.Millisecond
	}
	if opts.SyncLimit <= 0 {
		opts.SyncLimit = 10
	}
	if opts.Heap == "" {
		opts.Heap = "256m"
	}
	cp := zkJar
	if _, err := os.Stat(zkLogBinding); err == nil {
		cp += ":" + zkLogBinding
	}
	jvmArgs := []string{
		"-Xmx" + opts.Heap, "-Xms32m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k",
		"-Djava.net.preferIPv4Stack=true",
		"-Dzookeeper.admin.enableServer=false",
		"-Dzookeeper.jmx.log4j.disable=true",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"-Dorg.slf4j.simpleLogger.log.org.apache.zookeeper.server.ZooKeeperServer=info",
		fmt.Sprintf("-Dznode.container.checkIntervalMs=%d", opts.ContainerCheck.Milliseconds()),
		"-cp", cp, zkMain,
	}

	type ports struct{ client, peer, election int }
	ps := make([]ports, n)
	for i := range ps {
		ps[i] = ports{FreePort(t), FreePort(t), FreePort(t)}
	}
	// addr[i][j] is the quorum and election address by which server i
	// reaches server j: j's own ports, or a proxy to them.
	type peerAddr struct{ peer, election string }
	addr := make([][]peerAddr, n)
	links := make([][]*Proxy, n)
	for i := range n {
		addr[i] = make([]peerAddr, n)
		for j, p := range ps {
			addr[i][j] = peerAddr{fmt.Sprintf("127.0.0.1:%d", p.peer), fmt.Sprintf("127.0.0.1:%d", p.election)}
			if !opts.PeerProxies || i == j {
				continue
			}
			pp, pe := NewProxy(t, addr[i][j].peer), NewProxy(t, addr[i][j].election)
			addr[i][j] = peerAddr{pp.Addr(), pe.Addr()}
			links[i] = append(links[i], pp, pe)
			links[j] = append(links[j], pp, pe)
		}
	}
	z := &ZooKeeper{}
	root := t.TempDir()
	for i := range n {
		id := i + 1
		dir := filepath.Join(root, fmt.Sprintf("zk%d", id))
		data := filepath.Join(dir, "data")
		if err := os.MkdirAll(data, 0o755); err != nil {
			t.Fatal(err)
		}
		var cfg strings.Builder
		fmt.Fprintf(&cfg, "tickTime=%d\ninitLimit=20\nsyncLimit=%d\n", opts.Tick.Milliseconds(), opts.SyncLimit)
		fmt.Fprintf(&cfg, "dataDir=%s\nclientPort=%d\nclientPortAddress=127.0.0.1\n", data, ps[i].client)
		// Sessions from 2 ticks up to 2 minutes; no per-address connection
		// limit (every test client comes from 127.0.0.1); no admin server;
		// the four-letter words tests use to find the leader.
		cfg.WriteString("maxSessionTimeout=120000\nmaxClientCnxns=0\nadmin.enableServer=false\n")
		cfg.WriteString("4lw.commands.whitelist=srvr,ruok,stat,mntr,cons,wchp,wchc\nautopurge.purgeInterval=0\n")
		if opts.NoSync {
			cfg.WriteString("forceSync=no\n")
		}
		if n > 1 {
			for j, a := range addr[i] {
				fmt.Fprintf(&cfg, "server.%d=%s:%s\n", j+1, a.peer, strings.TrimPrefix(a.election, "127.0.0.1:"))
			}
			if err := os.WriteFile(filepath.Join(data, "myid"), fmt.Appendf(nil, "%d\n", id), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cfgPath := filepath.Join(dir, "zoo.cfg")
		if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		z.Servers = append(z.Servers, &ZooKeeperServer{
			ID: id, Addr: fmt.Sprintf("127.0.0.1:%d", ps[i].client),
			java: java, jvmArgs: jvmArgs, cfg: cfgPath, logDir: dir, links: links[i],
		})
	}
	t.Cleanup(func() {
		for _, s := range z.Servers {
			s.Kill()
		}
	})
	for _, s := range z.Servers {
		if err := s.launch(); err != nil {
			t.Fatalf("testenv: start ZooKeeper %d: %v", s.ID, err)
		}
	}
	if err := z.waitServing(zkStartWithin); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return z
}

// Addrs returns the client addresses of all servers.
func (z *ZooKeeper) Addrs() []string {
	a := make([]string, len(z.Servers))
	for i, s := range z.Servers {
		a[i] = s.Addr
	}
	return a
}

// Restart stops every server (SIGKILL: as a crash, with only what the
// servers wrote to their transaction logs surviving) and starts them again
// on the same ports with the same data, and waits until they serve.
func (z *ZooKeeper) Restart(t testing.TB) {
	t.Helper()
	for _, s := range z.Servers {
		s.Kill()
	}
	for _, s := range z.Servers {
		if err := s.launch(); err != nil {
			t.Fatalf("testenv: restart ZooKeeper %d: %v", s.ID, err)
		}
	}
	if err := z.waitServing(zkStartWithin); err != nil {
		t.Fatalf("testenv: restart: %v", err)
	}
}

// Leader returns the server that leads the ensemble (the server itself for
// a standalone deployment), or nil if none does right now.
func (z *ZooKeeper) Leader() *ZooKeeperServer {
	for _, s := range z.Servers {
		switch s.Mode() {
		case "leader", "standalone":
			return s
		}
	}
	return nil
}

// waitServing waits until every running server serves clients: a
// standalone server, or a leader and followers that have formed a quorum.
func (z *ZooKeeper) waitServing(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, s := range z.Servers {
		p := s.process()
		if p == nil {
			continue
		}
		exited := false
		err := Poll(time.Until(deadline), func() error {
			select {
			case <-p.Exited():
				exited = true
				return Final(fmt.Errorf("ZooKeeper %d exited while starting\n%s", s.ID, p.Tail(30)))
			default:
			}
			if m := s.Mode(); m != "standalone" && m != "leader" && m != "follower" {
				return fmt.Errorf("mode %q", m)
			}
			return nil
		})
		if exited {
			return err
		}
		if err != nil {
			return fmt.Errorf("ZooKeeper %d on %s not serving within %v (%v)\n%s", s.ID, s.Addr, timeout, err, p.Tail(30))
		}
	}
	return nil
}

func (s *ZooKeeperServer) launch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		select {
		case <-s.proc.Exited():
		default:
			return errors.New("already running")
		}
	}
	args := append(append([]string(nil), s.jvmArgs...), s.cfg)
	p, err := StartProcess(fmt.Sprintf("zookeeper%d", s.ID), exec.Command(s.java, args...), s.logDir)
	if err != nil {
		return err
	}
	s.proc = p
	return nil
}

func (s *ZooKeeperServer) process() *Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// Start starts a stopped server again with its data and waits until it
// serves (in an ensemble: until it has rejoined a quorum).
func (s *ZooKeeperServer) Start(t testing.TB) {
	t.Helper()
	if err := s.launch(); err != nil {
		t.Fatalf("testenv: start ZooKeeper %d: %v", s.ID, err)
	}
	z := &ZooKeeper{Servers: []*ZooKeeperServer{s}}
	if err := z.waitServing(zkStartWithin); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// Kill stops the server with SIGKILL, as a crash.
func (s *ZooKeeperServer) Kill() {
	if p := s.process(); p != nil {
		p.Kill()
	}
}

// Stop stops the server with SIGTERM (a clean shutdown), or SIGKILL after
// ten seconds.
func (s *ZooKeeperServer) Stop() {
	if p := s.process(); p != nil {
		p.Stop(10 * time.Second)
	}
}

// Pause freezes the server (SIGSTOP): its sockets stay open but it answers
// nothing and its session timers stand still. Resume thaws it.
func (s *ZooKeeperServer) Pause() {
	if p := s.process(); p != nil {
		p.Pause()
	}
}

// Resume thaws a paused server.
func (s *ZooKeeperServer) Resume() {
	if p := s.process(); p != nil {
		p.Resume()
	}
}

// Isolate cuts the server off from the other servers of its ensemble, in
// both directions, while its clients still reach it: its connections to
// and from them fall silent, as in a network partition. It needs an
// ensemble started with PeerProxies. Rejoin ends it.
func (s *ZooKeeperServer) Isolate(t testing.TB) {
	t.Helper()
	if len(s.links) == 0 {
		t.Fatalf("testenv: ZooKeeper %d: Isolate needs an ensemble started with PeerProxies", s.ID)
	}
	for _, p := range s.links {
		p.Block()
	}
}

// Rejoin lets an isolated server's traffic to and from the other servers
// flow again.
func (s *ZooKeeperServer) Rejoin() {
	for _, p := range s.links {
		p.Unblock()
	}
}

// Log returns the last n lines of the server's log, for failure messages.
func (s *ZooKeeperServer) Log(n int) string {
	if p := s.process(); p != nil {
		return p.Tail(n)
	}
	return ""
}

// Mode asks the server with the four-letter word "srvr" what it is:
// "standalone", "leader" or "follower" while it serves, "" when it does not
// answer or does not serve yet.
func (s *ZooKeeperServer) Mode() string {
	out, _ := s.FourLetter("srvr")
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if m, ok := strings.CutPrefix(sc.Text(), "Mode: "); ok {
			return strings.TrimSpace(m)
		}
	}
	return ""
}

// FourLetter sends one of ZooKeeper's four-letter commands (srvr, ruok,
// stat, mntr, cons, wchp, wchc are enabled) and returns the answer.
func (s *ZooKeeperServer) FourLetter(cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}
