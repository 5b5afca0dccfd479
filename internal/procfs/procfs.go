// Package procfs reads the few facts dlock needs about a process from
// Linux's /proc: its state, parent and process group.
package procfs

import (
	"bytes"
	"os"
	"strconv"
)

// Stat is the head of a /proc stat file.
type Stat struct {
	// State: 'R' running, 'S' sleeping, 'T' stopped (by a signal), 't'
	// stopped by a tracer, 'Z' exited but not yet reaped, 'X' dead, …
	State byte
	PPID  int // parent
	PGRP  int // process group
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
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Stat{}, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 || len(f[0]) != 1 {
		return Stat{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgrp, err2 := strconv.Atoi(string(f[2]))
	if err1 != nil || err2 != nil {
		return Stat{}, false
	}
	return Stat{State: f[0][0], PPID: ppid, PGRP: pgrp}, true
}

// Process reads /proc/PID/stat.
func Process(pid int) (Stat, bool) {
	return Read("/proc/" + strconv.Itoa(pid) + "/stat")
}

// Threads reads the stat of every thread of process pid; ok is false if
// its task directory cannot be read.
func Threads(pid int) (threads []Stat, ok bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil, false
	}
	for _, t := range tasks {
		if s, ok := Read(dir + t.Name() + "/stat"); ok {
			threads = append(threads, s)
		}
	}
	return threads, true
}
