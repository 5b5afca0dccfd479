package driver

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestExtendGroups(t *testing.T) {
	var b []Extension
	add := func(name string, ttl time.Duration, h any) {
		b = append(b, Extension{Held: Held{Name: name, Owner: "o", Handle: h}, TTL: ttl})
	}
	for i := range MaxBatch + 3 {
		add("long"+string(rune('a'+i%26)), 2*time.Second, nil)
	}
	add("permit", 2*time.Second, "alone")
	add("short", time.Second, nil)
	add("short2", time.Second, nil)
	add("once", 3*time.Second, nil)
	errs := make([]error, len(b))
	var ones []string
	var groups [][]int
	var groupTTLs []time.Duration
	errOne := errors.New("one")
	ExtendGroups(b, errs, func(e Extension) bool { return e.Held.Handle == "alone" },
		func(e Extension) error { ones = append(ones, e.Held.Name); return errOne },
		func(idx []int, ttl time.Duration) {
			groups = append(groups, slices.Clone(idx))
			groupTTLs = append(groupTTLs, ttl)
		})
	// The 259 leases of 2s: a full group and a group of 3; the permit
	// alone; the two of 1s together; the one of 3s alone.
	if len(groups) != 3 || len(groups[0]) != MaxBatch || len(groups[1]) != 3 || len(groups[2]) != 2 {
		t.Fatalf("groups of %v", groupLens(groups))
	}
	if !slices.Equal(groupTTLs, []time.Duration{2 * time.Second, 2 * time.Second, time.Second}) {
		t.Errorf("group TTLs %v", groupTTLs)
	}
	if !slices.Equal(ones, []string{"permit", "once"}) {
		t.Errorf("renewed alone: %v", ones)
	}
	seen := map[int]bool{}
	for g, idx := range groups {
		for _, i := range idx {
			if seen[i] || b[i].TTL != groupTTLs[g] || b[i].Held.Handle != nil {
				t.Errorf("lease %d in group %d (TTL %v): seen %v, TTL %v", i, g, groupTTLs[g], seen[i], b[i].TTL)
			}
			seen[i] = true
		}
	}
	for i := range b {
		alone := b[i].Held.Name == "permit" || b[i].Held.Name == "once"
		if seen[i] == alone || (errs[i] == errOne) != alone {
			t.Errorf("lease %d (%s): grouped %v, err %v", i, b[i].Held.Name, seen[i], errs[i])
		}
	}
}

func groupLens(gs [][]int) []int {
	var n []int
	for _, g := range gs {
		n = append(n, len(g))
	}
	return n
}

func TestRenewed(t *testing.T) {
	r := Renewed{}
	r.Add("a", "o1")
	r.Add("a\x00o", "1")
	if !r.Has(Held{Name: "a", Owner: "o1"}) || r.Has(Held{Name: "a", Owner: "o2"}) || r.Has(Held{Name: "b", Owner: "o1"}) {
		t.Errorf("Renewed: %v", r)
	}
}
