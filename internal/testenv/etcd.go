package testenv

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/binary"
	"io"
	"net"
	"net/textproto"
	"strconv"
	"sync"
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
