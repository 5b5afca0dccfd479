// Command pglock links dlock and its pglock backend, and nothing else: its module graph (go list -m all) is the one a
// user's program gets. See the modgraph test.
package main

import (
	"github.com/dlock/dlock"
	_ "github.com/dlock/dlock/backend/pglock"
)

func main() { _ = dlock.Open }
