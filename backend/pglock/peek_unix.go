//go:build unix

package pglock

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// peekSocket looks, without reading or blocking, at what the server has
// sent on an idle connection: closed (EOF or an error), data waiting (an
// unsolicited message: usually the FATAL error of a session the server
// ended), or nothing. ok is false where it cannot tell.
func peekSocket(c net.Conn) (closed, data, ok bool) {
	if t, isTLS := c.(*tls.Conn); isTLS {
		c = t.NetConn()
	}
	sc, isSys := c.(syscall.Conn)
	if !isSys {
		return false, false, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, false, false
	}
	var (
		n    int
		rerr error
		buf  [1]byte
	)
	if err := rc.Read(func(fd uintptr) bool {
		n, _, rerr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true // one look; never wait for readiness
	}); err != nil {
		return true, false, true
	}
	switch {
	case errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK) || errors.Is(rerr, syscall.EINTR):
		return false, false, true
	case rerr != nil || n == 0:
		return true, false, true
	}
	return false, true, true
}
