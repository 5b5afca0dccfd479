// Command dlockotel links the portable layer with its OpenTelemetry
// hooks: its module graph (go list -m all) is the one a user's program
// gets for telemetry. See the modgraph test.
package main

import (
	"github.com/dlock/dlock"
	_ "github.com/dlock/dlock/backend/memlock"
	"github.com/dlock/dlock/dlockotel"
)

func main() { _ = dlock.New; _ = dlockotel.WithTelemetry }
