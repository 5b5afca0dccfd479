package driver_test

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock/dlock/driver"
)

func TestSignalFiresOnceWithItsCause(t *testing.T) {
	s := driver.NewSignal()
	if s.Fired() || s.Cause() != nil {
		t.Fatal("a new signal has fired")
	}
	done := s.Done()
	select {
	case <-done:
		t.Fatal("Done is closed before Fire")
	default:
	}
	ran := make(chan struct{}, 2)
	s.AfterFire(func() { ran <- struct{}{} })
	stopped := s.AfterFire(func() { ran <- struct{}{} })
	if !stopped() {
		t.Fatal("stop before Fire did not stop the callback")
	}
	if stopped() {
		t.Fatal("a second stop reports stopping it again")
	}
	cause := errors.New("session lost")
	s.FireCause(cause)
	s.FireCause(errors.New("later"))
	s.Fire()
	<-done
	<-s.Done()
	if !s.Fired() || s.Cause() != cause {
		t.Fatalf("after FireCause: Fired %v, Cause %v; want true, %v", s.Fired(), s.Cause(), cause)
	}
	<-ran
	select {
	case <-ran:
		t.Fatal("the stopped callback ran")
	case <-time.After(100 * time.Millisecond):
	}
}

func TestSignalFiredBeforeDoneAndAfterFire(t *testing.T) {
	s := driver.NewSignal()
	s.Fire()
	if s.Cause() != nil {
		t.Fatalf("Cause after Fire = %v, want nil", s.Cause())
	}
	<-s.Done()
	ran := make(chan struct{})
	stop := s.AfterFire(func() { close(ran) })
	<-ran
	if stop() {
		t.Fatal("stop after the callback ran reports stopping it")
	}
}
