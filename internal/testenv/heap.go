package testenv

import (
	"runtime"
	"time"
)

// SettledGoroutines returns the number of goroutines once it has not
// changed for half a second (looked at every 100 ms), or after 20 s: what
// is in flight — a renewal, a watch that starts a moment after its grant,
// the clients of an earlier round winding down — settles first. Tests
// that assert a held lock costs no goroutine, and benchmarks that report
// goroutines per held lock, count with it.
func SettledGoroutines() int {
	g := runtime.NumGoroutine()
	for i, stable := 0, 0; stable < 5 && i < 200; i++ {
		time.Sleep(100 * time.Millisecond)
		if n := runtime.NumGoroutine(); n != g {
			g, stable = n, 0
			continue
		}
		stable++
	}
	return g
}

// LiveHeap returns the process's live Go heap after two full collections,
// and SettledGoroutines: the figures of a benchmark's heap and goroutines
// per held lock, taken before and after the locks are taken.
func LiveHeap() (heap int64, goroutines int) {
	g := SettledGoroutines()
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc), g
}
