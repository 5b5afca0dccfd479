package main

// The backends built into the dlock command: each registers its URL scheme.
import (
	_ "github.com/dlock/dlock/backend/etcdlock"
	_ "github.com/dlock/dlock/backend/memlock"
	_ "github.com/dlock/dlock/backend/mysqllock"
	_ "github.com/dlock/dlock/backend/pglock"
	_ "github.com/dlock/dlock/backend/redislock"
	_ "github.com/dlock/dlock/backend/redlock"
	_ "github.com/dlock/dlock/backend/temporallock"
	_ "github.com/dlock/dlock/backend/zklock"
)
