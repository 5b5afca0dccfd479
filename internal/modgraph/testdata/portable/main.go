// Command portable links the portable layer alone (dlock, driver, dlocktest, memlock): its module graph (go list -m all) is the one a
// user's program gets. See the modgraph test.
package main

import (
	"github.com/dlock/dlock"
	_ "github.com/dlock/dlock/backend/memlock"
	_ "github.com/dlock/dlock/dlocktest"
	_ "github.com/dlock/dlock/driver"
)

func main() { _ = dlock.Open }
