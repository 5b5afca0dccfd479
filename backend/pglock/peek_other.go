//go:build !unix

package pglock

import "net"

// peekSocket cannot look at a socket on this platform: the holder of a
// session lock learns of its session's end at its next renewal.
func peekSocket(net.Conn) (closed, data, ok bool) { return false, false, false }
