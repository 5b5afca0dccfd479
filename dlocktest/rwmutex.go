package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/internal/testenv"
)

// rwTests are the read-write lock's part of the contract, run on every
// backend whose Capabilities.RWMutex is true.
func (s *suite) rwTests() []test {
	return []test{
		{"RWMutexReadersShareAndWritersHoldAlone", s.testRWExclusion},
		{"RWMutexWriterIsNotStarvedByReaders", s.testRWWriterNotStarved},
		{"RWMutexTryRLockDoesNotPassAWaitingWriter", s.testRWTryRLock},
		{"RWMutexInspectShowsEveryReader", s.testRWInspect},
		{"RWMutexCancelledWriterLeavesNothingBehind", s.testRWCancel},
	}
}

// rwLog checks, as grants happen, what the read-write contract says of
// them: a writer holds alone, readers only beside readers, and tokens in
// grant order — a writer's above every earlier grant's, a reader's above
// every earlier writer's.
type rwLog struct {
	mu               sync.Mutex
	readers, writers int
	mostReaders      int
	maxAll, maxWrite uint64
	grants           int
}

func (g *rwLog) enter(shared bool, token uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.grants++
	if shared {
		g.readers++
		g.mostReaders = max(g.mostReaders, g.readers)
		if g.writers > 0 {
			return fmt.Errorf("a reader (token %d) holds beside a writer", token)
		}
		if token <= g.maxWrite {
			return fmt.Errorf("a reader's token %d is not above the earlier writer's %d", token, g.maxWrite)
		}
	} else {
		g.writers++
		if g.writers > 1 || g.readers > 0 {
			return fmt.Errorf("a writer (token %d) holds beside %d writers and %d readers", token, g.writers-1, g.readers)
		}
		if token <= g.maxAll {
			return fmt.Errorf("a writer's token %d is not above an earlier grant's %d", token, g.maxAll)
		}
		g.maxWrite = token
	}
	g.maxAll = max(g.maxAll, token)
	return nil
}

func (g *rwLog) leave(shared bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if shared {
		g.readers--
	} else {
		g.writers--
	}
}

