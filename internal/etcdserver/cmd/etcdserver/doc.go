// Command etcdserver runs one etcd server (a single node, or one member of
// a cluster) until SIGTERM or SIGINT, with its warnings on stderr. It is
// how the tests of github.com/dlock/dlock/backend/etcdlock start etcd
// (internal/testenv builds it once per test binary): in a process of its
// own, like every other engine, which a test stops, kills or freezes by
// PID, and without etcd's server in the etcdlock module's requirements.
//
// Once the server serves clients it prints one line to stdout:
//
//	ready member-id=<hex>
package main
