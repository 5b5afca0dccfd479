module github.com/dlock/dlock

go 1.26

require github.com/go-sql-driver/mysql v1.9.1

require filippo.io/edwards25519 v1.1.0 // indirect
