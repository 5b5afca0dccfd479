package pglock

// Heard returns how many notifications d's LISTEN connection has received.
func Heard(d *Driver) int64 { return d.listen.heard.Load() }

// LockNameSQL returns d's lockNameSQL, bound to its table ($1 name).
func LockNameSQL(d *Driver) string { return d.lockNameSQL }

// FastAcquireSQL returns d's fastAcquireSQL, bound to its table.
func FastAcquireSQL(d *Driver) string { return d.fastAcquireSQL }

// ListenKey returns the advisory lock d's LISTEN connection holds while it
// lives (set once d's table is bound: after Migrate or a first call).
func ListenKey(d *Driver) int64 {
	d.listen.mu.Lock()
	defer d.listen.mu.Unlock()
	return d.listen.key
}

// FreeSQL returns d's freeSQL, bound to its table.
func FreeSQL(d *Driver) string { return d.freeSQL }

// HandOffSQL returns d's handOffSQL, bound to its table.
func HandOffSQL(d *Driver) string { return d.handOffSQL }

// Channel returns the NOTIFY channel of d's table (set once d's table is
// bound) and the payload that names name on it.
func Channel(d *Driver, name string) (string, string) { return d.channel, payload(d.key(name)) }

// JoinQueueAloneSQL returns d's joinQueueAloneSQL, bound to its table.
func JoinQueueAloneSQL(d *Driver) string { return d.joinQueueAloneSQL }

// ExtendSQL returns d's extendSQL, bound to its table.
func ExtendSQL(d *Driver) string { return d.extendSQL }

// ExtendManySQL returns d's extendManySQL, bound to its table.
func ExtendManySQL(d *Driver) string { return d.extendManySQL }

// PermitExtendSQL returns d's permitExtendSQL, bound to its tables.
func PermitExtendSQL(d *Driver) string { return d.permitExtendSQL }

// ReleaseSQL returns d's releaseSQL, bound to its table.
func ReleaseSQL(d *Driver) string { return d.releaseSQL }

// IdleSessionConns returns how many released connections d keeps for its
// next session locks.
func IdleSessionConns(d *Driver) int {
	d.sessions.mu.Lock()
	defer d.sessions.mu.Unlock()
	return len(d.sessions.idle)
}
