package driver

import (
	"strings"
	"testing"
)

// The queue rule, contender by contender: "w" a writer or mutex, "r" a
// reader, "sN" a semaphore's contender asking for N permits.
func TestQueueHoldersFollowsTheQueue(t *testing.T) {
	for _, tc := range []struct {
		queue string
		want  int
	}{
		{"", 0},
		{"w", 1},
		{"w w", 1},
		{"r r r", 3},
		{"r r w r", 2}, // the writer waits for the readers, the reader behind it for the writer
		{"w r r", 1},
		{"s3 s3 s3 s3", 3},
		{"s5 s5 s2 s5", 2}, // the limit of 2 is reached: the 5 behind it does not pass it
		{"s2 s5 s5", 3},    // each counts by its own limit
		{"s5 s5 s5 s1", 3},
	} {
		var holders [][]byte
		for _, c := range strings.Fields(tc.queue) {
			switch {
			case c == "w":
				holders = append(holders, []byte(`{"host":"h"}`))
			case c == "r":
				holders = append(holders, []byte(`{"host":"h","shared":true}`))
			default:
				holders = append(holders, []byte(`{"host":"h","limit":`+c[1:]+`}`))
			}
		}
		got, err := QueueHolders(len(holders), func(i int) ([]byte, error) { return holders[i], nil })
		if err != nil || got != tc.want {
			t.Errorf("QueueHolders(%q) = %d, %v; want %d", tc.queue, got, err, tc.want)
		}
	}
}
