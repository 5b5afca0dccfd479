package redisscript

import (
	"crypto/tls"
	"fmt"
	"net/url"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/driver"
)

// clientParams are go-redis's own URL parameters (redis.ParseURL and
// redis.ParseClusterURL), which the backends pass on to it.
var clientParams = []string{
	"db", "protocol", "client_name", "max_retries", "min_retry_backoff", "max_retry_backoff",
	"dial_timeout", "read_timeout", "write_timeout", "pool_fifo", "pool_size", "pool_timeout",
	"min_idle_conns", "max_idle_conns", "max_active_conns", "max_concurrent_dials",
	"pipeline_pool_size", "pipeline_read_buffer_size", "pipeline_write_buffer_size",
	"conn_max_idle_time", "idle_timeout", "conn_max_lifetime", "max_conn_age", "conn_max_lifetime_jitter",
	// Redis Cluster only
	"addr", "max_redirects", "read_only", "route_by_latency", "route_by_latency_tolerance",
	"route_randomly", "dialer_retries", "dialer_retry_timeout", "failing_timeout_seconds",
}

// Params are the parameters of a Redis backend's URLs: the backend's own
// (own), the TLS parameters, read into tf, which the backends apply
// themselves (go-redis's cluster URLs know none, and Redlock's nodes are
// built from one URL), and go-redis's, passed on.
func Params(backend string, tf *driver.TLSFiles, own ...driver.Param) driver.Params {
	ps := driver.Params{Backend: backend, List: append(own, driver.TLSParams(tf)...)}
	for _, n := range clientParams {
		ps.List = append(ps.List, driver.Param{Name: n, Usage: "go-redis's"})
	}
	return ps
}

// ApplyTLS sets the TLS parameters tf in cfg, the TLS configuration of u's
// connections; cfg is nil when u is not a TLS URL, and then any parameter
// is an error that names tlsScheme, the scheme that would use TLS.
func ApplyTLS(u *url.URL, cfg *tls.Config, tf driver.TLSFiles, tlsScheme string) error {
	if cfg == nil {
		if tf.Set() {
			return fmt.Errorf("%w: %s URL %s: the TLS parameters (ca, cert, key, server_name, skip_verify) need the %s:// scheme", dlock.ErrInvalidOption, u.Scheme, u.Redacted(), tlsScheme)
		}
		return nil
	}
	if _, err := tf.Config(cfg); err != nil {
		return fmt.Errorf("%w: %s URL: %v", dlock.ErrInvalidOption, u.Scheme, err)
	}
	return nil
}
