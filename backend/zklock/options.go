package zklock

import (
	"fmt"
	"slices"
	"strings"
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

// WithCompat makes the driver write and read the lock nodes of another
// library's lock recipe: Kazoo (kazoo's Lock) or Curator (Curator's
// InterProcessMutex). Lock names are then that recipe's lock paths,
// verbatim, and WithRoot does not apply. See the package documentation.
func WithCompat(layout string) Option {
	return func(d *Driver) error {
		if !slices.Contains(Layouts, layout) {
			return fmt.Errorf("%w: zklock.WithCompat(%q): want one of %s", dlock.ErrInvalidOption, layout, strings.Join(Layouts, ", "))
		}
		d.compat = layout
		return nil
	}
}
