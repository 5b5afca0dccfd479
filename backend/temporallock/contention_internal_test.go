package temporallock

import (
	"testing"
	"time"
)

// What makes a name crowded for a driver (its next Lock there queues by
// signal) and what ends it, as the package doc says: a reply that counts
// crowded client waiters or more marks it; fewer, or a grant with others
// still waiting, leave the mark as it is; a grant that finds nobody waiting
// ends it, and so does contendedFor without a new mark.
func TestContention(t *testing.T) {
	var c contention
	if c.recent("n") {
		t.Fatal("a name no reply counted is crowded")
	}
	c.note("n", crowded-1, false)
	if c.recent("n") {
		t.Fatalf("%d waiting made the name crowded; want at least %d", crowded-1, crowded)
	}
	c.note("n", crowded, false)
	if !c.recent("n") {
		t.Fatalf("%d waiting did not make the name crowded", crowded)
	}
	c.note("n", 1, false)
	c.note("n", 2, true)
	if !c.recent("n") {
		t.Fatal("a reply with a few waiting ended the mark; only a grant with nobody waiting should")
	}
	c.note("n", 0, true)
	if c.recent("n") {
		t.Fatal("a grant that found nobody waiting left the name crowded")
	}
	c.note("n", crowded, true)
	c.seen["n"] = time.Now().Add(-contendedFor - time.Second)
	if c.recent("n") {
		t.Fatalf("a mark older than %v still counts", contendedFor)
	}
}
