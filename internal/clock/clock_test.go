package clock

import (
	"context"
	"testing"
	"time"
)

func TestDefaultIsPackageTime(t *testing.T) {
	if Skewed() {
		t.Fatal("the clock is skewed before any Skew")
	}
	before := time.Now()
	now := Now()
	after := time.Now()
	if now.Before(before) || now.After(after) {
		t.Fatalf("Now() = %v, not between %v and %v", now, before, after)
	}
	if realDuration(time.Second) != time.Second {
		t.Fatal("an unskewed timer's duration changed")
	}
}

// TestSkewRateAndOffset: at rate 0.25 a process believes a quarter of the
// real time passed; the offset shows in the wall time only.
func TestSkewRateAndOffset(t *testing.T) {
	defer Skew(1, 0)
	Skew(0.25, time.Hour)
	start, realStart := Now(), time.Now()
	if d := start.Sub(realStart); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("wall offset %v, want about 1h", d)
	}
	time.Sleep(200 * time.Millisecond)
	believed, elapsed := Since(start), time.Since(realStart)
	if believed <= 0 || believed >= elapsed/2 {
		t.Fatalf("after %v of real time the skewed clock advanced %v, want about a quarter", elapsed, believed)
	}
	if u := Until(start); u >= 0 {
		t.Fatalf("Until(a past reading) = %v, want negative", u)
	}
}

// TestSkewedReadingsAreMonotonic: successive readings never go back.
func TestSkewedReadingsAreMonotonic(t *testing.T) {
	defer Skew(1, 0)
	Skew(0.3, -time.Hour)
	prev := Now()
	for range 10000 {
		now := Now()
		if now.Before(prev) {
			t.Fatalf("reading %v before the previous %v", now, prev)
		}
		prev = now
	}
}

// TestSkewedTimersFireLate: a timer of d fires after d/rate of real time,
// and Reset scales in the same way.
func TestSkewedTimersFireLate(t *testing.T) {
	defer Skew(1, 0)
	Skew(0.5, 0)
	start := time.Now()
	tm := NewTimer(50 * time.Millisecond)
	<-tm.C
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("a 50ms timer at rate 0.5 fired after %v of real time, want at least 100ms", d)
	}
	fired := make(chan time.Duration, 1)
	start = time.Now()
	af := AfterFunc(time.Hour, func() { fired <- time.Since(start) })
	Reset(af, 20*time.Millisecond)
	if d := <-fired; d < 40*time.Millisecond {
		t.Fatalf("a timer reset to 20ms at rate 0.5 fired after %v, want at least 40ms", d)
	}
}

func TestSkewRefusesNonPositiveRate(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Skew(0, 0) did not panic")
		}
	}()
	Skew(0, 0)
}

func BenchmarkNow(b *testing.B) {
	b.Run("time", func(b *testing.B) {
		for b.Loop() {
			_ = time.Now()
		}
	})
	b.Run("clock", func(b *testing.B) {
		for b.Loop() {
			_ = Now()
		}
	})
}

// TestSkewedDeadline: a context's deadline in the skewed clock's time ends
// it when that clock reaches it, not when the real clock does.
func TestSkewedDeadline(t *testing.T) {
	defer Skew(1, 0)
	Skew(0.5, 2*time.Hour)
	start := time.Now()
	ctx, cancel := WithDeadline(context.Background(), Now().Add(30*time.Millisecond))
	defer cancel()
	<-ctx.Done()
	if d := time.Since(start); d < 60*time.Millisecond {
		t.Fatalf("a deadline 30ms ahead at rate 0.5 ended the context after %v of real time, want at least 60ms", d)
	}
}
