package main

import (
	"context"

	"github.com/dlock/dlock/internal/etcdserver"
)

// embeddedNode is a single-node etcd server inside this process: what
// "dlock dev" serves, and the throwaway default backend of demo and bench.
type embeddedNode interface {
	// URL is the etcd:// URL that dlock.Open takes, in this process or others.
	URL() string
	Close() error
}

// startEmbedded starts a node with its data in dir, serving clients on
// listen (host:port; "" picks a free loopback port). With a password, it
// refuses clients that do not log in as root with it, and URL carries the
// credential. Its log is discarded.
func startEmbedded(ctx context.Context, dir, listen, password string) (embeddedNode, error) {
	return etcdserver.Start(ctx, etcdserver.Config{Dir: dir, ClientAddr: listen, RootPassword: password})
}
