package driver

import (
	"crypto/sha256"
	"encoding/hex"
)

// NameHash returns a fixed-length digest of a lock name for backends whose
// key space is narrower than dlock's names (MySQL's 64-character lock names,
// workflow IDs, advisory-lock keys): the first 128 bits of its SHA-256, as
// 32 hex digits. Distinct names collide with probability about n²/2¹²⁹ for n
// names — never, for practical purposes.
func NameHash(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:16])
}

// EscapeName writes a lock name as a key for an engine whose key space is
// narrower than dlock's names: '%' and every byte for which keep(i, c) is
// false (c is the byte at index i of name) become "%XX", in upper-case hex;
// all other bytes stay as they are. Every '%' in the result starts an
// escape, so distinct names give distinct keys. If keep does not depend on
// i, the mapping also keeps prefixes: EscapeName(p) is a prefix of
// EscapeName(n) exactly when p is a prefix of n, so a range read of a
// prefix's key finds every name with that prefix.
func EscapeName(name string, keep func(i int, c byte) bool) string {
	const hexDigits = "0123456789ABCDEF"
	n := 0
	for i := 0; i < len(name); i++ {
		if c := name[i]; c == '%' || !keep(i, c) {
			n++
		}
	}
	if n == 0 {
		return name
	}
	b := make([]byte, 0, len(name)+2*n)
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c == '%' || !keep(i, c) {
			b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

// UnescapeName reverses EscapeName with the same keep. It reports false for
// a key that EscapeName(…, keep) cannot have produced — a key not written by
// dlock — and for the empty name.
func UnescapeName(key string, keep func(i int, c byte) bool) (string, bool) {
	b := make([]byte, 0, len(key))
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c != '%' {
			b = append(b, c)
			continue
		}
		if i+2 >= len(key) {
			return "", false
		}
		hi, ok1 := unhex(key[i+1])
		lo, ok2 := unhex(key[i+2])
		if !ok1 || !ok2 {
			return "", false
		}
		b = append(b, hi<<4|lo)
		i += 2
	}
	name := string(b)
	if name == "" || EscapeName(name, keep) != key {
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
