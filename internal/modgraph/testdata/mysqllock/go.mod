module example.com/consumer/mysqllock

go 1.26.0

replace (
	github.com/dlock/dlock => ../../../..
	github.com/dlock/dlock/backend/mysqllock => ../../../../backend/mysqllock
)

require (
	github.com/dlock/dlock v0.0.0-00010101000000-000000000000
	github.com/dlock/dlock/backend/mysqllock v0.0.0-00010101000000-000000000000
)

require (
	filippo.io/edwards25519 v1.1.0 // indirect
	github.com/go-sql-driver/mysql v1.9.1 // indirect
)
