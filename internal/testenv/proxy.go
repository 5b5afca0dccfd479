package testenv

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy in the test process that stands between a client and
// a server on loopback, so a test can cut, freeze or slow the client's
// traffic without touching the server.
type Proxy struct {
	ln     net.Listener
	addr   string // ln's address, kept across Refuse and Admit
	target string

	mu      sync.Mutex
	blocked bool
	unblock chan struct{} // closed when traffic may flow again
	delay   time.Duration
	conns   map[net.Conn]struct{}
	closed  bool
	refused bool // Refuse: the listener is closed
}

// NewProxy listens on a free loopback port and forwards to target. It is
// closed when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := StartProxy(target)
	if err != nil {
		t.Fatalf("testenv: proxy to %s: %v", target, err)
	}
	t.Cleanup(p.Close)
	return p
}

// StartProxy is NewProxy without a test: the caller must call Close.
func StartProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, addr: ln.Addr().String(), target: target, conns: map[net.Conn]struct{}{}, unblock: make(chan struct{})}
	close(p.unblock)
	go p.accept(ln)
	return p, nil
}

// Addr is the host:port clients dial instead of the target.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(client, server) {
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(server, client) }()
	go func() { defer wg.Done(); p.pipe(client, server) }()
	wg.Wait()
	p.untrack(client, server)
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(p.conns, c)
	}
}

// pipe copies src to dst, holding data back while the proxy is blocked and
// delaying it while a delay is set.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			gate, delay := p.unblock, p.delay
			p.mu.Unlock()
			<-gate
			if delay > 0 {
				time.Sleep(delay)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				src.Close()
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			} else if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			return
		}
	}
}

// Block freezes all traffic through the proxy, in both directions, without
// closing connections: to the client the server has gone silent, as in a
// network partition.
func (p *Proxy) Block() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.blocked {
		p.blocked = true
		p.unblock = make(chan struct{})
	}
}

// Unblock lets held-back traffic flow again.
func (p *Proxy) Unblock() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blocked {
		p.blocked = false
		close(p.unblock)
	}
}

// SetDelay delays every chunk of data by d (0 to stop delaying).
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Cut closes every open connection through the proxy (new ones are still
// accepted).
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Refuse closes every open connection through the proxy and stops
// listening, until Admit: to the client the server is down and says so at
// once (connection refused), unlike Block's silence.
func (p *Proxy) Refuse() {
	p.mu.Lock()
	if p.refused || p.closed {
		p.mu.Unlock()
		return
	}
	p.refused = true
	p.ln.Close()
	p.mu.Unlock()
	p.Cut()
}

// Admit ends Refuse: the proxy listens again on the same address.
func (p *Proxy) Admit() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.refused || p.closed {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.refused, p.ln = false, ln
	go p.accept(ln)
	return nil
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	if p.blocked {
		p.blocked = false
		close(p.unblock)
	}
	ln := p.ln
	p.mu.Unlock()
	ln.Close()
	p.Cut()
}
