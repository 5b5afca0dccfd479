package driver

import "time"

// ExtendGroups is the shape of a BatchExtender.ExtendBatch whose engine
// renews many leases of one TTL in one statement: alone says which
// extensions are renewed one by one, with one (a semaphore's permit, a
// session-held lock); the others are grouped by TTL, in order, at most
// MaxBatch to a group, and each group goes to many, or to one when it
// holds a single lease. one's answer is put in errs; many sets the errs of
// its group itself.
func ExtendGroups(b []Extension, errs []error, alone func(Extension) bool, one func(Extension) error, many func(idx []int, ttl time.Duration)) {
	var ttls []time.Duration
	byTTL := map[time.Duration][]int{}
	for i, e := range b {
		if alone(e) {
			errs[i] = one(e)
			continue
		}
		if _, ok := byTTL[e.TTL]; !ok {
			ttls = append(ttls, e.TTL)
		}
		byTTL[e.TTL] = append(byTTL[e.TTL], i)
	}
	for _, ttl := range ttls {
		for idx := byTTL[ttl]; len(idx) > 0; {
			n := min(len(idx), MaxBatch)
			if n == 1 {
				errs[idx[0]] = one(b[idx[0]])
			} else {
				many(idx[:n], ttl)
			}
			idx = idx[n:]
		}
	}
}

// Renewed is the set of leases, by name and owner, that a statement
// renewing many of them reports it renewed.
type Renewed map[string]struct{}

// Add puts the lease of name and owner in r.
func (r Renewed) Add(name, owner string) { r[name+"\x00"+owner] = struct{}{} }

// Has reports whether h's lease is in r.
func (r Renewed) Has(h Held) bool {
	_, ok := r[h.Name+"\x00"+h.Owner]
	return ok
}
