package temporallock

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

func TestMain(m *testing.M) { dlocktest.Main(m) }

// testTTL is the lease of the tests: generous, because a Temporal round
// trip on a busy two-core machine can take a while.
const testTTL = 10 * time.Second

// server is the one Temporal dev server of a TestOnTemporalDevServer run.
type server struct {
	*testenv.Temporal
}

func (s server) url(mode Mode) string {
	return "temporal://" + s.Addr + "/" + s.Namespace + "?mode=" + string(mode)
}

// open returns a driver, closed when t ends. addr overrides the server's
// address (a proxy in front of it).
func (s server) open(t testing.TB, addr string, opts ...Option) *Driver {
	t.Helper()
	return s.openDial(t, addr, nil, opts...)
}

// openDial is open with gRPC dial options for the client.
func (s server) openDial(t testing.TB, addr string, dial []grpc.DialOption, opts ...Option) *Driver {
	t.Helper()
	if addr == "" {
		addr = s.Addr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{HostPort: addr, Namespace: s.Namespace, Logger: sdkLogger(slog.Default()),
		ConnectionOptions: client.ConnectionOptions{DialOptions: dial}})
	if err != nil {
		t.Fatalf("dial temporal %s: %v", addr, err)
	}
	d, err := New(c, opts...)
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	d.own = true
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func (s server) client(t testing.TB, opts ...Option) *dlock.Client {
	return dlock.New(s.open(t, "", opts...), dlock.WithTTL(testTTL))
}

// startServer starts the dev server, with the dynamic config values given
// (testenv.StartTemporal), and waits until it serves the namespace through
// the SDK (describe namespace).
func startServer(t testing.TB, dynamic ...string) server {
	t.Helper()
	srv := server{testenv.StartTemporal(t, dynamic...)}
	waitReady(t, srv)
	return srv
}

func waitReady(t testing.TB, srv server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{HostPort: srv.Addr, Namespace: srv.Namespace, Logger: sdkLogger(slog.Default())})
	if err != nil {
		t.Fatalf("dial temporal: %v", err)
	}
	defer c.Close()
	for {
		if _, err = c.DescribeWorkflow(ctx, "dlock-readiness-probe", ""); isNotFound(err) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("temporal at %s not ready: %v", srv.Addr, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestOnTemporalDevServer runs every test that needs a server against one dev server
// (it takes seconds to start), one after the other.
func TestOnTemporalDevServer(t *testing.T) {
	srv := startServer(t)
	for _, mode := range []Mode{ModeFair, ModeID} {
		t.Run("Conformance/"+string(mode), func(t *testing.T) {
			dlocktest.Run(t, dlocktest.Harness{
				Open: func(ctx context.Context, addrs []string) (driver.Driver, error) {
					addr := srv.Addr
					if addrs != nil {
						addr = addrs[0]
					}
					u, _ := url.Parse(srv.url(mode))
					u.Host = addr
					return Open(ctx, u)
				},
				Endpoints: []string{srv.Addr},
				URL:       srv.url(mode),
				Restart: func(t testing.TB) {
					srv.Restart(t)
					waitReady(t, srv)
				},
				TTL:  testTTL,
				Fair: mode == ModeFair,
			})
		})
	}
	t.Run("NaiveStartReturnsRunningWorkflowButDlockIsNotFooled", func(t *testing.T) { testNaiveStart(t, srv) })
	for _, mode := range []Mode{ModeFair, ModeID} {
		t.Run("HolderThatStopsRenewingLosesToWaiter/"+string(mode), func(t *testing.T) { testStopsRenewing(t, srv, mode) })
	}
	t.Run("IDLeaseSurvivesContinueAsNew", func(t *testing.T) { testIDContinueAsNew(t, srv) })
	t.Run("WorkerKilledWhileHoldingLock", func(t *testing.T) { testWorkerKilled(t, srv) })
	t.Run("WorkflowLock", func(t *testing.T) { testWorkflowLock(t, srv) })
	t.Run("CountedGrantReplays", func(t *testing.T) { testCountedGrantReplays(t, srv) })
	t.Run("PermitsAreOwnerChecked", func(t *testing.T) { testPermitsAreOwnerChecked(t, srv) })
	t.Run("LaterPermitExpiresAlone", func(t *testing.T) { testLaterPermitExpiresAlone(t, srv) })
	t.Run("LeavingWaiterLetsOthersIn", func(t *testing.T) { testLeavingWaiterLetsOthersIn(t, srv) })
	t.Run("HeldLockKeepsOneGoroutineInTheWorker", func(t *testing.T) { testHeldLockKeepsOneGoroutine(t, srv) })
	t.Run("WaitersBeyondTheUpdateLimitAreAllServedInOrder", func(t *testing.T) { testManyWaiters(t, srv) })
	t.Run("ManyCancelledWaitersLeaveWithoutTakingUpdateSlots", func(t *testing.T) { testManyCancelledWaiters(t, srv) })
	t.Run("BurstOfArrivalsBeyondTheUpdateLimitIsServed", func(t *testing.T) { testBurstOfArrivals(t, srv) })
	t.Run("CrowdedNameQueuesBySignal", func(t *testing.T) { testCrowdedNameQueuesBySignal(t, srv) })
	t.Run("CrowdedLockOnOlderWorkflowQueuesByUpdate", func(t *testing.T) { testCrowdedLockOnOlderWorkflow(t, srv) })
	t.Run("ServerRestartKeepsHolderTokenAndQueue", func(t *testing.T) { testServerRestart(t, srv) })
	t.Run("CancelledLockThenProcessExitLeavesNoWaiter", func(t *testing.T) { testCancelledLockThenExit(t, srv) })
	t.Run("CancelledLockCutOffLeavesEntryThatExpires", func(t *testing.T) { testCancelledLockCutOffExpires(t, srv) })
	t.Run("TerminatedWorkflowWaiterLeavesQueue", func(t *testing.T) { testTerminatedWorkflowWaiter(t, srv) })
	t.Run("PausedHolderProcessDoesNotStallWaiter", func(t *testing.T) { testPausedHolderProcess(t, srv) })
	t.Run("PausedWorkersDoNotStallInspect", func(t *testing.T) { testPausedWorkersDoNotStallInspect(t, srv) })
	t.Run("IDAttemptTimeoutIsUnavailable", func(t *testing.T) { testIDAttemptTimeout(t, srv) })
	t.Run("WaiterOutlivesSlowAnswers", func(t *testing.T) { testWaiterOutlivesSlowAnswers(t, srv) })
}

// testNaiveStart reproduces the bug of a lock built on the Go SDK's
// ExecuteWorkflow without WorkflowExecutionErrorWhenAlreadyStarted: the
// second start of a running workflow ID returns the running workflow's run
// and no error, so both callers believe they hold the lock.
func testNaiveStart(t *testing.T, srv server) {
	d := srv.open(t, "", WithMode(ModeID))
	ctx := testenv.Context(t, 60*time.Second)
	name := "naive/" + t.Name()
	naive := client.StartWorkflowOptions{ID: WorkflowID(ModeID, name), TaskQueue: d.cfg.taskQueue}
	state := idLockState{Name: name, Owner: "naive", TTL: time.Minute}

	first, err := d.c.ExecuteWorkflow(ctx, naive, idLockWorkflowName, state)
	if err != nil {
		t.Fatalf("first naive start: %v", err)
	}
	second, err := d.c.ExecuteWorkflow(ctx, naive, idLockWorkflowName, state)
	if err != nil {
		t.Fatalf("second naive start failed (%v): the SDK no longer hides the conflict; the test's premise is gone", err)
	}
	if second.GetRunID() != first.GetRunID() {
		t.Fatalf("second naive start got a new run %s (first %s)", second.GetRunID(), first.GetRunID())
	}
	t.Logf("naive lock: both starts \"acquired\" (run %s twice)", first.GetRunID())

	// dlock, on the same workflow ID, sees the lock held...
	c := dlock.New(d, dlock.WithTTL(testTTL))
	if _, err := c.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("dlock TryLock while the naive run holds the ID: got %v, want ErrNotAcquired", err)
	}
	if err := c.Break(ctx, name); err != nil {
		t.Fatalf("Break: %v", err)
	}
	// ...and two dlock clients do not both acquire.
	c2 := dlock.New(srv.open(t, "", WithMode(ModeID)), dlock.WithTTL(testTTL))
	l, err := c.Mutex(name).TryLock(ctx)
	if err != nil {
		t.Fatalf("dlock TryLock of the free name: %v", err)
	}
	if _, err := c2.Mutex(name).TryLock(ctx); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("second dlock TryLock: got %v, want ErrNotAcquired", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}
