package redisscript

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/dlock/dlock/driver"
)

// Unavailable wraps a Redis failure as driver.ErrUnavailable, with a hint
// for the errors a user can fix (a wrong password, a missing ACL
// permission). where names the server (never with its password). When ctx
// has ended, ctx's error is returned instead.
func Unavailable(ctx context.Context, where string, err error) error {
	if ctx.Err() != nil {
		// go-redis turns ctx's deadline into the connection's, so a
		// dial, a TLS handshake or a write that ctx cut short fails with
		// a network timeout rather than ctx's error.
		var ne net.Error
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
			return ctx.Err()
		}
	}
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "WRONGPASS"):
		return fmt.Errorf("%w: redis %s: authentication failed: wrong user name or password: %w", driver.ErrUnavailable, where, err)
	case strings.HasPrefix(msg, "NOAUTH"):
		return fmt.Errorf("%w: redis %s: the server requires a password, and none was given: %w", driver.ErrUnavailable, where, err)
	case strings.HasPrefix(msg, "NOPERM"):
		return fmt.Errorf("%w: redis %s: the ACL user lacks a permission dlock needs (grant it ~<prefix>:* &<prefix>:* +eval +evalsha +get +pttl +time +lrange +hgetall +scan +hget +subscribe +unsubscribe +ping, or +@all): %w", driver.ErrUnavailable, where, err)
	}
	return fmt.Errorf("%w: redis %s: %w", driver.ErrUnavailable, where, err)
}
