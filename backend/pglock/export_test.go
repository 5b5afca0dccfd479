package pglock

// Heard returns how many notifications d's LISTEN connection has received.
func Heard(d *Driver) int64 { return d.listen.heard.Load() }
