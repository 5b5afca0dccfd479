package zklock

import (
	"encoding/binary"
	"net"
	"time"
)

// dial connects to one server and notes the session timeout that the
// server's handshake reply negotiates (go-zookeeper does not expose it).
func (d *Driver) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return &handshakeConn{Conn: c, d: d}, nil
}

// handshakeConn reads the session timeout from the first reply on a new
// connection: the connect response, which starts with its length, the
// protocol version and the negotiated timeout in milliseconds (int32s, big
// endian). It also bounds the wait for that reply (see SetReadDeadline).
type handshakeConn struct {
	net.Conn
	d    *Driver
	n    int
	head [12]byte
}

// SetReadDeadline shortens the wait for the first byte of the handshake's
// reply to two thirds of the session timeout: the limit go-zookeeper puts
// on a silent established connection, where for the handshake it allows
// ten times that. A ZooKeeper server that is starting up can accept a
// connection and never answer its handshake; waiting ten times longer on
// it outlasts the session (a restarted server expires the restored sessions
// whose clients do not come back within their timeout) and stalls every
// lock of the driver for that long, when trying again would have reached
// the server as soon as it serves.
func (c *handshakeConn) SetReadDeadline(t time.Time) error {
	if c.n == 0 && !t.IsZero() {
		if limit := time.Now().Add(c.d.session() * 2 / 3); t.After(limit) {
			t = limit
		}
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *handshakeConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.n < len(c.head) && n > 0 {
		c.n += copy(c.head[c.n:], p[:n])
		if c.n == len(c.head) {
			if ms := int32(binary.BigEndian.Uint32(c.head[8:12])); ms > 0 {
				c.d.sessionTimeout.Store(int64(time.Duration(ms) * time.Millisecond))
			}
		}
	}
	return n, err
}
