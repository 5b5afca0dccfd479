package testenv

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EtcdPeers is the network between the members of an etcd cluster run on
// loopback: each member listens for its peers on one address (ListenAddr)
// and advertises another (AdvertiseAddr), where the test process accepts
// the other members' connections, tells from each connection's first HTTP
// request which member sent it (etcd's peer requests name their sender in
// the X-Server-From header), and forwards it through a Proxy of its own
// for that pair of members. Isolate then cuts one member off from the
// others in both directions while its clients still reach it.
//
// A peer request that names no sender — the lease renewals a follower
// forwards to the leader, version and health probes — cannot be told
// apart: it is cut on its way into an isolated member, but one an isolated
// follower sends to the leader still goes through, until the follower
// gives the leader up (one election timeout after the cut).
//
// It does not import etcd: the member IDs it matches senders against are
// computed as etcd computes the IDs of a new cluster's members (see
// MemberID), which a test should check against the running members.
type EtcdPeers struct {
	token   string
	members []*etcdPeer
}

type etcdPeer struct {
	listen    string // the member's own peer listener
	advertise string // where the others reach it: the front
	ln        net.Listener
	id        uint64
	from      []*Proxy // from[s]: what member s sends to this one; from[self]: requests naming no sender

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
}

// NewEtcdPeers prepares the peer network of an n-member cluster whose
// initial cluster token is token. Start member i listening for peers on
// ListenAddr(i), advertising AdvertiseAddr(i), with the initial cluster
// naming every member by its AdvertiseAddr. Everything is closed when the
// test ends.
func NewEtcdPeers(t testing.TB, n int, token string) *EtcdPeers {
	t.Helper()
	p := &EtcdPeers{token: token}
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testenv: etcd peer front: %v", err)
		}
		m := &etcdPeer{
			listen:    "127.0.0.1:" + strconv.Itoa(FreePort(t)),
			advertise: ln.Addr().String(),
			ln:        ln,
			conns:     map[net.Conn]struct{}{},
		}
		m.id = etcdMemberID("http://"+m.advertise, token)
		p.members = append(p.members, m)
	}
	for _, m := range p.members {
		for range n {
			m.from = append(m.from, NewProxy(t, m.listen))
		}
	}
	t.Cleanup(p.close)
	for _, m := range p.members {
		go p.accept(m)
	}
	return p
}

// etcdMemberID is the ID etcd gives a member of a new cluster
// (membership.computeMemberID): the first 8 bytes, big-endian, of the SHA-1
// of its sorted peer URLs followed by the cluster token.
func etcdMemberID(peerURL, token string) uint64 {
	h := sha1.Sum([]byte(peerURL + token))
	return binary.BigEndian.Uint64(h[:8])
}

// ListenAddr is where member i listens for its peers.
func (p *EtcdPeers) ListenAddr(i int) string { return p.members[i].listen }

// AdvertiseAddr is where the other members reach member i.
func (p *EtcdPeers) AdvertiseAddr(i int) string { return p.members[i].advertise }

// MemberID is the ID etcd gives member i when the cluster is created.
func (p *EtcdPeers) MemberID(i int) uint64 { return p.members[i].id }

// Isolate cuts member i off from the other members in both directions:
// their connections fall silent, as in a network partition. Rejoin ends it.
func (p *EtcdPeers) Isolate(i int) {
	for _, l := range p.links(i) {
		l.Block()
	}
}

// Rejoin lets member i's traffic to and from the others flow again.
func (p *EtcdPeers) Rejoin(i int) {
	for _, l := range p.links(i) {
		l.Unblock()
	}
}

// links returns the proxies that carry member i's traffic: everything into
// it, and what it sends to each other member.
func (p *EtcdPeers) links(i int) []*Proxy {
	ls := append([]*Proxy(nil), p.members[i].from...)
	for k, m := range p.members {
		if k != i {
			ls = append(ls, m.from[i])
		}
	}
	return ls
}

// sender returns the index of the member whose ID is the hex string id, or
// -1.
func (p *EtcdPeers) sender(id string) int {
	v, err := strconv.ParseUint(id, 16, 64)
	if err != nil {
		return -1
	}
	for i, m := range p.members {
		if m.id == v {
			return i
		}
	}
	return -1
}

func (p *EtcdPeers) accept(m *etcdPeer) {
	self := -1
	for i, o := range p.members {
		if o == m {
			self = i
		}
	}
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(m, self, c)
	}
}

