package zklock

import (
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock/dlock"
)

// Option configures a Driver made by New.
type Option func(*Driver) error

// WithRoot sets the node under which lock parents live (default /dlock).
func WithRoot(path string) Option {
	return func(d *Driver) error {
		root, err := cleanRoot(path)
		if err != nil {
			return err
		}
		d.root = root
		return nil
	}
}

// WithACL sets the ACL of every node the driver creates (default
// zk.WorldACL(zk.PermAll)). The connection must carry the matching
// credentials (zk.Conn.AddAuth).
func WithACL(acl []zk.ACL) Option {
	return func(d *Driver) error {
		if len(acl) == 0 {
			return fmt.Errorf("%w: zklock.WithACL: the ACL is empty", dlock.ErrInvalidOption)
		}
		d.acl = acl
		return nil
	}
}

// WithSessionTimeout tells New the session timeout the server negotiated
// for its connection — the one asked of zk.Connect, when it lies within the
// server's minSessionTimeout..maxSessionTimeout. New needs it, because
// go-zookeeper does not expose it and the lease is derived from it (see
// the package documentation). Open, which makes its own connection, reads
// it from the handshake.
func WithSessionTimeout(d time.Duration) Option {
	return func(dr *Driver) error {
		if d <= 0 {
			return fmt.Errorf("%w: zklock.WithSessionTimeout(%v): must be positive", dlock.ErrInvalidOption, d)
		}
		dr.sessionTimeout.Store(int64(d))
		dr.minTTL = d
		return nil
	}
}
