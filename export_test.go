package dlock

// MaxRenewals is maxRenewals, for the scheduler's tests.
const MaxRenewals = maxRenewals
