// Package allbackends holds the tests that open every backend at once. It
// is a module of its own because it requires every engine's client, which
// no single backend's module may.
package allbackends
