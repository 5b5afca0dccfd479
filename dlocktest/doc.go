// Package dlocktest is the conformance suite every dlock backend runs: one
// test per point of the contract (mutual exclusion, fencing, ownership,
// liveness, observable lease loss, cancellation, errors, names), against real
// servers, with many independent clients.
//
// A backend's test calls Run with a Harness:
//
//	func TestConformance(t *testing.T) {
//		srv := testenv.StartRedis(t)
//		dlocktest.Run(t, dlocktest.Harness{
//			Open: func(ctx context.Context, addrs []string) (driver.Driver, error) { ... },
//			Endpoints: []string{srv.Addr},
//			URL: "redis://" + srv.Addr,
//		})
//	}
//
// and its TestMain calls Main, so that the suite can run the test binary as
// a lock-holding child process and kill it (the crash tests).
package dlocktest
