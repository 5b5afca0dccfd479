module example.com/consumer/zklock

go 1.26.0

replace (
	github.com/dlock/dlock => ../../../..
	github.com/dlock/dlock/backend/zklock => ../../../../backend/zklock
)

require (
	github.com/dlock/dlock v0.0.0-00010101000000-000000000000
	github.com/dlock/dlock/backend/zklock v0.0.0-00010101000000-000000000000
)

require github.com/go-zookeeper/zk v1.0.4 // indirect
