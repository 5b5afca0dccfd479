// Package backendtest checks dlockotel's metrics and spans against real
// backends (etcd and Redis, started by internal/testenv), asserting their
// values. It is a module of its own so that dlockotel's module requires no
// engine's client.
package backendtest
