// Package modgraph checks what a user's program pays, in its module graph,
// for importing dlock: testdata holds one small program per backend, each
// a module of its own that imports only dlock and that backend (and one
// that imports only the portable layer), as a user's program would. The
// test resolves each one's imports outside the workspace (go list -deps)
// and reads its go list -m all.
package modgraph
