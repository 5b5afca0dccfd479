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
