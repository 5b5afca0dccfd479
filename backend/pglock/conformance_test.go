package pglock_test

import (
	"context"
	"net/url"
	"testing"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/driver"
	"github.com/dlock/dlock/internal/testenv"
)

func TestMain(m *testing.M) { dlocktest.Main(m) }

// harness runs the conformance suite against srv with the URL query
// parameters query.
func harness(srv *testenv.Postgres, query string) dlocktest.Harness {
	return dlocktest.Harness{
		Open: func(ctx context.Context, addrs []string) (driver.Driver, error) {
			addr := srv.Addr
			if addrs != nil {
				addr = addrs[0]
			}
			return openDriver(ctx, srv.URL(addr, query))
		},
		Endpoints: []string{srv.Addr},
		URL:       srv.URL(srv.Addr, query),
		Restart:   srv.Restart,
	}
}

// openDriver opens a driver through dlock.Open, as a user would.
func openDriver(ctx context.Context, rawURL string) (driver.Driver, error) {
	if _, err := url.Parse(rawURL); err != nil {
		return nil, err
	}
	c, err := dlock.Open(ctx, rawURL)
	if err != nil {
		return nil, err
	}
	return c.Driver(), nil
}

func TestConformance(t *testing.T) {
	srv := testenv.StartPostgres(t)
	dlocktest.Run(t, harness(srv, "table=leases"))
}

func TestConformanceSessionLocks(t *testing.T) {
	srv := testenv.StartPostgres(t)
	dlocktest.Run(t, harness(srv, "table=session_leases&mode=session"))
}

// TestConformanceFair runs the whole suite with fair waiting
// (dlock.WithFair): every Lock waits in the queue and never passes a live
// waiter.
func TestConformanceFair(t *testing.T) {
	srv := testenv.StartPostgres(t)
	h := harness(srv, "table=fair_leases")
	h.Fair = true
	dlocktest.Run(t, h)
}
