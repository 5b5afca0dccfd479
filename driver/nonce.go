package driver

import (
	"crypto/rand"
	"encoding/hex"
)

// NewNonce returns 128 random bits from crypto/rand as 32 lowercase hex
// digits: unguessable and, for all practical purposes, unique. The
// portable layer uses it for Request.Owner; a backend uses it wherever it
// needs a name nobody else will pick (a protected node's GUID, a process
// id on a shared channel).
func NewNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24 and later)
	return hex.EncodeToString(b[:])
}
