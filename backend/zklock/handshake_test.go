package zklock

import (
	"io"
	"net"
	"sync"
	"testing"

	"github.com/dlock/dlock/internal/testenv"
)

// silentFirst listens on loopback and forwards connections to target,
// except the first, which it accepts and never answers: a server that took
// the connection while starting up and will not reply to its handshake.
func silentFirst(t *testing.T, target string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for n := 0; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			if n == 0 {
				continue // silent: never read, never answered, never closed
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, s)
			mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// TestSilentServerDoesNotStallTheHandshake: a server that accepts a
// connection and never answers the session handshake (as a restarting
// ZooKeeper may, for a connection it accepted while starting) must be given
// up after two thirds of the session timeout, the limit go-zookeeper applies
// to an established connection — not after ten times that, its own limit for
// the handshake, by which time the session has expired and the locks of a
// restarted ensemble stay stalled.
func TestSilentServerDoesNotStallTheHandshake(t *testing.T) {
	z := testenv.StartZooKeeper(t, testenv.ZooKeeperOptions{})
	addr := silentFirst(t, z.Addrs()[0])
	// Open waits for a session for three session timeouts: enough with a
	// handshake that gives up in time, not with one that waits ten times
	// two thirds of the session timeout.
	d := openURL(t, zkURL([]string{addr}, "/handshake", "session_timeout="+testSession.String()+"&connect_timeout="+(3*testSession).String()))
	l := mustLock(t, client(t, d), "x")
	mustUnlock(t, l)
}
