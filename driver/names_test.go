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
	if NameHash("x") != NameHash("x") {
		t.Error("NameHash is not deterministic")
	}
}
