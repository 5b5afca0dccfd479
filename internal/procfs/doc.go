// Package procfs reads the few facts dlock needs about processes from
// Linux's /proc: their state, parent and process group.
package procfs
