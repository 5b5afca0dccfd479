// Package clock is the clock through which dlock's lease decisions read
// time: the send time of a renewal, the loss deadline, the renewal timer,
// Redlock's validity. By default it is exactly package time. Skew makes
// this process's clock run at another rate, with a wall offset, to test
// what a client whose clock is wrong does (dlock's verification harness
// runs one client process that way).
//
// Every reading keeps Go's monotonic clock reading, and a skewed clock's
// readings are monotonic too: Since, Until and Time.Sub of two readings
// are differences in the skewed process's time. The offset shifts every
// reading alike, as on a machine whose clock was set wrong before the
// process started: it shows in the wall time (Time.Format, Unix) and
// cancels in every difference. Readings of this package and of package
// time must not be mixed in one computation while the clock is skewed.
//
// The portable layer and the backends read it through package driver
// (driver.Now, Since, Until, NewTimer, AfterFunc, ResetTimer,
// WithDeadline), which a third-party backend can import; only Skew, a
// testing device, stays here.
package clock
