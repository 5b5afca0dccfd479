package testenv

import (
	"net"
	"strconv"
	"testing"
)

func TestFreePortIsBelowTheEphemeralRangeAndNeverRepeats(t *testing.T) {
	low := ephemeralLow()
	if low-lowestPort < 1000 {
		t.Skipf("ephemeral range starts at %d: FreePort falls back to the kernel's pick", low)
	}
	seen := map[int]bool{}
	for range 200 {
		p := FreePort(t)
		if p < lowestPort || p >= low {
			t.Fatalf("FreePort gave %d, outside %d–%d", p, lowestPort, low-1)
		}
		if seen[p] {
			t.Fatalf("FreePort gave %d twice", p)
		}
		seen[p] = true
	}
}

func TestFreePortPassesAPortSomeoneListensOn(t *testing.T) {
	portMu.Lock()
	defer portMu.Unlock()
	// Find two adjacent ports below the ephemeral range, hold the first.
	for q := lowestPort; q < ephemeralLow()-1; q += 2 {
		if portsGiven[q] || portsGiven[q+1] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(q))
		if err != nil {
			continue
		}
		defer l.Close()
		got := freePortIn(q, q+2, q)
		if got == q {
			t.Fatalf("freePortIn gave %d, which a listener holds", q)
		}
		if got == q+1 {
			if again := freePortIn(q, q+2, q); again != 0 {
				t.Fatalf("freePortIn gave %d after handing out %d and with %d held: want none", again, q+1, q)
			}
		}
		return
	}
	t.Skip("no two adjacent free ports below the ephemeral range")
}
