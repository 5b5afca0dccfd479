package zklock

import (
	"github.com/dlock/dlock/driver"
)

// escapeName maps a lock name (any UTF-8 string of 1..1024 bytes) to one
// valid ZooKeeper path segment, collision-free: printable ASCII stays as it
// is, except '/' (the path separator), '%' (the escape character) and a
// leading '.' (so that the segment is never "." or ".."); every other byte —
// control characters, NUL, DEL and each byte of a non-ASCII character — is
// written %XX in upper-case hex. Decoding is unambiguous because every '%' in
// the result starts an escape, so distinct names give distinct segments.
// The longest result is 3072 bytes, well within ZooKeeper's limits.
func escapeName(name string) string { return driver.EscapeName(name, keepInSegment) }

// keepInSegment reports the bytes a name keeps as they are in its path
// segment.
func keepInSegment(i int, c byte) bool {
	return c >= 0x20 && c < 0x7f && c != '/' && (c != '.' || i > 0)
}

// unescapeName reverses escapeName. It reports false for a segment that
// escapeName cannot have produced (a node that is not a lock of ours).
func unescapeName(seg string) (string, bool) { return driver.UnescapeName(seg, keepInSegment) }
