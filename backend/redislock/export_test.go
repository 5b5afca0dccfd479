package redislock

// WithoutHandoff makes a driver over a single server behave as it does on
// Redis Cluster: releases wake the first fair waiter instead of handing it
// the lock.
func WithoutHandoff() Option { return set(func(d *Driver) { d.noHandoff = true }) }

// KeyspaceEvents reports whether the driver listens for keyspace events
// (compat=setnx) rather than polling.
func (d *Driver) KeyspaceEvents() bool { return d.keyspace }
