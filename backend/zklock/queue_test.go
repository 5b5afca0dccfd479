package zklock

import (
	"fmt"
	"slices"
	"testing"
)

// TestQueueOrdersSequencesAcrossTheInt32Wrap checks the order of a queue
// whose parent's child version wrapped: the server formats the int32 with
// %010d, so after 2147483647 come -2147483648, -2147483647, ... and those
// nodes were created last. (A real server cannot be driven through 2³¹
// child changes in a test; this checks the ordering function on the names
// the server produces.)
func TestQueueOrdersSequencesAcrossTheInt32Wrap(t *testing.T) {
	node := func(guid string, seq int32) string {
		return fmt.Sprintf("%s%s%s%010d", protectedPrefix, guid, lockMarker, seq)
	}
	for _, tc := range []struct {
		desc string
		seqs []int32 // in creation order
	}{
		{"before the wrap", []int32{0, 1, 2, 9, 10, 1000000000}},
		{"across the wrap", []int32{2147483645, 2147483646, 2147483647, -2147483648, -2147483647, -2147483646}},
		{"after the wrap, oldest just before it", []int32{2147483647, -2147483648, -1000}},
		{"across zero, after a full turn", []int32{-3, -2, -1, 0, 1}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			var want []string
			for i, s := range tc.seqs {
				want = append(want, node(fmt.Sprintf("%032x", len(tc.seqs)-i), s))
			}
			kids := slices.Clone(want)
			slices.Reverse(kids)
			kids = append(kids, "not-a-lock-node", protectedPrefix+"x"+lockMarker+"junk")
			var got []string
			for _, q := range queueOf(kids) {
				got = append(got, q.name)
			}
			if !slices.Equal(got, want) {
				t.Errorf("queue order:\n got %q\nwant %q", got, want)
			}
		})
	}
	if got := node("g", -2147483648); got != protectedPrefix+"g"+lockMarker+"-2147483648" {
		t.Errorf("the server's name for the first wrapped sequence is %q", got)
	}
}