// Six clients, each with its own connections, take turns as readers and
// writers: a writer always holds alone, readers hold together (at some
// point two or more at once), and tokens keep the read-write order.
func (s *suite) testRWExclusion(t *testing.T) {
	const clients, rounds = 6, 5
	name := s.name(t, "rw")
	var log rwLog
	s.eachClient(t, clients, func(i int, c *dlock.Client) error {
		for r := range rounds {
			shared := (i+r)%3 != 0 // two reads to each write
			do := c.DoShared
			if !shared {
				do = c.DoExclusive
			}
			err := do(testenv.Context(t, 120*time.Second), name, func(ctx context.Context, l *dlock.Lease) error {
				if err := log.enter(shared, l.Token()); err != nil {
					return err
				}
				defer log.leave(shared)
				time.Sleep(20 * time.Millisecond)
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	t.Logf("%d grants, at most %d readers at once", log.grants, log.mostReaders)
	if log.mostReaders < 2 {
		t.Errorf("at most %d reader at once: readers do not share the lock", log.mostReaders)
	}
}

// Three readers hold the lock in overlapping turns, so that it is never
// free of readers; a writer that asks is granted once the readers holding
// at that moment release — readers arriving after it wait behind it — and
// its wait is logged. The readers granted after it have higher tokens.
func (s *suite) testRWWriterNotStarved(t *testing.T) {
	name := s.name(t, "rw")
	const hold = 150 * time.Millisecond
	ctx, stop := context.WithCancel(testenv.Context(t, 120*time.Second))
	defer stop()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		after  []uint64 // tokens of readers granted after the writer
		writer uint64
	)
	for i := range 3 {
		c := s.client(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * hold / 3)
			for ctx.Err() == nil {
				l, err := c.RWMutex(name).RLock(ctx)
				if err != nil {
					return
				}
				mu.Lock()
				if writer != 0 {
					after = append(after, l.Token())
				}
				mu.Unlock()
				time.Sleep(hold)
				_ = l.Unlock(testenv.Context(t, 30*time.Second))
			}
		}()
	}
	time.Sleep(2 * hold) // the readers overlap by now
	w := s.client(t)
	asked := time.Now()
	l, err := w.RWMutex(name).Lock(testenv.Context(t, 30*time.Second))
	if err != nil {
		t.Fatalf("the writer was not granted among a stream of readers: %v", err)
	}
	waited := time.Since(asked)
	mu.Lock()
	writer = l.Token()
	mu.Unlock()
	time.Sleep(hold / 2)
	mustUnlock(t, l)
	time.Sleep(2 * hold) // readers take turns again
	stop()
	wg.Wait()
	t.Logf("the writer waited %v among readers each holding %v", waited.Round(time.Millisecond), hold)
	if waited > 10*hold+s.h.ttl() {
		t.Errorf("the writer waited %v among readers each holding %v: readers that came after it passed it", waited, hold)
	}
	if len(after) == 0 {
		t.Errorf("no reader was granted after the writer")
	}
	for _, tok := range after {
		if tok <= writer {
			t.Errorf("a reader granted after the writer has token %d, not above the writer's %d", tok, writer)
		}
	}
}

// A reader holds and a writer waits: TryRLock does not pass the waiting
// writer; once the reader releases, the writer is granted, and after the
// writer, TryRLock is.
func (s *suite) testRWTryRLock(t *testing.T) {
	name := s.name(t, "rw")
	c, w, late := s.client(t), s.client(t), s.client(t)
	ctx := testenv.Context(t, 60*time.Second)
	r, err := c.RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := w.RWMutex(name).Lock(ctx)
		if err != nil {
			t.Errorf("writer: %v", err)
		}
		got <- l
	}()
	testenv.Eventually(t, 10*time.Second, "the writer to queue", func() error {
		l, err := late.RWMutex(name).TryRLock(ctx)
		if l != nil {
			mustUnlock(t, l) // granted before the writer queued
		}
		if !errors.Is(err, dlock.ErrNotAcquired) {
			return fmt.Errorf("TryRLock while a writer waits: %v", err)
		}
		return nil
	})
	mustUnlock(t, r)
	wl := <-got
	if wl == nil {
		t.FailNow()
	}
	if _, err := late.RWMutex(name).TryRLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Errorf("TryRLock while the writer holds: got %v, want ErrNotAcquired", err)
	}
	mustUnlock(t, wl)
	l, err := late.RWMutex(name).TryRLock(ctx)
	if err != nil {
		t.Fatalf("TryRLock after the writer released: %v", err)
	}
	if l.Token() <= wl.Token() {
		t.Errorf("reader's token %d after the writer's %d", l.Token(), wl.Token())
	}
	mustUnlock(t, l)
}

// Inspect of a read-write lock held by readers lists each reader, marked
// shared, in grant order.
func (s *suite) testRWInspect(t *testing.T) {
	name := s.name(t, "rw")
	c := s.client(t, dlock.WithNote("reader"))
	ctx := testenv.Context(t, 60*time.Second)
	var held []*dlock.Lease
	for range 2 {
		l, err := c.RWMutex(name).RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	in, err := s.client(t).Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !in.Held || len(in.Permits) != 2 {
		t.Fatalf("Inspect = %+v; want held by 2 readers", in)
	}
	for i, p := range in.Permits {
		if p.Token != held[i].Token() || !p.Holder.Shared || p.Holder.Note != "reader" {
			t.Errorf("reader %d = %+v; want token %d, shared, the note", i, p, held[i].Token())
		}
	}
	for _, l := range held {
		mustUnlock(t, l)
	}
}

// A writer that gives up waiting behind a reader leaves nothing behind:
// readers that come later are granted beside the first at once.
func (s *suite) testRWCancel(t *testing.T) {
	name := s.name(t, "rw")
	c := s.client(t)
	ctx := testenv.Context(t, 60*time.Second)
	r, err := c.RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if l, err := s.client(t).RWMutex(name).Lock(wctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("writer behind a reader: got %v (lease %v), want context.DeadlineExceeded", err, l)
	}
	late := s.client(t)
	testenv.Eventually(t, 5*time.Second, "a reader to be granted beside the first once the writer gave up", func() error {
		l, err := late.RWMutex(name).TryRLock(ctx)
		if err != nil {
			return err
		}
		mustUnlock(t, l)
		return nil
	})
	mustUnlock(t, r)
}

// testRWUnsupported runs where Capabilities.RWMutex is false.
// A process holding a read lock beside this client's reader is killed: once
// this client's reader leaves, a writer is granted within the TTL (before
// half of it on session backends), with a token above both readers'.
func (s *suite) testRWCrashedReader(t *testing.T) {
	name := s.name(t, "rw")
	ttl := s.crashTTL()
	cmd, tok := startChild(t, s.h.URL, name, childReader, 0, ttl)
	c := s.client(t)
	ctx := testenv.Context(t, 30*time.Second)
	mine, err := c.RWMutex(name).RLock(ctx)
	if err != nil {
		t.Fatalf("RLock beside another process's reader: %v", err)
	}
	if _, err := c.RWMutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock while two readers hold: got %v, want ErrNotAcquired", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	mustUnlock(t, mine)
	wctx, cancel := context.WithTimeout(context.Background(), ttl+20*time.Second)
	defer cancel()
	w, err := s.client(t).RWMutex(name).Lock(wctx)
	if err != nil {
		t.Fatalf("the crashed reader's lease did not end within its TTL %v (+20s): %v", ttl, err)
	}
	s.freedInTime(t, "read lock", killed, ttl)
	if w.Token() <= max(tok, mine.Token()) {
		t.Errorf("the writer's token %d, want > %d and > %d (the readers')", w.Token(), tok, mine.Token())
	}
	mustUnlock(t, w)
}

func (s *suite) testRWUnsupported(t *testing.T) {
	c := s.client(t)
	ctx := testenv.Context(t, 30*time.Second)
	if l, err := c.RWMutex(s.name(t, "rw")).RLock(ctx); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("RLock on a backend without read-write locks: got %v (lease %v), want ErrUnsupported", err, l)
	}
	if l, err := c.RWMutex(s.name(t, "rw")).TryLock(ctx); !errors.Is(err, dlock.ErrUnsupported) {
		t.Errorf("RWMutex.TryLock on a backend without read-write locks: got %v (lease %v), want ErrUnsupported", err, l)
	}
}
