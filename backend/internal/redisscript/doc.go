// Package redisscript holds what the Redis and Redlock backends share: the
// key layout of a lock, the Lua scripts that act on it, the lock value's
// encoding, and the pub/sub hub that wakes waiters.
//
// # Keys
//
// Every key of one lock shares a Redis Cluster hash tag, so that a script
// touching several of them runs on one node:
//
//	<prefix>:{<tag>}:lock     the lock: "<owner><sep><token> <len(name)> <name><holder>", with PX; sep " " or "+";
//	                          after a hand-off "<token>/<last>", last the end of the reserved block of tokens (see queue.lua);
//	                          while readers hold a read-write lock, the readers' mark, owner "readers" (see permits.lua)
//	<prefix>:{<tag>}:fence    the fence counter (no TTL)
//	<prefix>:{<tag>}:queue    fair mode: waiter owner keys in arrival order
//	<prefix>:{<tag>}:waiter:<owner>  a queued waiter's entry, "<ttl ms> <process channel> <len(name)> <name><holder>",
//	                          with PX = the waiter TTL, renewed by its heartbeat (it is live while the key exists; see queue.lua)
//	<prefix>:{<tag>}:wake     the pub/sub channel releases publish on
//	<prefix>:{<tag>}:permits  a semaphore's permits or a read-write lock's readers (redislock only): owner -> expiry in ms by the server's clock, a sorted set
//	<prefix>:{<tag>}:holders  their owner -> "<token> <holder>"; "" -> name; on Redlock nodes
//	                          owner -> "<token> <slot> <holder>" and "#<slot>" -> owner (see slots.lua)
//
// and, not tied to a lock, one channel per driver (process) that fair
// hand-offs are published on: <prefix>:proc:<random>; and, on Redlock
// nodes only, <prefix>:fence-state, which says whether the node's fence
// counters are complete (see package redlock).
//
// In the SetNX layout (compat=setnx, see setnx.go) the lock key is the
// name itself, and the other keys are <prefix>:setnx:fence:<name> and
// the channel <prefix>:setnx:wake:<name> (the queue keys are named alike
// but never written: that layout has no queue).
//
// tag is driver.NameHash(name): the first 128 bits of SHA-256(name) in hex. A lock name is any
// UTF-8 string of up to 1024 bytes, including "{", "}" and NUL, none of
// which may appear in a hash tag; the hash maps each name to a fixed-size
// tag, collision-free for practical purposes (a collision among 2^64 names
// is about as likely as not). The name itself is stored in the lock value
// and the waiters' entries (and a semaphore's holders hash), so List can
// report it.
package redisscript
