module github.com/dlock/dlock

go 1.26.0
