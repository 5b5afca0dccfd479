module example.com/consumer/portable

go 1.26.0

replace github.com/dlock/dlock => ../../../..

require github.com/dlock/dlock v0.0.0-00010101000000-000000000000
