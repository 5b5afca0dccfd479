package procfs

import (
	"bytes"
	"os"
	"strconv"
)

// Stat is the head of a /proc stat file.
type Stat struct {
	PID int // the process, or the thread in a task's stat file
	// State: 'R' running, 'S' sleeping, 'T' stopped (by a signal), 't'
	// stopped by a tracer, 'Z' exited but not yet reaped, 'X' dead, …
	State byte
	PPID  int // parent
	PGRP  int // process group
	// StartTime is when the process started, in clock ticks after boot: a
	// PID and its StartTime name one process, even after the PID is reused.
	// 0 if the file does not have it.
	StartTime uint64
}

// Gone reports a process that has exited (a zombie holds nothing).
func (s Stat) Gone() bool { return s.State == 'Z' || s.State == 'X' }

// Stopped reports a process or thread stopped by a signal or a tracer.
func (s Stat) Stopped() bool { return s.State == 'T' || s.State == 't' }

// Read parses a stat file: /proc/PID/stat, or /proc/PID/task/TID/stat for
// one thread. ok is false if it cannot be read (no /proc, no such
// process).
func Read(path string) (s Stat, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Stat{}, false
	}
	// "pid (comm) state ppid pgrp …": comm may hold spaces and parentheses.
	open, end := bytes.IndexByte(b, ' '), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return Stat{}, false
	}
	f := bytes.Fields(b[end+1:])
	if len(f) < 3 || len(f[0]) != 1 {
		return Stat{}, false
	}
	pid, err0 := strconv.Atoi(string(b[:open]))
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgrp, err2 := strconv.Atoi(string(f[2]))
	if err0 != nil || err1 != nil || err2 != nil {
		return Stat{}, false
	}
	st := Stat{PID: pid, State: f[0][0], PPID: ppid, PGRP: pgrp}
	if len(f) > 19 { // field 22 of the file; f starts at field 3
		st.StartTime, _ = strconv.ParseUint(string(f[19]), 10, 64)
	}
	return st, true
}

// Process reads /proc/PID/stat.
func Process(pid int) (Stat, bool) {
	return Read("/proc/" + strconv.Itoa(pid) + "/stat")
}

// All reads the stat of every process; ok is false if /proc cannot be
// read.
func All() (procs []Stat, ok bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, false
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if s, ok := Read("/proc/" + e.Name() + "/stat"); ok {
			procs = append(procs, s)
		}
	}
	return procs, true
}

// AllThreadsStopped reports whether every thread of process pid is
// stopped; ok is false if its threads cannot be read (no /proc, no such
// process).
func AllThreadsStopped(pid int) (stopped, ok bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false, false
	}
	for _, t := range tasks {
		if s, ok := Read(dir + t.Name() + "/stat"); !ok || !s.Stopped() {
			return false, true
		}
	}
	return len(tasks) > 0, true
}
