package driver

import "testing"

func TestNameHashIsFixedLengthAndDistinguishesNames(t *testing.T) {
	seen := map[string]string{}
	for _, n := range []string{"a", "a\x00", "A", "a/b", "a b", "", "ключ"} {
		h := NameHash(n)
		if len(h) != 32 {
			t.Errorf("NameHash(%q) = %q: %d characters, want 32", n, h, len(h))
		}
		if prev, dup := seen[h]; dup {
			t.Errorf("NameHash(%q) == NameHash(%q)", n, prev)
		}
		seen[h] = n
	}
	// The first 128 bits of SHA-256("x"): stable across versions, since
	// backends store it.
	if got, want := NameHash("x"), "2d711642b726b04401627ca9fbac32f5"; got != want {
		t.Errorf("NameHash(\"x\") = %s, want %s", got, want)
	}
}
