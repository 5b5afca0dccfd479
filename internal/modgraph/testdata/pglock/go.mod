module example.com/consumer/pglock

go 1.26.0

replace (
	github.com/dlock/dlock => ../../../..
	github.com/dlock/dlock/backend/pglock => ../../../../backend/pglock
)

require (
	github.com/dlock/dlock v0.0.0-00010101000000-000000000000
	github.com/dlock/dlock/backend/pglock v0.0.0-00010101000000-000000000000
)

require (
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/pgx/v5 v5.7.4 // indirect
	github.com/jackc/puddle/v2 v2.2.2 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
