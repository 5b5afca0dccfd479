package driver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock/dlock/driver"
)

func TestBackoffDoublesFromBaseUpToCap(t *testing.T) {
	b := driver.Backoff{Base: 10 * time.Millisecond, Cap: 50 * time.Millisecond}
	want := []time.Duration{10, 20, 40, 50, 50}
	for n, w := range want {
		if got := b.Delay(n); got != w*time.Millisecond {
			t.Errorf("Delay(%d) = %v, want %v", n, got, w*time.Millisecond)
		}
	}
	if got := b.Delay(1 << 40); got != b.Cap {
		t.Errorf("Delay(2^40) = %v, want the cap %v", got, b.Cap)
	}
	if got := (driver.Backoff{Base: time.Second, Cap: time.Millisecond}).Delay(3); got != time.Second {
		t.Errorf("Delay with a cap below the base = %v, want the base", got)
	}
	if got := (driver.Backoff{Cap: time.Second}).Delay(1 << 40); got != 0 {
		t.Errorf("Delay with no base = %v, want 0", got)
	}
}

func TestBackoffJitterTakesUpToItsShareOff(t *testing.T) {
	b := driver.Backoff{Base: 100 * time.Millisecond, Cap: 100 * time.Millisecond, Jitter: 0.25}
	varied := false
	for range 1000 {
		d := b.Delay(0)
		if d < 75*time.Millisecond || d > 100*time.Millisecond {
			t.Fatalf("Delay with jitter 0.25 = %v, want within [75ms, 100ms]", d)
		}
		varied = varied || d != 100*time.Millisecond
	}
	if !varied {
		t.Error("Delay with jitter 0.25 never varied in 1000 draws")
	}
}

func TestBackoffWaitEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := (driver.Backoff{Base: time.Hour}).Wait(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with an ended context: %v, want Canceled", err)
	}
	if err := (driver.Backoff{Base: time.Millisecond}).Wait(context.Background(), 0); err != nil {
		t.Errorf("Wait: %v", err)
	}
}
