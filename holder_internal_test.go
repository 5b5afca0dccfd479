package dlock

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
	"time"
)

// encodeHolder must write what json.Marshal writes for the same Holder, so
// that every reader (Inspect, List, other versions) decodes it alike.
func FuzzEncodeHolderMatchesJSON(f *testing.F) {
	f.Add("", int64(0))
	f.Add("nightly backup", int64(1764680000123))
	f.Add("quote \" backslash \\ <html> & \u2028 \x00 \xff", int64(-1))
	f.Fuzz(func(t *testing.T, note string, ms int64) {
		var at time.Time
		if ms != 0 {
			at = time.UnixMilli(ms % (1 << 45)).UTC()
		}
		want, err := json.Marshal(Holder{Host: hostname(), PID: os.Getpid(), Note: note, AcquiredAt: at})
		if err != nil {
			t.Fatalf("json.Marshal: %v", err) // the times above are all within years 0..9999
		}
		if got := encodeHolder(note, at); !bytes.Equal(got, want) {
			t.Fatalf("encodeHolder(%q, %v)\n got %s\nwant %s", note, at, got, want)
		}
		if h := decodeHolder(encodeHolder(note, at)); !h.AcquiredAt.Equal(at) || h.PID != os.Getpid() {
			t.Fatalf("round trip of %q, %v gave %+v", note, at, h)
		}
	})
}
