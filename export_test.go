package dlock

// MaxRenewals is maxRenewals, for the scheduler's tests.
const MaxRenewals = maxRenewals

// MaxBatchRenewals is maxBatchRenewals, for the scheduler's tests.
const MaxBatchRenewals = maxBatchRenewals

// Scheduled returns the number of c's leases that have a renewal or an
// expiry check set in its scheduler.
func Scheduled(c *Client) int { return c.sched.Len() }
