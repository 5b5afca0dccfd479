package driver

import (
	"slices"
	"testing"
	"time"
)

type testAlarm struct {
	alarm Alarm
	id    int
	fired chan<- int
}

func (a *testAlarm) Alarm() *Alarm { return &a.alarm }
func (a *testAlarm) Due()          { a.fired <- a.id }

// TestAlarmsRunInTimeOrderAndStopUnsets: entries set in scrambled order
// run in the order of their times, each once; a stopped entry never runs,
// and one set again runs at its new time only.
func TestAlarmsRunInTimeOrderAndStopUnsets(t *testing.T) {
	const n = 12
	fired := make(chan int, 2*n)
	var a Alarms[*testAlarm]
	entries := make([]*testAlarm, n)
	start := Now()
	for _, i := range []int{7, 2, 11, 0, 5, 9, 1, 4, 10, 3, 8, 6} {
		entries[i] = &testAlarm{id: i, fired: fired}
		a.Set(entries[i], start.Add(time.Duration(i+1)*50*time.Millisecond))
	}
	a.Stop(entries[4])                                                   // never runs
	a.Set(entries[0], start.Add(time.Duration(n+1)*50*time.Millisecond)) // now last
	var want []int
	for i := 1; i < n; i++ {
		if i != 4 {
			want = append(want, i)
		}
	}
	want = append(want, 0)
	var got []int
	for range want {
		select {
		case id := <-fired:
			got = append(got, id)
		case <-time.After(60 * time.Second):
			t.Fatalf("ran %v, then nothing for 60s; want %v", got, want)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("ran in the order %v, want %v", got, want)
	}
	select {
	case id := <-fired:
		t.Errorf("entry %d ran again, or after Stop", id)
	case <-time.After(200 * time.Millisecond):
	}
	if l := a.Len(); l != 0 {
		t.Errorf("%d entries left set after all ran", l)
	}
}

// The zero Alarms is ready to use, and an entry due at once runs.
func TestAlarmsZeroValueIsReady(t *testing.T) {
	fired := make(chan int, 1)
	var a Alarms[*testAlarm]
	a.Set(&testAlarm{id: 1, fired: fired}, Now())
	select {
	case <-fired:
	case <-time.After(60 * time.Second):
		t.Fatal("an entry due now did not run within 60s")
	}
}
