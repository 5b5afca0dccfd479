// Package etcdserver runs an etcd server inside the calling process: the
// single node behind "dlock dev", the throwaway backend of "dlock demo" and
// "dlock bench", and the servers of the fault verification and the
// benchmarks. It is a module of its own so that etcd's server (and the
// gRPC, OpenTelemetry and protobuf versions it requires) stays out of the
// module graph of programs that only use the etcd client backend,
// github.com/dlock/dlock/backend/etcdlock. Its command, cmd/etcdserver,
// runs one in a process of its own, as the etcdlock tests do.
package etcdserver
