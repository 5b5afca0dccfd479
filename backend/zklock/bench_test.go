package zklock

import (
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/driver"
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
		conn, _, err := zk.Connect(addrs, DefaultSessionTimeout, zk.WithLogger(debugLogger{slog.New(slog.DiscardHandler)}), zk.WithLogInfo(false))
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
		alternate(b, 1, "dlock-grants/s", "zk.Lock-grants/s",
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
		alternate(b, 40, "dlock-grants/s", "zk.Lock-grants/s",
			func(n int) { contend(n, workers, func(w int) { dlockOne(b, ms[w]) }) },
			func(n int) { contend(n, workers, func(w int) { zkOne(b, lks[w]) }) })
	})
}

// alternate runs b.N operations of each of two contenders (dlock and
// zk.Lock, say), in alternating rounds of up to round operations, and
// reports the rate of each, under the metric names given, and their ratio
// (first/second). Rates are taken from the median round, since a busy
// machine stalls some rounds for far longer than an operation takes; the
// ratio of the mean rates is reported too.
func alternate(b *testing.B, round int, dlockName, zkName string, dlockRun, zkRun func(n int)) {
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
	b.ReportMetric(rd, dlockName)
	b.ReportMetric(rz, zkName)
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

// BenchmarkRenewal measures a lease renewal as Extend makes it, one at a
// time — a sync, which the server answers only once the leader has (the
// watch that the first renewal set on the holder's node stands in for a
// read of it) — side by side with the plain read of the node that
// renewals were before (a follower cut off from the leader answers it from
// stale state), on the same connection: against a standalone server, and
// against a 3-server ensemble through a follower, where the sync travels to
// the leader and back. It reports the renewals/s of each and their ratio
// (sync / read).
//
//	go test ./backend/zklock -run '^$' -bench Renewal -benchtime 2000x
func BenchmarkRenewal(b *testing.B) {
	b.Run("standalone", func(b *testing.B) {
		benchmarkRenewal(b, testenv.StartZooKeeper(b, testenv.ZooKeeperOptions{}).Addrs()[0])
	})
	b.Run("ensemble-follower", func(b *testing.B) {
		z := testenv.StartZooKeeperEnsemble(b, 3, testenv.ZooKeeperOptions{})
		leader := z.Leader()
		for _, s := range z.Servers {
			if s != leader {
				benchmarkRenewal(b, s.Addr)
				return
			}
		}
	})
}

func benchmarkRenewal(b *testing.B, addr string) {
	d := openURL(b, zkURL([]string{addr}, "/bench", ""))
	ctx := testenv.Context(b, 10*time.Minute)
	owner := strings.Repeat("b", 32)
	g, err := d.Acquire(ctx, driver.Request{Name: "renewal", Owner: owner, TTL: d.Capabilities().MinTTL, Wait: true})
	if err != nil {
		b.Fatal(err)
	}
	held := driver.Held{Name: "renewal", Owner: owner, Token: g.Token, Handle: g.Handle}
	path := g.Handle.(*lockNode).path
	alternate(b, 50, "sync-renewals/s", "read-renewals/s",
		func(n int) {
			for range n {
				if err := d.Extend(ctx, held, 0); err != nil {
					b.Fatal(err)
				}
			}
		},
		func(n int) {
			for range n {
				if ok, _, err := d.Conn().Exists(path); err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
		})
	if err := d.Release(ctx, held); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRenewals renews 20,000 held leases one Extend each against
// batched (driver.BatchExtender: one sync per batch), side by side
// (dlocktest.BenchRenewals), in a session of 2 minutes (the test server's
// longest), so that the leases outlast their own acquiring.
//
//	go test ./backend/zklock -run '^$' -bench Renewals -benchtime 3x
func BenchmarkRenewals(b *testing.B) {
	z := testenv.StartZooKeeper(b, testenv.ZooKeeperOptions{NoSync: true})
	dlocktest.BenchRenewals(b, openURL(b, zkURL(z.Addrs(), "/bench", "session_timeout=2m")), 20000)
}

// BenchmarkHeldLocks measures what holding a lock costs the client, as
// bench/'s "C. Many names" does: 8 workers, each with its own client and
// connection, lock 10,000 distinct names between them and hold them all;
// it reports the growth of this process's live heap (after two
// collections) and of its goroutine count while they are held, per held
// lock, then unlocks them all.
//
//	go test ./backend/zklock -run '^$' -bench HeldLocks -benchtime 1x
func BenchmarkHeldLocks(b *testing.B) {
	const workers, names = 8, 10_000
	addrs := testenv.StartZooKeeper(b, testenv.ZooKeeperOptions{NoSync: true}).Addrs()
	ctx := testenv.Context(b, 30*time.Minute)
	clients := make([]*dlock.Client, workers)
	for i := range clients {
		d := openURL(b, zkURL(addrs, "/bench-held", ""))
		clients[i] = dlock.New(d, dlock.WithTTL(10*time.Minute))
	}
	var heapSum, goSum float64
	b.ResetTimer()
	for range b.N {
		held := make([][]*dlock.Lease, workers)
		for w := range held {
			held[w] = make([]*dlock.Lease, 0, names/workers+1)
		}
		heap0, g0 := testenv.LiveHeap()
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for k := w; k < names; k += workers {
					l, err := clients[w].Mutex("held-" + strconv.Itoa(k)).Lock(ctx)
					if err != nil {
						b.Error(err)
						return
					}
					held[w] = append(held[w], l)
				}
			})
		}
		wg.Wait()
		heap1, g1 := testenv.LiveHeap()
		heapSum += float64(heap1-heap0) / names
		goSum += float64(g1-g0) / names
		for w := range workers {
			wg.Go(func() {
				for _, l := range held[w] {
					if err := l.Unlock(ctx); err != nil {
						b.Error(err)
					}
				}
			})
		}
		wg.Wait()
	}
	b.StopTimer()
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(heapSum/float64(b.N), "heap-B/held-lock")
	b.ReportMetric(goSum/float64(b.N), "goroutines/held-lock")
}
