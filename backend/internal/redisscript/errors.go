package redisscript

import (
	"context"
	"strings"

	"github.com/dlock/dlock/driver"
)

// Unavailable classifies a Redis failure (driver.Classify), with a hint
// for the errors a user can fix (a wrong password, a missing ACL
// permission). where names the server (never with its password). go-redis
// turns ctx's deadline into the connection's, so a dial, a TLS handshake
// or a write that ctx cut short fails with a network timeout rather than
// ctx's error; Classify returns ctx's error for it all the same.
func Unavailable(ctx context.Context, where string, err error) error {
	what := "redis " + where
	if err != nil {
		msg := err.Error()
		switch {
		case strings.HasPrefix(msg, "WRONGPASS"):
			what += ": authentication failed: wrong user name or password"
		case strings.HasPrefix(msg, "NOAUTH"):
			what += ": the server requires a password, and none was given"
		case strings.HasPrefix(msg, "NOPERM"):
			what += ": the ACL user lacks a permission dlock needs (grant it ~<prefix>:* &<prefix>:* +eval +evalsha +get +pttl +time +lrange +hgetall +scan +hget +subscribe +unsubscribe +ping, or +@all; with compat=setnx also the lock keys themselves, and &__keyspace@*)"
		}
	}
	return driver.Classify(ctx, what, err)
}
