package main

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dlock/dlock"
)

// TestTimelineTellsGrantReleaseExpiryAndBreakApart feeds the timeline
// polls as a backend reports them, and checks what it infers.
func TestTimelineTellsGrantReleaseExpiryAndBreakApart(t *testing.T) {
	t0 := time.Unix(1000, 0)
	held := func(name string, token uint64, expiresIn time.Duration) dlock.Info {
		return dlock.Info{Name: name, Held: true, Token: token, ExpiresIn: expiresIn, Holder: dlock.Holder{Host: "h", PID: int(token)}}
	}
	type poll struct {
		after time.Duration
		locks []dlock.Info
		want  []string // "name kind token"
	}
	for _, tc := range []struct {
		name   string
		broken map[string]uint64
		polls  []poll
	}{
		{"held at start, then released before its expiry", nil, []poll{
			{0, []dlock.Info{held("a", 5, 10*time.Second)}, []string{"a seen 5"}},
			{200 * time.Millisecond, nil, []string{"a release 5"}},
		}},
		{"granted, then handed off", nil, []poll{
			{0, nil, nil},
			{200 * time.Millisecond, []dlock.Info{held("a", 5, 2*time.Second)}, []string{"a grant 5"}},
			{400 * time.Millisecond, []dlock.Info{held("a", 9, 2*time.Second)}, []string{"a release 5", "a grant 9"}},
		}},
		{"not renewed: gone after its expiry, reported held without one in between", nil, []poll{
			{0, []dlock.Info{held("a", 5, time.Second)}, []string{"a seen 5"}},
			{1100 * time.Millisecond, []dlock.Info{held("a", 5, 0)}, nil},
			{1300 * time.Millisecond, []dlock.Info{held("a", 7, time.Second)}, []string{"a expiry 5", "a grant 7"}},
		}},
		{"expiries reported in whole seconds: the latest estimate counts", nil, []poll{
			{0, []dlock.Info{held("a", 5, 2*time.Second)}, []string{"a seen 5"}},   // 2 s left, says 2 s
			{100 * time.Millisecond, []dlock.Info{held("a", 5, time.Second)}, nil}, // 1.9 s left, says 1 s
			{1200 * time.Millisecond, nil, []string{"a release 5"}},
		}},
		{"broken from the dashboard", map[string]uint64{"a": 5}, []poll{
			{0, []dlock.Info{held("a", 5, 10*time.Second), held("b", 6, 10*time.Second)}, []string{"a seen 5", "b seen 6"}},
			{200 * time.Millisecond, []dlock.Info{held("b", 6, 10*time.Second)}, []string{"a break 5"}},
		}},
		{"no expiry reported (sessions): not called a release nor a loss for sure", nil, []poll{
			{0, []dlock.Info{held("a", 5, 0)}, []string{"a seen 5"}},
			{time.Hour, nil, []string{"a release 5"}},
		}},
	} {
		var prev *pollSnapshot
		for i, p := range tc.polls {
			cur := newSnapshot(prev, t0.Add(p.after), p.locks)
			var got []string
			for _, e := range timeline(prev, cur, tc.broken) {
				got = append(got, fmt.Sprintf("%s %s %d", e.Name, e.Kind, e.Token))
			}
			if !slices.Equal(got, p.want) {
				t.Errorf("%s, poll %d: %q; want %q", tc.name, i, got, p.want)
			}
			prev = &cur
		}
	}
}
