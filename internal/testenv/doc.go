// Package testenv starts the real servers that dlock's tests run against —
// each on a free loopback port, in a temporary directory, stopped by PID when
// the test ends — and decides what a test does when a server's binary is
// missing: skip with the command that installs it, or, under
// DLOCK_REQUIRE=all (as CI runs), fail.
package testenv
