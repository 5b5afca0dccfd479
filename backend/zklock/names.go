package zklock

import (
	"strings"
)

// escapeName maps a lock name (any UTF-8 string of 1..1024 bytes) to one
// valid ZooKeeper path segment, collision-free: printable ASCII stays as it
// is, except '/' (the path separator), '%' (the escape character) and a
// leading '.' (so that the segment is never "." or ".."); every other byte —
// control characters, NUL, DEL and each byte of a non-ASCII character — is
// written %XX in upper-case hex. Decoding is unambiguous because every '%' in
// the result starts an escape, so distinct names give distinct segments.
// The longest result is 3072 bytes, well within ZooKeeper's limits.
func escapeName(name string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(name))
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 0x20 && c < 0x7f && c != '/' && c != '%' && (c != '.' || i > 0) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
	return b.String()
}

// unescapeName reverses escapeName. It reports false for a segment that
// escapeName cannot have produced (a node that is not a lock of ours).
func unescapeName(seg string) (string, bool) {
	var b strings.Builder
	b.Grow(len(seg))
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(seg) {
			return "", false
		}
		hi, ok1 := unhex(seg[i+1])
		lo, ok2 := unhex(seg[i+2])
		if !ok1 || !ok2 {
			return "", false
		}
		b.WriteByte(hi<<4 | lo)
		i += 2
	}
	name := b.String()
	if name == "" || escapeName(name) != seg {
		return "", false
	}
	return name, true
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