// serve reads the head of the connection's first request to learn its
// sender, then forwards the connection through the proxy for that sender.
func (p *EtcdPeers) serve(m *etcdPeer, self int, c net.Conn) {
	if !m.track(c) {
		return
	}
	defer m.untrack(c)
	var head bytes.Buffer
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	tp := textproto.NewReader(bufio.NewReader(io.TeeReader(c, &head)))
	via := m.from[self]
	if _, err := tp.ReadLine(); err == nil {
		if h, err := tp.ReadMIMEHeader(); err == nil {
			if s := p.sender(h.Get("X-Server-From")); s >= 0 && s != self {
				via = m.from[s]
			}
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	up, err := net.DialTimeout("tcp", via.Addr(), 5*time.Second)
	if err != nil {
		return
	}
	if !m.track(up) {
		return
	}
	defer m.untrack(up)
	if _, err := up.Write(head.Bytes()); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

func (m *etcdPeer) track(c net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.done {
		c.Close()
		return false
	}
	m.conns[c] = struct{}{}
	return true
}

func (m *etcdPeer) untrack(c net.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c.Close()
	delete(m.conns, c)
}

func (p *EtcdPeers) close() {
	for _, m := range p.members {
		m.ln.Close()
		m.mu.Lock()
		m.done = true
		for c := range m.conns {
			c.Close()
		}
		m.mu.Unlock()
	}
}

// EtcdInstall is what makes the etcd server command buildable: the Go
// modules it needs, fetched by the Go toolchain.
const EtcdInstall = "scripts/install-etcd.sh"

// EtcdConfig configures an etcd server started by StartEtcd: the flags of
// internal/etcdserver/cmd/etcdserver.
type EtcdConfig struct {
	// Dir holds the server's data; "" is a temporary directory of the
	// test. A server started again on the same Dir keeps its revisions.
	Dir string
	// Name is the member's name; "" is etcd's default.
	Name string
	// ClientAddr and PeerAddr are the host:port clients and other members
	// connect to; "" picks a free loopback port.
	ClientAddr, PeerAddr string
	// PeerListenAddr is where the member listens for its peers when a
	// proxy stands in front of PeerAddr (see EtcdPeers); "" is PeerAddr.
	PeerListenAddr string
	// Cluster maps every member's name to its PeerAddr; nil starts a
	// single node.
	Cluster map[string]string
	// ClusterToken is the initial cluster token; "" is etcdserver's.
	ClusterToken string
	// Heartbeat and ElectionTimeout are raft's; 0 keeps etcd's defaults.
	Heartbeat, ElectionTimeout time.Duration
}

func (c EtcdConfig) args() []string {
	a := []string{"-dir", c.Dir, "-client", c.ClientAddr, "-peer", c.PeerAddr}
	if c.Name != "" {
		a = append(a, "-name", c.Name)
	}
	if c.PeerListenAddr != "" {
		a = append(a, "-peer-listen", c.PeerListenAddr)
	}
	if c.Cluster != nil {
		var ms []string
		for name, addr := range c.Cluster {
			ms = append(ms, name+"="+addr)
		}
		sort.Strings(ms)
		a = append(a, "-cluster", strings.Join(ms, ","))
	}
	if c.ClusterToken != "" {
		a = append(a, "-cluster-token", c.ClusterToken)
	}
	if c.Heartbeat > 0 {
		a = append(a, "-heartbeat", c.Heartbeat.String())
	}
	if c.ElectionTimeout > 0 {
		a = append(a, "-election-timeout", c.ElectionTimeout.String())
	}
	return a
}

// Etcd is an etcd server (a single node or one member of a cluster)
// running in a process of its own, started for a test and killed when it
// ends.
type Etcd struct {
	cfg  EtcdConfig
	bin  string
	logs string // a directory for the logs of its runs

	mu   sync.Mutex
	proc *Process
	runs int
}

// StartEtcd starts an etcd server and returns when it serves clients.
func StartEtcd(t testing.TB, cfg EtcdConfig) *Etcd {
	t.Helper()
	return StartEtcdMembers(t, []EtcdConfig{cfg})[0]
}

// StartEtcdMembers starts the members of one cluster concurrently (a
// member serves only once a quorum has started) and returns when all
// serve.
func StartEtcdMembers(t testing.TB, cfgs []EtcdConfig) []*Etcd {
	t.Helper()
	bin := etcdBinary(t)
	es := make([]*Etcd, len(cfgs))
	for i, cfg := range cfgs {
		if cfg.Dir == "" {
			cfg.Dir = t.TempDir()
		}
		if cfg.ClientAddr == "" {
			cfg.ClientAddr = "127.0.0.1:" + strconv.Itoa(FreePort(t))
		}
		if cfg.PeerAddr == "" {
			cfg.PeerAddr = "127.0.0.1:" + strconv.Itoa(FreePort(t))
		}
		es[i] = &Etcd{cfg: cfg, bin: bin, logs: t.TempDir()}
		t.Cleanup(es[i].Kill)
	}
	if err := StartEtcdAgain(es...); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return es
}

// StartEtcdCluster starts an n-member cluster on free loopback ports.
func StartEtcdCluster(t testing.TB, n int) []*Etcd {
	t.Helper()
	cfgs := make([]EtcdConfig, n)
	cluster := map[string]string{}
	for i := range cfgs {
		name := fmt.Sprintf("member%d", i)
		peer := "127.0.0.1:" + strconv.Itoa(FreePort(t))
		cfgs[i] = EtcdConfig{Name: name, PeerAddr: peer, Cluster: cluster}
		cluster[name] = peer
	}
	return StartEtcdMembers(t, cfgs)
}

// StartEtcdAgain starts stopped servers again, on their directories and
// ports, concurrently, and returns when all serve.
func StartEtcdAgain(es ...*Etcd) error {
	errs := make([]error, len(es))
	var wg sync.WaitGroup
	for i, e := range es {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.start()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (e *Etcd) start() error {
	e.mu.Lock()
	if e.proc != nil {
		select {
		case <-e.proc.Exited():
		default:
			e.mu.Unlock()
			return fmt.Errorf("etcd %s is still running", e.cfg.ClientAddr)
		}
	}
	e.runs++ // a fresh log per run, so that WaitLog sees this run's lines
	p, err := StartProcess(fmt.Sprintf("etcd-%d", e.runs), exec.Command(e.bin, e.cfg.args()...), e.logs)
	if err != nil {
		e.mu.Unlock()
		return fmt.Errorf("start etcd: %w", err)
	}
	e.proc = p
	e.mu.Unlock()
	if err := p.WaitLog("ready member-id=", 2*time.Minute); err != nil {
		p.Kill()
		return err
	}
	return nil
}

func (e *Etcd) process() *Process {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.proc
}

// Endpoints returns the host:port clients connect to.
func (e *Etcd) Endpoints() []string { return []string{e.cfg.ClientAddr} }

// URL returns the server's etcd:// URL, for dlock.Open.
func (e *Etcd) URL() string { return "etcd://" + e.cfg.ClientAddr }

// Config returns the server's configuration, its ports and Dir filled in.
func (e *Etcd) Config() EtcdConfig { return e.cfg }

// Stop stops the server as an operator would (SIGTERM), waiting for it to
// exit. Its data stays in Dir.
func (e *Etcd) Stop() { e.process().Stop(30 * time.Second) }

// Kill stops the server at once (SIGKILL); what etcd had acknowledged is
// on disk already.
func (e *Etcd) Kill() {
	if p := e.process(); p != nil {
		p.Kill()
	}
}

// Pause freezes the server (SIGSTOP): it keeps its connections and answers
// nothing. Resume thaws it.
func (e *Etcd) Pause() { e.process().Pause() }

// Resume thaws a paused server (SIGCONT).
func (e *Etcd) Resume() { e.process().Resume() }

var etcdBuild struct {
	once sync.Once
	bin  string
	err  error
}

// etcdBinary builds internal/etcdserver/cmd/etcdserver, once per test
// binary, and returns its path. The test binary's package lies in this
// repository: the command's module is found from the working directory up.
// The binary goes to a directory of the temp dir named for the checkout,
// so that test binaries of one checkout share it (go build leaves an
// up-to-date binary as it is) and those of another do not.
func etcdBinary(t testing.TB) string {
	t.Helper()
	etcdBuild.once.Do(func() { etcdBuild.bin, etcdBuild.err = buildEtcd() })
	if etcdBuild.err != nil {
		Missing(t, "etcd", EtcdInstall, etcdBuild.err)
	}
	return etcdBuild.bin
}

func buildEtcd() (string, error) {
	const cmdDir = "internal/etcdserver/cmd/etcdserver"
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if fi, err := os.Stat(filepath.Join(dir, cmdDir)); err == nil && fi.IsDir() {
			break
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("no %s above the working directory", cmdDir)
		}
		dir = up
	}
	sum := sha256.Sum256([]byte(dir))
	out := filepath.Join(os.TempDir(), fmt.Sprintf("dlock-etcdserver-%d-%x", os.Getuid(), sum[:6]))
	if err := os.MkdirAll(out, 0o755); err != nil {
		return "", err
	}
	// One build at a time per checkout: test binaries run in parallel.
	lock, err := os.OpenFile(filepath.Join(out, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	bin := filepath.Join(out, "etcdserver")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-C", filepath.Join(dir, "internal/etcdserver"), "-o", bin, "./cmd/etcdserver")
	if b, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", cmdDir, err, b)
	}
	return bin, nil
}
