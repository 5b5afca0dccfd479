package dlocktest

import (
	"context"
	"testing"
	"time"

	"github.com/dlock/dlock/driver"
)

// Harness connects the suite to one backend deployment.
type Harness struct {
	// Open returns a new, independent driver — its own connections, as a
	// separate process would have. If addrs is not nil it replaces
	// Endpoints, element by element: the suite passes the addresses of
	// proxies it runs in front of each endpoint, to cut or freeze that
	// client's traffic.
	Open func(ctx context.Context, addrs []string) (driver.Driver, error)

	// Endpoints are the host:port addresses of the backend's servers.
	// Without them the tests that cut, freeze or slow one client's
	// traffic (partition, frozen backend, send time, session loss) cannot
	// run: Run says so in the test output, and under DLOCK_REQUIRE=all it
	// fails unless NoEndpointsReason says why the deployment cannot have
	// them.
	Endpoints []string

	// NoEndpointsReason explains why a harness of a networked backend
	// gives no Endpoints (e.g. a deployment whose servers redirect clients
	// to their own addresses, past any proxy). Run prints it with the list
	// of tests that do not run.
	NoEndpointsReason string

	// URL opens the same deployment with dlock.Open in another process (the
	// crash tests). Empty for in-process backends.
	URL string

	// Restart stops every server of the deployment and starts it again with
	// the same data on the same endpoints. nil if the harness cannot; a
	// backend whose Capabilities claim DurableFencing must provide it.
	Restart func(t testing.TB)

	// TTL is the lease length the suite's expiry tests use: short, but well
	// above the backend's minimum. Default 2s.
	TTL time.Duration

	// Fair runs the whole suite with fair (FIFO) waiting. The FIFO tests
	// run whenever the backend's Capabilities.Fair is true, with or
	// without it, so that a claimed capability is always checked.
	Fair bool
}

func (h *Harness) ttl() time.Duration {
	if h.TTL > 0 {
		return h.TTL
	}
	return 2 * time.Second
}
