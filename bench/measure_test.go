package bench

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock/dlock/internal/testenv"
)

// quantile returns the q-quantile (0..1) of ds, sorting ds in place.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(int(q*float64(len(ds))), len(ds)-1)]
}

// serial is the outcome of uncontended runs: one worker locking and
// unlocking one name in a loop.
type serial struct {
	ops, errors int
	reqs        int64 // requests sent, where the library's clients count them
	elapsed     time.Duration
	lat         []time.Duration // lock+unlock, per op
	// From a separate pass (allocs), where one library runs alone: heap
	// objects and bytes this process allocated, over allocOps ops.
	mallocs, allocs uint64
	allocOps        int
}

// opsPerSec is 1 ÷ the mean time of a lock+unlock.
func (s *serial) opsPerSec() float64 { return float64(s.ops) / s.elapsed.Seconds() }

// interleaved locks and unlocks key with every worker in turn, in a new
// random order each time around, for d, adding worker i's figures to
// ss[i]; sent[i] counts the requests ws[i] sends. Every library thus
// meets the same load on the machine, down to the millisecond.
func interleaved(ws []worker, ss []*serial, sent []*atomic.Int64, key []string, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	for end := time.Now().Add(d); time.Now().Before(end); {
		for _, i := range rand.Perm(len(ws)) {
			s := ss[i]
			sent0 := sent[i].Load()
			t0 := time.Now()
			unlock, err := ws[i].lock(ctx, key[i])
			if err != nil {
				s.errors++
				time.Sleep(10 * time.Millisecond)
				continue
			}
			unlock()
			dt := time.Since(t0)
			s.lat = append(s.lat, dt)
			s.elapsed += dt
			s.ops++
			s.reqs += sent[i].Load() - sent0
		}
	}
}

// countAllocs locks and unlocks key with w alone for d, and counts the heap
// allocations of this process.
func (s *serial) countAllocs(w worker, key string, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for end := time.Now().Add(d); time.Now().Before(end); {
		unlock, err := w.lock(ctx, key)
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		unlock()
		s.allocOps++
	}
	runtime.ReadMemStats(&m1)
	s.mallocs += m1.Mallocs - m0.Mallocs
	s.allocs += m1.TotalAlloc - m0.TotalAlloc
}

// contention is the outcome of contended runs: workers taking turns
// through one lock.
type contention struct {
	grants    int             // grants within the runs' durations
	changes   int             // grants to another worker than the previous grant
	errors    int             // lock calls that failed (gave up) before the end
	overlaps  int             // grants while another worker held the lock: must be 0
	perWorker []int           // grants per worker
	waits     []time.Duration // from calling lock to being granted
	elapsed   time.Duration
	calls     int64 // Redis commands executed (INFO commandstats), Redis only
	reqs      int64 // requests the clients sent, Redis only
}

func (c *contention) grantsPerSec() float64  { return float64(c.grants) / c.elapsed.Seconds() }
func (c *contention) changesPerSec() float64 { return float64(c.changes) / c.elapsed.Seconds() }
func (c *contention) callsPerGrant() float64 { return float64(c.calls) / float64(max(c.grants, 1)) }
func (c *contention) reqsPerGrant() float64  { return float64(c.reqs) / float64(max(c.grants, 1)) }

// fairness is the fewest grants of a worker divided by the most.
func (c *contention) fairness() float64 {
	lo, hi := slices.Min(c.perWorker), slices.Max(c.perWorker)
	if hi == 0 {
		return 0
	}
	return float64(lo) / float64(hi)
}

// run has every worker, in a loop, lock key, hold it for hold and unlock
// it, for d; grants after d are not counted (a library whose lock call
// cannot be cancelled finishes its queue after d).
func (c *contention) run(ws []worker, key string, hold, d time.Duration) {
	if c.perWorker == nil {
		c.perWorker = make([]int, len(ws))
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var mu sync.Mutex
	var holders atomic.Int32
	last := -1
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				unlock, err := w.lock(ctx, key)
				if err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						c.errors++
						mu.Unlock()
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				now := time.Now()
				if holders.Add(1) != 1 {
					mu.Lock()
					c.overlaps++
					mu.Unlock()
				}
				if now.Before(end) {
					mu.Lock()
					c.grants++
					c.perWorker[i]++
					c.waits = append(c.waits, now.Sub(t0))
					if last != i {
						c.changes++
					}
					last = i
					mu.Unlock()
				}
				if hold > 0 {
					time.Sleep(hold)
				}
				holders.Add(-1)
				unlock()
			}
		})
	}
	wg.Wait()
	c.elapsed += d
}

// manyKeys is the outcome of the many-keys scenario.
type manyKeys struct {
	n                  int // names asked for
	held               int // names locked (n unless locks failed or the run stopped)
	workers            int
	lockTime, freeTime time.Duration
	heapPerLock        float64 // Go heap bytes per held lock, after GC
	goroutinesPerLock  float64
	machinePerLock     float64 // the machine's available memory it took, bytes per held lock (client and servers)
	errors             int
	stopped            string // why the run stopped before every name was locked, if it did
	firstErr           string // the first lock call's error, if one failed
	// unlockErrors counts the unlocks that failed: for dlock, a lease
	// lost while it was held (its Unlock reports ErrLeaseLost), so the
	// names were not all held at once. firstUnlockErr is the first.
	unlockErrors   int
	firstUnlockErr string
	// shed says whether the library's shed ran while the names were
	// held; shedHeapPerLock and shedGoroutinesPerLock are heapPerLock and
	// goroutinesPerLock after it, shedErrors the lock and unlock calls
	// that failed in the run that measured them.
	shed                                   bool
	shedHeapPerLock, shedGoroutinesPerLock float64
	shedErrors                             int
}

