package redisscript

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/dlock/dlock/driver"
)

var routeOnce sync.Once

// RouteLogs sends go-redis's own log lines (a pool's failed dial, …) to
// driver.Logger of the call's context, at debug level, instead of the
// standard logger: the errors that matter reach the caller as errors, in
// one line. go-redis has one logger per process; the backends set it when
// they open a URL, never for a client given to New.
func RouteLogs() {
	routeOnce.Do(func() { redis.SetLogger(logRouter{}) })
}

type logRouter struct{}

func (logRouter) Printf(ctx context.Context, format string, v ...any) {
	if ctx == nil {
		ctx = context.Background()
	}
	driver.Logger(ctx).DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}
