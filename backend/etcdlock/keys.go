package etcdlock

import (
	"encoding/binary"
	"encoding/hex"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlock/dlock/driver"
)

// Key layout. A lock name maps to a key prefix; each acquirer of the lock
// puts one key under it, named by the ID of the lease it is attached to
// (16 hex digits), as etcd's concurrency.Mutex names its keys:
//
//	<prefix><escaped name>/<lease ID>
//
// A lease carries at most one acquire at a time (the driver's lease pool
// hands each lease to one acquirer), so the key is unique among the live
// keys of the name. A client that locks a name again with the same pooled
// lease writes the same key again. That matters to the server: etcd keeps
// every deleted key in its index until the next compaction, and the range
// read over the name's prefix in each acquire walks all of them, so a key
// name per acquire (the owner key) would make every acquire cost more the
// more locks of the name were taken since the last compaction.
//
// The escaped name is the name with '%', '/' and the ASCII control bytes
// (0x00-0x1F, 0x7F) written as "%XX" (two upper-case hex digits); every other
// byte, including the bytes of multi-byte UTF-8 characters, is kept as it
// is. Each byte maps to a fixed string and no such string is a prefix of
// another, so the mapping is injective (no two names share a key prefix),
// and escape(p) is a prefix of escape(n) exactly when p is a prefix of n — which lets List find all names with a prefix by one
// key-range read. Because an escaped name never contains '/', the '/' after
// it ends it: the keys of "a" and of "a/b" never mix.

// keepInKey reports the bytes a name keeps as they are in its key; '%', '/'
// and the ASCII control bytes are escaped (see driver.EscapeName). It does
// not depend on the position, so the mapping keeps prefixes.
func keepInKey(_ int, c byte) bool { return c != '/' && c >= 0x20 && c != 0x7f }

// escapeName returns the key form of a lock name (or of a prefix of one).
func escapeName(name string) string { return driver.EscapeName(name, keepInKey) }

// unescapeName inverts escapeName; ok is false for a string escapeName
// cannot have produced.
func unescapeName(s string) (name string, ok bool) { return driver.UnescapeName(s, keepInKey) }

// namePrefix is the key prefix under which the queue of lock name lives:
// in compat=etcdctl, the name itself and "/", as concurrency.NewMutex
// makes it.
func (d *Driver) namePrefix(name string) string {
	if d.compat == CompatEtcdctl {
		return name + "/"
	}
	return d.prefix + escapeName(name) + "/"
}

// lockKey is the key an acquirer holding lease puts in the queue of name.
func (d *Driver) lockKey(name string, lease clientv3.LeaseID) string {
	if d.compat == CompatEtcdctl {
		return mutexKey(d.namePrefix(name), lease)
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(lease))
	return d.namePrefix(name) + hex.EncodeToString(b[:])
}

// splitKey parses a key of the layout above into the lock name and the
// acquirer's part (a lease ID; older versions wrote an owner key there);
// ok is false for keys under the prefix that dlock did not write.
func (d *Driver) splitKey(key string) (name, owner string, ok bool) {
	rest, found := strings.CutPrefix(key, d.prefix)
	if !found {
		return "", "", false
	}
	esc, owner, found := strings.Cut(rest, "/")
	if !found || owner == "" || strings.ContainsRune(owner, '/') {
		return "", "", false
	}
	name, ok = unescapeName(esc)
	return name, owner, ok && name != ""
}
