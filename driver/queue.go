package driver

// QueueHolders returns how many contenders at the head of a queue hold
// their leases, for a backend that keeps one queue of contenders per name
// in arrival order (etcd's keys by create revision, ZooKeeper's sequential
// nodes) and grants from its head. size is the queue's length; holder(i)
// returns contender i's Request.Holder, and is asked only as far as
// needed; QueueHolders stops at its first error.
//
// Contender i holds when every contender ahead of it holds, and its own
// request admits it beside them: a reader's (HolderShared) when none of
// them is a writer, any other's when fewer than its limit (HolderLimit)
// are ahead. The first rule keeps grants in queue order — tokens taken
// from the queue order then increase in grant order — and means that a
// reader behind a waiting writer waits (writer preference), and that a
// contender asking with a higher limit does not pass one with a lower
// limit, which would then be granted while its own limit or more hold.
// With a mutex's requests only the head holds.
func QueueHolders(size int, holder func(i int) ([]byte, error)) (int, error) {
	writerAhead := false
	for i := range size {
		h, err := holder(i)
		if err != nil {
			return i, err
		}
		shared := HolderShared(h)
		if shared && writerAhead || !shared && i >= HolderLimit(h) {
			return i, nil
		}
		writerAhead = writerAhead || !shared
	}
	return size, nil
}
