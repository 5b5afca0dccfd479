module example.com/consumer/redislock

go 1.26.0

replace (
	github.com/dlock/dlock => ../../../..
	github.com/dlock/dlock/backend/internal/redisscript => ../../../../backend/internal/redisscript
	github.com/dlock/dlock/backend/redislock => ../../../../backend/redislock
)

require (
	github.com/dlock/dlock v0.0.0-00010101000000-000000000000
	github.com/dlock/dlock/backend/redislock v0.0.0-00010101000000-000000000000
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dlock/dlock/backend/internal/redisscript v0.0.0-00010101000000-000000000000 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
