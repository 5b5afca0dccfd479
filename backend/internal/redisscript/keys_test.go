package redisscript

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// The cache must return each name's own keys, whatever else shares its
// slot, also when goroutines replace each other's entries.
func TestKeyCacheReturnsEachNamesKeys(t *testing.T) {
	c := NewKeyCache("p", Hashed)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 3000 {
				name := fmt.Sprintf("n%d", (i*7+g)%1000) // 1000 names, 256 slots
				got, want := c.Get(name), KeysFor("p", name)
				if got.Name != want.Name || got.Lock != want.Lock || got.Fence != want.Fence || got.Queue != want.Queue ||
					got.Waiters != want.Waiters || got.Channel != want.Channel {
					t.Errorf("Get(%q) = %+v, want %+v", name, *got, want)
					return
				}
				if q := got.queueKeys(); len(q) != 5 || q[0] != want.Lock || q[1] != want.Fence || q[4] != want.Channel {
					t.Errorf("queueKeys of %q = %v", name, q)
					return
				}
			}
		}()
	}
	wg.Wait()
	if a, b := c.Get("same"), c.Get("same"); a != b {
		t.Errorf("a name locked twice in a row was not found in the cache")
	}
}

// Read tells the readers' mark by its owner, Readers, which the scripts
// write as READERS: the two must be the same word.
func TestReadersMarkIsTheSameInGoAndLua(t *testing.T) {
	if want := "local READERS = '" + Readers + "'\n"; !strings.Contains(valueLib, want) {
		t.Errorf("value.lua does not define %q", want)
	}
}

// A hand-off is accepted only from the lock value of this owner with this
// token: another owner, a longer owner key that begins with this one, or
// another grant of the same owner is refused.
func TestHoldsMatchesOwnerAndToken(t *testing.T) {
	for _, c := range []struct {
		v     string
		token uint64
		want  bool
	}{
		{"abc 12 1 n", 12, true},
		{"abc+12 1 n{}", 12, true},
		{"abc 13 1 n", 12, false},
		{"abc 123 1 n", 12, false},
		{"abcd 12 1 n", 12, false},
		{"xbc 12 1 n", 12, false},
		{"abc", 12, false},
		{"abc 12", 12, false},
	} {
		if got := holds(c.v, "abc", c.token); got != c.want {
			t.Errorf("holds(%q, abc, %d) = %v, want %v", c.v, c.token, got, c.want)
		}
	}
}
