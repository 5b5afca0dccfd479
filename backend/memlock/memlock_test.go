package memlock_test

import (
	"context"
	"testing"

	"github.com/dlock/dlock/backend/memlock"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/driver"
)

func TestMain(m *testing.M) { dlocktest.Main(m) }

func TestConformance(t *testing.T) {
	srv := memlock.NewServer()
	open := func(ctx context.Context, addrs []string) (driver.Driver, error) { return memlock.New(srv), nil }
	t.Run("KeepsTheContract", func(t *testing.T) { dlocktest.Run(t, dlocktest.Harness{Open: open}) })
	t.Run("KeepsTheContractGrantingInArrivalOrder", func(t *testing.T) { dlocktest.Run(t, dlocktest.Harness{Open: open, Fair: true}) })
}
