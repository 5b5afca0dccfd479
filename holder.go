package dlock

import (
	"encoding/json"
	"os"
	"strconv"
	"sync"
	"time"
)

// Holder is the metadata a lease carries about its owner: which host and
// process took it, when (by the holder's clock), and a note (WithNote).
// Limit is the number of permits of the semaphore it was granted from
// (Client.Semaphore), or 0 for a mutex; Shared marks a reader of a
// read-write lock (Client.RWMutex).
type Holder struct {
	Host       string    `json:"host,omitempty"`
	PID        int       `json:"pid,omitempty"`
	Limit      int       `json:"limit,omitempty"`
	Shared     bool      `json:"shared,omitempty"`
	Note       string    `json:"note,omitempty"`
	AcquiredAt time.Time `json:"acquired_at,omitzero"`
}

func decodeHolder(b []byte) Holder {
	var h Holder
	if len(b) > 0 && json.Unmarshal(b, &h) != nil {
		h.Note = string(b) // not ours: show it as it is
	}
	return h
}

var hostname = sync.OnceValue(func() string {
	h, _ := os.Hostname()
	return h
})

// holderPrefix is the constant start of this process's holder metadata:
// its host and PID, as encoding/json writes them.
var holderPrefix = sync.OnceValue(func() []byte {
	b, _ := json.Marshal(Holder{Host: hostname(), PID: os.Getpid()})
	return b[:len(b)-1] // without the closing brace
})

// encodeHolder returns the JSON of Holder{host, PID, limit, shared, note,
// at}, exactly as json.Marshal writes it, without reflecting over the
// struct on every Lock. A limit of 1 (a mutex) is written as none. The
// limit and shared come before the note, so that driver.HolderLimit and
// driver.HolderShared find them first.
func encodeHolder(note string, at time.Time, limit int, shared bool) []byte {
	p := holderPrefix()
	b := make([]byte, 0, len(p)+len(note)+80)
	b = append(b, p...)
	sep := func() {
		if len(b) > 1 {
			b = append(b, ',')
		}
	}
	if limit > 1 {
		sep()
		b = append(b, `"limit":`...)
		b = strconv.AppendInt(b, int64(limit), 10)
	}
	if shared {
		sep()
		b = append(b, `"shared":true`...)
	}
	if note != "" {
		n, _ := json.Marshal(note)
		sep()
		b = append(b, `"note":`...)
		b = append(b, n...)
	}
	if !at.IsZero() {
		sep()
		b = append(b, `"acquired_at":"`...)
		b = at.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	return append(b, '}')
}
