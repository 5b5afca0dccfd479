package driver_test

import (
	"encoding/hex"
	"testing"

	"github.com/dlock/dlock/driver"
)

func TestNewNonceIs128RandomBitsInHex(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		n := driver.NewNonce()
		if b, err := hex.DecodeString(n); err != nil || len(b) != 16 || len(n) != 32 {
			t.Fatalf("NewNonce() = %q: want 32 lowercase hex digits (%v)", n, err)
		}
		if seen[n] {
			t.Fatalf("NewNonce() returned %q twice", n)
		}
		seen[n] = true
	}
}
