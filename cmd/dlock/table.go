package main

import (
	"encoding/json"
	"io"
	"strconv"
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

// lockJSON is the JSON form of a lock's state (inspect --json, list --json).
type lockJSON struct {
	Name             string         `json:"name"`
	Held             bool           `json:"held"`
	Token            uint64         `json:"token,omitempty"`
	Holder           *dlock.Holder  `json:"holder,omitempty"`
	ExpiresInSeconds *float64       `json:"expires_in_seconds,omitempty"`
	Waiters          []dlock.Holder `json:"waiters"`
}

func toJSON(in dlock.Info) lockJSON {
	j := lockJSON{Name: in.Name, Held: in.Held, Token: in.Token, Waiters: in.Waiters}
	if j.Waiters == nil {
		j.Waiters = []dlock.Holder{}
	}
	if in.Held {
		h := in.Holder
		j.Holder = &h
		if in.ExpiresIn > 0 {
			s := in.ExpiresIn.Seconds()
			j.ExpiresInSeconds = &s
		}
	}
	return j
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
