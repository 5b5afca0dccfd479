package procfs_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/dlock/dlock/internal/procfs"
	"github.com/dlock/dlock/internal/testenv"
)

func TestReadParsesANameWithSpacesAndParentheses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stat")
	if err := os.WriteFile(path, []byte("4242 (a) (b c)) T 17 4242 4242 0 -1 4194560\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, ok := procfs.Read(path)
	if !ok || s != (procfs.Stat{PID: 4242, State: 'T', PPID: 17, PGRP: 4242}) || !s.Stopped() || s.Gone() {
		t.Fatalf("Read = %+v, %v; want pid 4242, state T, ppid 17, pgrp 4242", s, ok)
	}
	if _, ok := procfs.Read(filepath.Join(t.TempDir(), "missing")); ok {
		t.Fatal("Read of a missing file: ok")
	}
}

func TestProcessAllAndThreadsOfAStoppedChild(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		testenv.Missing(t, "procfs", "a Linux system with /proc mounted", err)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	child := cmd.Process.Pid
	if self, ok := procfs.Process(os.Getpid()); !ok || self.StartTime == 0 {
		t.Errorf("Process(self) = %+v, %v; want a start time", self, ok)
	}
	s, ok := procfs.Process(child)
	if !ok || s.PID != child || s.PPID != os.Getpid() || s.Gone() {
		t.Fatalf("Process(child) = %+v, %v; want a live child %d of %d", s, ok, child, os.Getpid())
	}
	procs, ok := procfs.All()
	found := false
	for _, p := range procs {
		found = found || (p.PID == child && p.PPID == os.Getpid())
	}
	if !ok || !found {
		t.Fatalf("All (%d processes, ok %v) does not list the child %+v", len(procs), ok, s)
	}
	if stopped, ok := procfs.AllThreadsStopped(child); !ok || stopped {
		t.Fatalf("AllThreadsStopped(running child) = %v, %v; want false, true", stopped, ok)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "AllThreadsStopped(stopped child)", func() error {
		if stopped, ok := procfs.AllThreadsStopped(child); !stopped || !ok {
			return fmt.Errorf("= %v, %v", stopped, ok)
		}
		return nil
	})
}
