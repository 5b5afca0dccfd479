package dlock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync"

	"github.com/dlock/dlock/driver"
)

// OpenFunc opens a backend's driver from a URL whose scheme it registered.
type OpenFunc func(ctx context.Context, u *url.URL) (driver.Driver, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]OpenFunc{}
)

// Register makes a backend available to Open under a URL scheme. Backends
// call it from an init function; it panics if the scheme is taken, as
// sql.Register does.
func Register(scheme string, open OpenFunc) {
	registryMu.Lock()
	defer registryMu.Unlock()
	scheme = strings.ToLower(scheme)
	if _, dup := registry[scheme]; dup {
		panic("dlock: Register called twice for scheme " + scheme)
	}
	registry[scheme] = open
}

// Schemes lists the registered URL schemes, sorted.
func Schemes() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	s := make([]string, 0, len(registry))
	for k := range registry {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// Open connects to the backend named by rawURL's scheme (etcd://, redis://,
// redlock://, zk://, postgres://, mysql://, temporal://, mem://, …); the
// backend's package must be imported. Passwords in rawURL never appear in
// the errors it returns. The logger of a WithLogger option reaches the
// backend too (see driver.Logger): it logs there the warning for a
// deprecated URL parameter, and its client library's own log lines, at
// debug level.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error quotes the whole URL, password included: keep only
		// its reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%w: backend URL %q: %v", ErrInvalidOption, Redact(rawURL), err)
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("%w: backend URL %q has no scheme; registered: %s", ErrInvalidOption, Redact(rawURL), strings.Join(Schemes(), ", "))
	}
	registryMu.RLock()
	open, ok := registry[strings.ToLower(u.Scheme)]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: backend URL %q: unknown scheme %q; registered: %s", ErrInvalidOption, Redact(rawURL), u.Scheme, strings.Join(Schemes(), ", "))
	}
	if o := defaultOptions().with(opts); o.loggerSet {
		ctx = driver.WithLogger(ctx, o.logger)
	}
	d, err := open(ctx, u)
	if err != nil {
		return nil, redactErr(err, rawURL)
	}
	return New(d, opts...), nil
}
