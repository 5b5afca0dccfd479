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

func TestEscapeNameRoundTripsAndKeepsNamesApart(t *testing.T) {
	keepPrintable := func(_ int, c byte) bool { return c > 0x20 && c < 0x7f && c != '/' }
	seen := map[string]string{}
	for _, n := range []string{"a", "a/b", "a%2Fb", "a%", "%", "a\x00", "a b", "ключ", "..", "a/", "/a", "100%/x"} {
		e := EscapeName(n, keepPrintable)
		if prev, dup := seen[e]; dup {
			t.Errorf("EscapeName(%q) = EscapeName(%q) = %q", n, prev, e)
		}
		seen[e] = n
		for i := 0; i < len(e); i++ {
			if e[i] != '%' && !keepPrintable(i, e[i]) {
				t.Errorf("EscapeName(%q) = %q keeps byte %#x", n, e, e[i])
			}
		}
		if back, ok := UnescapeName(e, keepPrintable); !ok || back != n {
			t.Errorf("UnescapeName(EscapeName(%q)) = %q, %v", n, back, ok)
		}
	}
	for _, bad := range []string{"", "%", "%4", "%zz", "%61", "a/b", "%2f"} {
		if n, ok := UnescapeName(bad, keepPrintable); ok {
			t.Errorf("UnescapeName(%q) = %q, want rejected", bad, n)
		}
	}
}
