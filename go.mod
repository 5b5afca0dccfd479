module github.com/dlock/dlock

go 1.26

require (
	github.com/go-sql-driver/mysql v1.9.1
	github.com/go-zookeeper/zk v1.0.4
	github.com/jackc/pgx/v5 v5.7.4
)

require (
	filippo.io/edwards25519 v1.1.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.2 // indirect
	golang.org/x/crypto v0.31.0 // indirect
	golang.org/x/sync v0.10.0 // indirect
	golang.org/x/text v0.21.0 // indirect
)
