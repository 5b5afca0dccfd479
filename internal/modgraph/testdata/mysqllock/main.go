// Command mysqllock links dlock and its mysqllock backend, and nothing else: its module graph (go list -m all) is the one a
// user's program gets. See the modgraph test.
package main

import (
	"github.com/dlock/dlock"
	_ "github.com/dlock/dlock/backend/mysqllock"
)

func main() { _ = dlock.Open }
