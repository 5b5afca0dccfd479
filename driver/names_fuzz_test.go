package driver

import (
	"regexp"
	"testing"
)

var hexDigest = regexp.MustCompile(`^[0-9a-f]{32}$`)

// FuzzNameHash: the digest is 32 lowercase hex digits, the same for the
// same name, and different for different names.
func FuzzNameHash(f *testing.F) {
	f.Add("orders/42", "orders/43")
	f.Add("", "\x00")
	f.Add("a/b", "a%2Fb")
	f.Add("ключ", "ключ ")
	f.Fuzz(func(t *testing.T, a, b string) {
		ha, hb := NameHash(a), NameHash(b)
		if !hexDigest.MatchString(ha) {
			t.Fatalf("NameHash(%q) = %q, not 32 lowercase hex digits", a, ha)
		}
		if ha != NameHash(a) {
			t.Fatalf("NameHash(%q) is not deterministic", a)
		}
		if (a == b) != (ha == hb) {
			t.Fatalf("NameHash(%q) = %s, NameHash(%q) = %s", a, ha, b, hb)
		}
	})
}
