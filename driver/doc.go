// Package driver is the contract between dlock's portable layer and a
// coordination engine. Users import package dlock; backend authors implement
// Driver.
//
// A driver does only what must be atomic on its engine: acquire with a
// fencing token, extend and release with an owner check, its wake-up, and
// inspect and break. Everything that is the same for all engines — name
// validation, owner keys, renewal, lease-loss detection, Do, metrics and
// logging — lives in package dlock and is never repeated in a driver.
//
// Errors: return the sentinels below (wrapped with %w when there is more to
// say) so that the portable layer and users can tell the cases apart, and
// pass every other failure through Classify: the caller's context ending
// gives its error, a network or server failure ErrUnavailable wrapping it.
//
// The rest of this package is what every backend would otherwise write
// for itself: Classify, the lease clock (Now, Since, NewTimer, …) for
// Grant.Since and lease deadlines, Alarms for a deadline per held lock on
// one timer, Backoff for retry schedules, NewNonce for unguessable names,
// AcquireByRetry for engines without a queue.
package driver
