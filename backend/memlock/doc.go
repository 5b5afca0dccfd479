// Package memlock is an in-process dlock backend: lock state in a map,
// waiters woken by channels, expiry by timers. It exists for unit tests of
// code that uses dlock and for examples; it excludes goroutines of one
// process only.
//
// It keeps the whole contract otherwise: leases expire after their TTL on
// the Server's clock, tokens strictly increase per name (for the life of
// the Server: nothing is durable), Break works, fair waiting is FIFO, and a
// grant whose predecessor expired or was broken is marked Recovered (so
// WithLockDelay applies).
//
// URL: mem:// or mem://NAME — every Open of the same NAME in one process
// shares one Server.
//
// For tests of lease-loss handling, Driver.SetPartitioned makes one client
// behave as if cut off from the server.
package memlock
