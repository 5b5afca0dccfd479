package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/dlock/dlock"
)

// newTable returns a writer that aligns tab-separated columns; Flush it.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// shown returns a string from the backend (a lock name, a holder's host)
// as it can be printed on a terminal and in a table: as it is if every
// character is printable and not a tab, else Go-quoted, so that no escape
// sequence, newline or control character reaches the terminal.
func shown(name string) string {
	for _, r := range name {
		if !unicode.IsPrint(r) && r != ' ' || r == '\t' {
			return strconv.Quote(name)
		}
	}
	return name
}

// round keeps about three significant digits of d, for display.
func round(d time.Duration) time.Duration {
	for _, step := range []time.Duration{100 * time.Second, 10 * time.Second, time.Second, 100 * time.Millisecond, 10 * time.Millisecond, time.Millisecond, 100 * time.Microsecond, 10 * time.Microsecond} {
		if d >= step {
			return d.Round(step / 100)
		}
	}
	return d.Round(time.Microsecond)
}

// jsonSchema is the version of the JSON that inspect, list and bench print,
// in their top-level "schema" field. It changes when a field is removed or
// changes meaning; adding a field keeps it.
const jsonSchema = 1

// The JSON forms have no optional keys: a value that is unknown or does not
// apply (a free lock's token, a holder's missing note) is null, so that a
// consumer can tell "not there" from a key it misspelt.

// lockJSON is the JSON form of a lock's state (inspect --json, list --json).
type lockJSON struct {
	Name             string       `json:"name"`
	Held             bool         `json:"held"`
	Token            *uint64      `json:"token"`              // null when free
	Holder           *holderJSON  `json:"holder"`             // null when free
	ExpiresInSeconds *float64     `json:"expires_in_seconds"` // null when free or when the backend does not say
	Waiters          []holderJSON `json:"waiters"`
	// Limit and Permits describe a semaphore (dlock run --limit): its
	// number of permits (null for a plain lock or a free name), and every
	// holder of one, in grant order ([] for a plain lock or a free name).
	// Permits also lists the readers of a read-write lock, with a null
	// limit.
	Limit   *int         `json:"limit"`
	Permits []permitJSON `json:"permits"`
}

// permitJSON is one holder of a semaphore.
type permitJSON struct {
	Token            uint64     `json:"token"`
	Holder           holderJSON `json:"holder"`
	Limit            *int       `json:"limit"`              // the permits it was granted under; null if not recorded
	ExpiresInSeconds *float64   `json:"expires_in_seconds"` // null when the backend does not say
}

// holderJSON is a holder or waiter; each field is null when not recorded.
type holderJSON struct {
	Host       *string    `json:"host"`
	PID        *int       `json:"pid"`
	Note       *string    `json:"note"`
	AcquiredAt *time.Time `json:"acquired_at"`
}

// inspectJSON is the output of inspect --json.
type inspectJSON struct {
	Schema int `json:"schema"`
	lockJSON
}

// listJSON is the output of list --json.
type listJSON struct {
	Schema int        `json:"schema"`
	Locks  []lockJSON `json:"locks"`
}

func toJSON(in dlock.Info) lockJSON {
	j := lockJSON{Name: in.Name, Held: in.Held, Waiters: make([]holderJSON, 0, len(in.Waiters)), Permits: make([]permitJSON, 0, len(in.Permits))}
	for _, w := range in.Waiters {
		j.Waiters = append(j.Waiters, toHolderJSON(w))
	}
	if in.Held {
		j.Token = &in.Token
		h := toHolderJSON(in.Holder)
		j.Holder = &h
		j.ExpiresInSeconds = secondsOrNull(in.ExpiresIn)
	}
	for _, p := range in.Permits {
		j.Permits = append(j.Permits, permitJSON{Token: p.Token, Holder: toHolderJSON(p.Holder), Limit: orNull(p.Holder.Limit), ExpiresInSeconds: secondsOrNull(p.ExpiresIn)})
	}
	if l := semaphoreLimit(in); l > 0 {
		j.Limit = &l
	}
	return j
}

// secondsOrNull is d in seconds, or nil (JSON null) when not positive: the
// backend does not say.
func secondsOrNull(d time.Duration) *float64 {
	if d <= 0 {
		return nil
	}
	s := d.Seconds()
	return &s
}

// semaphoreLimit is the number of permits of the semaphore in, as its
// holders were granted them: the newest holder's, should they differ (the
// limit was changed while some held a permit). It is 0 for a plain lock
// or a free name.
func semaphoreLimit(in dlock.Info) int {
	for i := len(in.Permits) - 1; i >= 0; i-- {
		if l := in.Permits[i].Holder.Limit; l > 0 {
			return l
		}
	}
	return 0
}

// permitsHeld says how many permits of a semaphore are held: "2 of 3
// permits held", and, if its holders were granted them under different
// limits, which.
func permitsHeld(in dlock.Info) string {
	if readers := slices.ContainsFunc(in.Permits, func(p dlock.Permit) bool { return p.Holder.Shared }); readers {
		// The readers of a read-write lock (Client.RWMutex), which Info
		// lists as it lists a semaphore's holders.
		return fmt.Sprintf("%d readers hold it (read-write lock)", len(in.Permits))
	}
	limit := semaphoreLimit(in)
	s := fmt.Sprintf("%d of %d permits held", len(in.Permits), limit)
	if limit == 0 {
		s = fmt.Sprintf("%d permits held", len(in.Permits))
	}
	var limits []string
	for _, p := range in.Permits {
		if l := strconv.Itoa(p.Holder.Limit); p.Holder.Limit > 0 && !slices.Contains(limits, l) {
			limits = append(limits, l)
		}
	}
	if len(limits) > 1 {
		s += " (holders disagree on the limit: " + strings.Join(limits, ", ") + ")"
	}
	return s
}

func toHolderJSON(h dlock.Holder) holderJSON {
	j := holderJSON{Host: orNull(h.Host), PID: orNull(h.PID), Note: orNull(h.Note)}
	if !h.AcquiredAt.IsZero() {
		j.AcquiredAt = &h.AcquiredAt
	}
	return j
}

// orNull is v, or nil (JSON null) when v is its type's zero value.
func orNull[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// holderText is the short description of a holder in tables and messages.
func holderText(h dlock.Holder) string {
	s := ""
	if h.Host != "" {
		s = shown(h.Host)
	}
	if h.PID != 0 {
		if s != "" {
			s += " "
		}
		s += "pid " + strconv.Itoa(h.PID)
	}
	if h.Note != "" {
		s += " " + strconv.Quote(h.Note)
	}
	if s == "" {
		s = "-"
	}
	return s
}

// ago says how long before now t was, or "-" when unknown.
func ago(t time.Time, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return round(now.Sub(t)).String() + " ago"
}
