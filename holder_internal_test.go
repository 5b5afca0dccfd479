package dlock

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/dlock/dlock/driver"
)

// encodeHolder must write what json.Marshal writes for the same Holder, so
// that every reader (Inspect, List, other versions) decodes it alike.
func FuzzEncodeHolderMatchesJSON(f *testing.F) {
	f.Add("", int64(0), 0, false)
	f.Add("nightly backup", int64(1764680000123), 3, false)
	f.Add("quote \" backslash \\ <html> & \u2028 \x00 \xff", int64(-1), 1, true)
	f.Add(`"limit":7,"shared":true`, int64(5), 2, false)
	f.Fuzz(func(t *testing.T, note string, ms int64, limit int, shared bool) {
		var at time.Time
		if ms != 0 {
			at = time.UnixMilli(ms % (1 << 45)).UTC()
		}
		limit = max(limit%10000, 0)
		h := Holder{Host: hostname(), PID: os.Getpid(), Shared: shared, Note: note, AcquiredAt: at}
		if limit > 1 {
			h.Limit = limit
		}
		want, err := json.Marshal(h)
		if err != nil {
			t.Fatalf("json.Marshal: %v", err) // the times above are all within years 0..9999
		}
		got := encodeHolder(note, at, limit, shared)
		if !bytes.Equal(got, want) {
			t.Fatalf("encodeHolder(%q, %v, %d, %v)\n got %s\nwant %s", note, at, limit, shared, got, want)
		}
		if h := decodeHolder(got); !h.AcquiredAt.Equal(at) || h.PID != os.Getpid() {
			t.Fatalf("round trip of %q, %v gave %+v", note, at, h)
		}
		if n := driver.HolderLimit(got); n != max(limit, 1) {
			t.Fatalf("driver.HolderLimit(%s) = %d, want %d", got, n, max(limit, 1))
		}
		if driver.HolderShared(got) != shared {
			t.Fatalf("driver.HolderShared(%s) = %v, want %v", got, !shared, shared)
		}
	})
}
