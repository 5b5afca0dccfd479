package zklock

import (
	"testing"

	"github.com/dlock/dlock/internal/testenv"
)

func testNoHerd(t *testing.T, z *testenv.ZooKeeper, open func(testing.TB, string) *Driver) {}