// stoppedNote is ", stopped: why" if the run stopped early.
func (m *manyKeys) stoppedNote() string {
	note := ""
	if m.firstErr != "" {
		note = ", the first error: " + m.firstErr
	}
	if m.unlockErrors > 0 {
		note += fmt.Sprintf(", %d unlocks failed (a lease lost while held), the first: %s", m.unlockErrors, m.firstUnlockErr)
	}
	if m.stopped != "" {
		note += ", stopped: " + m.stopped
	}
	return note
}

// minFreeMemory is the machine's available memory below which a run of
// scenario C stops locking more names: the machine has no swap to fall
// back on, and the servers and the other work on it need some.
const minFreeMemory = 1 << 30

// memAvailable is the machine's available memory in bytes
// (/proc/meminfo's MemAvailable), or the largest value if unknown.
func memAvailable() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return math.MaxUint64
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				break
			}
			return kb << 10
		}
	}
	return math.MaxUint64
}

// run has the workers lock n distinct names between them, all held at
// once, measures this process's heap and goroutines, then unlocks them all.
// It stops locking, and says so in m.stopped, when the machine's
// available memory runs low, or when unlocking what it holds, at twice the
// time unlockRate (per second) says, would end past deadline (the run's
// budget). If shed is not nil, it runs before the names are locked and
// again while they are held, and the heap and goroutines are measured
// again after that.
func (m *manyKeys) run(ws []worker, prefix string, n int, deadline time.Time, unlockRate float64, shed func(), progress func(string, ...any)) {
	m.n = n
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	lockCtx, stopLocking := context.WithCancel(ctx)
	defer stopLocking()
	unlocks := make([][]func() error, len(ws))
	names := make([][]string, len(ws))
	for i := range ws {
		for k := i; k < n; k += len(ws) {
			names[i] = append(names[i], prefix+strconv.Itoa(k))
		}
		unlocks[i] = make([]func() error, 0, len(names[i]))
	}
	if shed != nil {
		shed() // what earlier runs left cached is not this run's
	}
	heap0, g0 := testenv.LiveHeap()
	mem0 := memAvailable()
	var errs atomic.Int64
	var done atomic.Int64
	stop := make(chan struct{})
	var stopped, firstErr atomic.Value
	go func() { // progress, for long runs, and the memory it leaves
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			case <-t.C:
				if time.Now().Add(time.Duration(2 * float64(done.Load()) / unlockRate * float64(time.Second))).After(deadline) {
					why := fmt.Sprintf("the run's budget ran out with %d names held", done.Load())
					stopped.Store(why)
					progress("  %s: no more locks", why)
					stopLocking()
					return
				}
				if avail := memAvailable(); avail < minFreeMemory {
					why := fmt.Sprintf("the machine's available memory fell to %d MiB with %d names held", avail>>20, done.Load())
					stopped.Store(why)
					progress("  %s: no more locks", why)
					stopLocking()
					return
				}
				if i%10 == 0 {
					progress("  %d/%d locked, %d MiB of memory available", done.Load(), n, memAvailable()>>20)
				}
			}
		}
	}()
	start := time.Now()
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() {
			for _, name := range names[i] {
				if lockCtx.Err() != nil {
					errs.Add(1)
					continue
				}
				unlock, err := w.lock(lockCtx, name)
				if err != nil {
					if errs.Add(1) == 1 {
						firstErr.Store(err.Error())
					}
					continue
				}
				unlocks[i] = append(unlocks[i], unlock)
				done.Add(1)
			}
		})
	}
	wg.Wait()
	close(stop)
	m.lockTime = time.Since(start)
	heap1, g1 := testenv.LiveHeap()
	mem1 := memAvailable()
	if why, ok := stopped.Load().(string); ok {
		m.stopped = why
	}
	if e, ok := firstErr.Load().(string); ok {
		m.firstErr = e
	}
	held := float64(max(done.Load(), 1))
	m.machinePerLock = float64(int64(mem0)-int64(mem1)) / held
	m.held, m.workers = int(done.Load()), len(ws)
	m.heapPerLock = float64(heap1-heap0) / held
	m.goroutinesPerLock = float64(g1-g0) / held
	if shed != nil {
		shed()
		heap2, g2 := testenv.LiveHeap()
		m.shed = true
		m.shedHeapPerLock = float64(heap2-heap0) / held
		m.shedGoroutinesPerLock = float64(g2-g0) / held
	}
	start = time.Now()
	var unlockErrs atomic.Int64
	var firstUnlockErr atomic.Value
	for i := range ws {
		wg.Go(func() {
			for _, unlock := range unlocks[i] {
				if err := unlock(); err != nil && unlockErrs.Add(1) == 1 {
					firstUnlockErr.Store(err.Error())
				}
			}
		})
	}
	wg.Wait()
	m.freeTime = time.Since(start)
	m.errors = int(errs.Load())
	m.unlockErrors = int(unlockErrs.Load())
	if e, ok := firstUnlockErr.Load().(string); ok {
		m.firstUnlockErr = e
	}
}

func (m *manyKeys) lockPerSec() float64 { return float64(m.held) / m.lockTime.Seconds() }
func (m *manyKeys) freePerSec() float64 { return float64(m.held) / m.freeTime.Seconds() }
