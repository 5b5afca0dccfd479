package etcdlock

// WatchedKeys returns how many keys d watches for their deletion.
func WatchedKeys(d *Driver) int {
	d.loss.mu.Lock()
	defer d.loss.mu.Unlock()
	n := len(d.loss.watched)
	for _, k := range d.loss.due {
		if k.hd.wid != ended {
			n++
		}
	}
	return n
}

// KeyWatchDelay is how long a granted key lives before its watch begins.
const KeyWatchDelay = keyWatchDelay
