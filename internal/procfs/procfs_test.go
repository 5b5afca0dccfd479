package procfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestReadParsesANameWithSpacesAndParentheses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stat")
	if err := os.WriteFile(path, []byte("4242 (a) (b c)) T 17 4242 4242 0 -1 4194560\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, ok := Read(path)
	if !ok || s != (Stat{State: 'T', PPID: 17, PGRP: 4242}) || !s.Stopped() || s.Gone() {
		t.Fatalf("Read = %+v, %v; want state T, ppid 17, pgrp 4242", s, ok)
	}
	if _, ok := Read(filepath.Join(t.TempDir(), "missing")); ok {
		t.Fatal("Read of a missing file: ok")
	}
}

func TestProcessAndThreadsOfAStoppedChild(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	s, ok := Process(cmd.Process.Pid)
	if !ok || s.PPID != os.Getpid() || s.Gone() {
		t.Fatalf("Process(child) = %+v, %v; want a live child of %d", s, ok, os.Getpid())
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		threads, ok := Threads(cmd.Process.Pid)
		stopped := ok && len(threads) > 0
		for _, th := range threads {
			stopped = stopped && th.Stopped()
		}
		if stopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("threads of the stopped child: %+v, %v", threads, ok)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
