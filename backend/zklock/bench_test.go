package zklock

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/internal/testenv"
)

// BenchmarkLock measures dlock over zklock side by side with
// go-zookeeper's own zk.Lock, against one server: uncontended lock+unlock
// on one connection, and hand-offs of one lock between 8 workers, each with
// its own connection. The two run in alternating rounds within each
// benchmark, so that a change in the machine's load affects both alike; it
// reports the grants/s of each and their ratio (dlock/zk.Lock). It runs
// against a server that syncs its log to disk before acknowledging a write
// (ZooKeeper's default: on this loopback setup the disk dominates), against
// one that does not (forceSync=no: the server's and clients' CPU
// dominates), and against that one through a proxy that adds half a
// millisecond each way, as a network between machines does (the round trips
// dominate).
//
//	go test ./backend/zklock -run '^$' -bench Lock -benchtime 800x
func BenchmarkLock(b *testing.B) {
	for _, mode := range []struct {
		name   string
		noSync bool
		delay  time.Duration
	}{{"fsync", false, 0}, {"nosync", true, 0}, {"nosync-1ms-rtt", true, 500 * time.Microsecond}} {
		b.Run(mode.name, func(b *testing.B) {
			addrs := testenv.StartZooKeeper(b, testenv.ZooKeeperOptions{NoSync: mode.noSync}).Addrs()
			if mode.delay > 0 {
				p := testenv.NewProxy(b, addrs[0])
				p.SetDelay(mode.delay)
				addrs = []string{p.Addr()}
			}
			benchmarkLock(b, addrs)
		})
	}
}

func benchmarkLock(b *testing.B, addrs []string) {
	newDlock := func(b *testing.B) *dlock.Client {
		d := openURL(b, zkURL(addrs, "/bench", ""))
		return dlock.New(d, dlock.WithTTL(d.Capabilities().MinTTL))
	}
	newZK := func(b *testing.B) *zk.Conn {
		conn, _, err := zk.Connect(addrs, DefaultSessionTimeout, zk.WithLogger(quietLogger{}), zk.WithLogInfo(false))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(conn.Close)
		return conn
	}
	ctx := testenv.Context(b, 10*time.Minute)
	dlockOne := func(b *testing.B, m *dlock.Mutex) {
		l, err := m.Lock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	zkOne := func(b *testing.B, lk *zk.Lock) {
		if err := lk.Lock(); err != nil {
			b.Fatal(err)
		}
		if err := lk.Unlock(); err != nil {
			b.Fatal(err)
		}
	}

	b.Run("Uncontended", func(b *testing.B) {
		m := newDlock(b).Mutex("uncontended")
		lk := zk.NewLock(newZK(b), "/zk-bench/uncontended", zk.WorldACL(zk.PermAll))
		dlockOne(b, m) // create the parents
		zkOne(b, lk)
		alternate(b, 1,
			func(n int) {
				for range n {
					dlockOne(b, m)
				}
			},
			func(n int) {
				for range n {
					zkOne(b, lk)
				}
			})
	})
	b.Run("Contended8", func(b *testing.B) {
		const workers = 8
		ms := make([]*dlock.Mutex, workers)
		lks := make([]*zk.Lock, workers)
		for i := range workers {
			ms[i] = newDlock(b).Mutex("contended")
			lks[i] = zk.NewLock(newZK(b), "/zk-bench/contended", zk.WorldACL(zk.PermAll))
		}
		alternate(b, 40,
			func(n int) { contend(n, workers, func(w int) { dlockOne(b, ms[w]) }) },
			func(n int) { contend(n, workers, func(w int) { zkOne(b, lks[w]) }) })
	})
}

// alternate runs b.N grants of each of dlock and zk.Lock, in alternating
// rounds of up to round grants, and reports the rate of each and their
// ratio (dlock/zk.Lock). Rates are taken from the median round, since a
// busy machine stalls some rounds for far longer than a grant takes; the
// ratio of the mean rates is reported too.
func alternate(b *testing.B, round int, dlockRun, zkRun func(n int)) {
	var dRounds, zRounds []time.Duration
	var td, tz time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += round {
		n := min(round, b.N-done)
		s := time.Now()
		dlockRun(n)
		d := time.Since(s)
		s = time.Now()
		zkRun(n)
		z := time.Since(s)
		td, tz = td+d, tz+z
		if n == round {
			dRounds, zRounds = append(dRounds, d), append(zRounds, z)
		}
	}
	b.StopTimer()
	if len(dRounds) == 0 {
		return
	}
	slices.Sort(dRounds)
	slices.Sort(zRounds)
	rd := float64(round) / dRounds[len(dRounds)/2].Seconds()
	rz := float64(round) / zRounds[len(zRounds)/2].Seconds()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(rd, "dlock-grants/s")
	b.ReportMetric(rz, "zk.Lock-grants/s")
	b.ReportMetric(rd/rz, "ratio")
	b.ReportMetric(tz.Seconds()/td.Seconds(), "mean-ratio")
}

// contend has workers take turns through one lock until n grants in all.
func contend(n, workers int, one func(w int)) {
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				one(w)
			}
		})
	}
	wg.Wait()
}
