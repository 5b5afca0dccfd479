package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/dlockotel"
)

// metricsFlags are --metrics-addr and its bind-safety flag, shared by run,
// bench and dev.
type metricsFlags struct {
	addr        string
	allowRemote bool
}

const metricsHelp = `
Metrics (--metrics-addr): /metrics serves Prometheus's text format while
the command runs: dlock's lock metrics (dlock_acquire_duration_seconds by
dlock_outcome, dlock_lease_duration_seconds, dlock_lease_held,
dlock_lease_lost_total by dlock_loss_cause, dlock_renewal_duration_seconds;
see the README) and the process's own (and, for dev and bench's throwaway
node, the embedded etcd server's). ADDR is host:port, or a port alone for
the loopback interface; another address than loopback needs --allow-remote.
`

// register adds --metrics-addr, and --allow-remote unless the command has
// its own (dev).
func (mf *metricsFlags) register(fs *flagSet, withAllowRemote bool) {
	fs.StringVar(&mf.addr, "metrics-addr", "", "serve Prometheus metrics on http://`ADDR`/metrics (host:port, or PORT for 127.0.0.1:PORT); a loopback address unless --allow-remote")
	if withAllowRemote {
		fs.BoolVar(&mf.allowRemote, "allow-remote", false, "let --metrics-addr name an address other machines can reach")
	}
}

// metricsServer is the /metrics endpoint of one command.
type metricsServer struct {
	srv     *http.Server
	ln      net.Listener
	mp      *sdkmetric.MeterProvider
	backend string
}

// check applies the bind-safety rule to --metrics-addr, before the
// command does anything else; it returns the address to listen on.
func (mf *metricsFlags) check() (addr string, loopback bool, err error) {
	addr = mf.addr
	if !strings.Contains(addr, ":") {
		addr = net.JoinHostPort("127.0.0.1", addr)
	}
	_, _, loopback, err = checkListen("--metrics-addr", addr, mf.allowRemote, "the metrics, lock names included")
	if err != nil {
		return "", false, err
	}
	return addr, loopback, nil
}

// start listens on --metrics-addr, if given (nil otherwise), after the
// bind-safety check; backendURL names the dlock.backend attribute.
func (mf *metricsFlags) start(env *cmdEnv, backendURL string) (*metricsServer, error) {
	if mf.addr == "" {
		return nil, nil
	}
	addr, loopback, err := mf.check()
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: the Prometheus exporter: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, usageErrorf("--metrics-addr %s: %v", mf.addr, err)
	}
	if !loopback {
		fmt.Fprintf(env.stderr, "%s: WARNING: serving metrics on %s, which other machines can reach\n", env.name, ln.Addr())
	}
	mux := http.NewServeMux()
	// The process's and the embedded etcd's collectors live in the default
	// registry; dlock's in the exporter's.
	mux.Handle("/metrics", promhttp.HandlerFor(prometheus.Gatherers{reg, prometheus.DefaultGatherer}, promhttp.HandlerOpts{}))
	ms := &metricsServer{
		srv:     &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		ln:      ln,
		mp:      sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp)),
		backend: backendScheme(backendURL),
	}
	go func() { _ = ms.srv.Serve(ln) }()
	return ms, nil
}

// option is the dlock option that reports to the endpoint; none without one.
func (ms *metricsServer) option() dlock.Option {
	if ms == nil {
		return nil
	}
	return dlockotel.WithTelemetry(dlockotel.WithMeterProvider(ms.mp), dlockotel.WithBackend(ms.backend))
}

// Close stops serving.
func (ms *metricsServer) Close() error {
	if ms == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return errors.Join(ms.srv.Shutdown(ctx), ms.mp.Shutdown(ctx))
}

// backendScheme is the scheme of a backend URL ("etcd", "redis"), never
// anything that could hold a secret.
func backendScheme(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Scheme)
}
