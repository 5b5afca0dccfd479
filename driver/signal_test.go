package driver

import (
	"errors"
	"testing"
	"time"
)

// TestSignalFiresOnceWithItsCause: Done closes whether it was asked for
// before or after the fire, Cause is the first FireCause's, and a second
// fire changes nothing.
func TestSignalFiresOnceWithItsCause(t *testing.T) {
	s := NewSignal()
	early := s.Done()
	if s.Fired() || s.Cause() != nil {
		t.Fatalf("a new signal: fired %v, cause %v", s.Fired(), s.Cause())
	}
	select {
	case <-early:
		t.Fatal("Done is closed before the fire")
	default:
	}
	first := errors.New("first")
	s.FireCause(first)
	s.FireCause(errors.New("second"))
	s.Fire()
	if !s.Fired() || s.Cause() != first {
		t.Fatalf("after the fire: fired %v, cause %v; want true, %v", s.Fired(), s.Cause(), first)
	}
	for _, ch := range []<-chan struct{}{early, s.Done()} {
		select {
		case <-ch:
		default:
			t.Fatal("Done is not closed after the fire")
		}
	}

	var zero Signal // the zero Signal is ready to use
	zero.Fire()
	if !zero.Fired() || zero.Cause() != nil {
		t.Fatalf("a zero signal fired by Fire: fired %v, cause %v", zero.Fired(), zero.Cause())
	}
	<-zero.Done()
}

// TestSignalAfterFireRunsUnlessStopped: a callback runs once after the
// fire (at once if it already fired), a stopped one never runs, and stop
// reports which happened.
func TestSignalAfterFireRunsUnlessStopped(t *testing.T) {
	s := NewSignal()
	ran := make(chan string, 4)
	stopA := s.AfterFire(func() { ran <- "a" })
	stopB := s.AfterFire(func() { ran <- "b" })
	if !stopB() {
		t.Fatal("stop before the fire reported that the callback was not stopped")
	}
	if stopB() {
		t.Fatal("a second stop reported stopping the callback again")
	}
	s.Fire()
	if got := receive(t, ran); got != "a" {
		t.Fatalf("callback %q ran; want a", got)
	}
	if stopA() {
		t.Fatal("stop after the callback ran reported stopping it")
	}
	stopC := s.AfterFire(func() { ran <- "c" }) // already fired: runs at once
	if got := receive(t, ran); got != "c" {
		t.Fatalf("callback %q ran; want c", got)
	}
	if stopC() {
		t.Fatal("stop of a callback registered after the fire reported stopping it")
	}
	select {
	case got := <-ran:
		t.Fatalf("callback %q ran; b was stopped and a and c ran once each", got)
	case <-time.After(50 * time.Millisecond):
	}
}

func receive(t *testing.T, ch <-chan string) string {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("no callback ran within 10s of the fire")
		return ""
	}
}
