package zklock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/go-zookeeper/zk"

	"github.com/dlock/dlock/driver"
)

// Compat layouts: the lock recipes of other libraries whose nodes dlock
// writes and reads with ?compat= (see the package documentation).
const (
	Kazoo   = "kazoo"   // kazoo's Lock: <path>/<guid>__lock__<seq>
	Curator = "curator" // Curator's InterProcessMutex: <path>/_c_<guid>-lock-<seq>
)

// Layouts lists the values of ?compat=.
var Layouts = []string{Kazoo, Curator}

// kazooMarker is kazoo's Lock._NODE_NAME: what comes between the
// contender's GUID and the sequence.
const kazooMarker = "__lock__"

// compatPath checks a lock name that is a foreign recipe's lock path: an
// absolute ZooKeeper path, not "/", without an empty, "." or ".." segment,
// a trailing "/", or a character ZooKeeper refuses in paths, and not under
// /zookeeper.
func compatPath(name string) (string, error) {
	bad := func(rule string) (string, error) {
		return "", fmt.Errorf("%w: %q: with compat, the lock name is the lock path given to the other library, and %s", driver.ErrInvalidName, name, rule)
	}
	if !strings.HasPrefix(name, "/") || name == "/" || strings.HasSuffix(name, "/") {
		return bad(`must be an absolute ZooKeeper path such as /locks/orders, not "/" and without a trailing "/"`)
	}
	for _, seg := range strings.Split(name[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return bad(`must not have an empty, "." or ".." segment`)
		}
	}
	if name == "/zookeeper" || strings.HasPrefix(name, "/zookeeper/") {
		return bad("must not be under /zookeeper, the server's own node")
	}
	for _, r := range name {
		// The characters ZooKeeper's PathUtils.validatePath refuses.
		if r == 0 || r < 0x20 || (r >= 0x7f && r <= 0x9f) || (r >= 0xd800 && r <= 0xf8ff) || (r >= 0xfff0 && r <= 0xffff) || r == utf8.RuneError {
			return bad(fmt.Sprintf("must not contain %U, which ZooKeeper refuses in paths", r))
		}
	}
	return name, nil
}

// nodePrefix is the start of the name of a node created with guid, before
// the sequence the server appends.
func (d *Driver) nodePrefix(guid string) string {
	switch d.compat {
	case Kazoo:
		return guid + kazooMarker
	default: // Curator's protected mode, which is dlock's own layout too
		return protectedPrefix + guid + lockMarker
	}
}

// newGUID returns a contender's GUID, in the form the layout's own clients
// write: kazoo's uuid4().hex (32 hex digits), Curator's UUID.toString()
// (36 characters). In a compat layout the GUID is an RFC 9562 version-8
// UUID, which neither kazoo nor Curator makes (both make version 4): that
// is how Inspect tells dlock's contenders from foreign ones.
func (d *Driver) newGUID() string {
	if d.compat == "" {
		return driver.NewNonce()
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x80 // version 8
	b[8] = b[8]&0x3f | 0x80 // variant 10
	h := hex.EncodeToString(b[:])
	if d.compat == Kazoo {
		return h
	}
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// isDlocks reports whether a lock node of a compat layout was created by
// dlock (see newGUID).
func (d *Driver) isDlocks(node string) bool {
	switch d.compat {
	case Kazoo:
		return len(node) > 32 && node[12] == '8' && strings.HasPrefix(node[32:], kazooMarker)
	case Curator:
		return len(node) > 39 && strings.HasPrefix(node, protectedPrefix) && node[3+14] == '8' && node[39] == '-'
	}
	return true
}

// queue returns the contenders among a lock's children, first the holder,
// in the order of the driver's layout.
func (d *Driver) queue(kids []string) []queued {
	switch d.compat {
	case Kazoo:
		return kazooQueue(kids)
	case Curator:
		return curatorQueue(kids)
	}
	return queueOf(kids)
}

// kazooQueue orders children as kazoo's Lock does (_get_predecessor): the
// contenders are the children whose name ends in "__lock__" and a sequence
// of ten digits (with an optional minus sign: the regular expression
// (?:__lock__)(-?\d{10})$), sorted by that sequence as a string. Lock's and
// WriteLock's nodes both end so; ReadLock's "__rlock__" nodes are not
// contenders for a Lock, nor for dlock.
func kazooQueue(kids []string) []queued {
	q := make([]queued, 0, len(kids))
	for _, k := range kids {
		i := strings.LastIndex(k, kazooMarker)
		if i < 0 {
			continue
		}
		seq := k[i+len(kazooMarker):]
		if !isSequence(seq) {
			continue
		}
		q = append(q, queued{name: k, key: seq})
	}
	slices.SortStableFunc(q, func(a, b queued) int { return strings.Compare(a.key, b.key) })
	return q
}

// curatorQueue orders children as InterProcessMutex does
// (LockInternals.getSortedChildren with StandardLockInternalsDriver): every
// child is a contender, sorted as a string by what follows the last
// "lock-" in its name, or by its whole name if it has none.
func curatorQueue(kids []string) []queued {
	const lockName = "lock-"
	q := make([]queued, 0, len(kids))
	for _, k := range kids {
		key := k
		if i := strings.LastIndex(k, lockName); i >= 0 {
			key = k[i+len(lockName):]
		}
		q = append(q, queued{name: k, key: key})
	}
	slices.SortStableFunc(q, func(a, b queued) int { return strings.Compare(a.key, b.key) })
	return q
}

// isContender reports whether a child's name is a lock node of the
// layout, for List, which must tell lock paths from the other nodes of the
// application's tree: kazoo's contenders (see kazooQueue), or, for Curator,
// a name that ends in "lock-" and a ten-digit sequence (InterProcessMutex
// itself counts every child of a lock path as a contender).
func (d *Driver) isContender(name string) bool {
	if d.compat == Kazoo {
		return len(kazooQueue([]string{name})) == 1
	}
	i := strings.LastIndex(name, lockMarker)
	return i >= 0 && isSequence(name[i+len(lockMarker):])
}

// isSequence reports ten digits, with an optional minus sign: a sequence
// as ZooKeeper appends it (%010d).
func isSequence(s string) bool {
	digits := strings.TrimPrefix(s, "-")
	return len(digits) == 10 && strings.Trim(digits, "0123456789") == ""
}

// foreignHolder is the holder metadata Inspect reports for a contender of
// another library: its data (kazoo's identifier, Curator's client address)
// as a note.
func foreignHolder(compat string, data []byte) []byte {
	b, _ := json.Marshal(struct {
		Note string `json:"note"`
	}{fmt.Sprintf("%s contender %q: not dlock, no fencing token", compat, data)})
	return b
}

// makePath creates path and its missing ancestors, as the layout's own
// clients do: kazoo's ensure_path makes persistent nodes, Curator's
// creatingParentContainersIfNeeded container nodes.
func (d *Driver) makePath(ctx context.Context, path string, flags int32) error {
	for i := 1; i <= len(path); i++ {
		if i < len(path) && path[i] != '/' {
			continue
		}
		_, err := roundTrip(ctx, d, func() (string, error) {
			if flags == zk.FlagContainer {
				return d.conn.CreateContainer(path[:i], nil, flags, d.acl)
			}
			return d.conn.Create(path[:i], nil, flags, d.acl)
		})
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	return nil
}
