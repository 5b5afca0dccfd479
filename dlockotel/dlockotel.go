// Package dlockotel reports dlock's locks to OpenTelemetry: metrics of
// waits, holds, losses and renewals, and a span for each Lock and for each
// held lease. It is built on dlock.Hooks, in a module of its own, so that
// a program that imports dlock alone pulls in nothing of OpenTelemetry.
//
//	c, err := dlock.Open(ctx, url, dlockotel.WithTelemetry(dlockotel.WithBackend("etcd")))
//
// # Metrics
//
// Names and attributes follow the style of OpenTelemetry's semantic
// conventions; durations are histograms in seconds.
//
//   - dlock.acquire.duration (histogram, s): how long each Lock or TryLock
//     call waited, from the call to the grant or to the failure. Attribute
//     dlock.outcome: acquired; not_acquired (TryLock found the lock held);
//     cancelled (the caller's context ended first); unavailable (the
//     backend failed, or the client was closed).
//   - dlock.lease.duration (histogram, s): how long each lease was held,
//     from its grant to its release or loss. Attribute dlock.lease.end:
//     released or lost.
//   - dlock.lease.held (up-down counter, {lease}): leases held now by this
//     process.
//   - dlock.lease.lost (counter, {lease}): leases lost before they were
//     released. Attribute dlock.loss.cause: broken, expired, session_lost or
//     unreachable, as dlock.LossCause tells them apart (its doc says how).
//   - dlock.renewal.duration (histogram, s): the round trip of each renewal
//     the backend confirmed. A renewal that failed is an event on the
//     lease's span (dlock.renewal.failed).
//
// Every metric carries dlock.backend (WithBackend; absent if not given),
// dlock.lock.name (WithNameAttribute: the name, a hash of it, or nothing)
// and dlock.fair (whether the lock was taken with dlock.WithFair).
//
// Not measured: the hand-off gap (from one holder's release to the next
// holder's grant). No backend reports when the previous holder let go, and
// a gap computed from two processes' clocks would measure their offset.
//
// # Traces
//
//   - dlock.lock: one span for each Lock or TryLock, a child of the span in
//     the context given to Lock, ended at the grant or the failure. Its
//     attributes: dlock.lock.name, dlock.backend, dlock.fair, dlock.try
//     (TryLock), dlock.outcome, dlock.wait.duration (s) and, when granted,
//     dlock.token.
//   - dlock.lease: one span for each granted lease, also a child of the
//     caller's span (a sibling of the dlock.lock span that waited for it),
//     from the grant to the release or loss, with dlock.token. Events:
//     dlock.renewal.failed (with the error) and dlock.lease.lost (with
//     dlock.loss.cause); a lost lease's span ends with status Error.
//
// So a slow request's trace shows which lock it waited on, for how long,
// and for how long it held it.
package dlockotel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/dlock/dlock"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of dlockotel's meter and tracer.
const ScopeName = "github.com/dlock/dlock/dlockotel"

// Attribute keys.
const (
	AttrBackend   = attribute.Key("dlock.backend")
	AttrLockName  = attribute.Key("dlock.lock.name")
	AttrFair      = attribute.Key("dlock.fair")
	AttrOutcome   = attribute.Key("dlock.outcome")
	AttrLeaseEnd  = attribute.Key("dlock.lease.end")
	AttrLossCause = attribute.Key("dlock.loss.cause")
	AttrToken     = attribute.Key("dlock.token")
	AttrTry       = attribute.Key("dlock.try")
	AttrWait      = attribute.Key("dlock.wait.duration")
)

// Outcomes of a Lock or TryLock (attribute dlock.outcome).
const (
	OutcomeAcquired    = "acquired"
	OutcomeNotAcquired = "not_acquired"
	OutcomeCancelled   = "cancelled"
	OutcomeUnavailable = "unavailable"
)

// NameAttribute says how the lock name is reported (WithNameAttribute).
type NameAttribute int

const (
	// NamePlain reports the lock name as it is (the default).
	NamePlain NameAttribute = iota
	// NameHashed reports "sha256:" and the first 16 hex digits of the
	// name's SHA-256: names stay apart without being shown, and one lock's
	// series can still be found by hashing its name. It does not reduce
	// the number of series: for names made of IDs, use NameNone.
	NameHashed
	// NameNone leaves dlock.lock.name out: one series per backend, for
	// programs with unboundedly many lock names.
	NameNone
)

// Option configures the telemetry.
type Option func(*config)

type config struct {
	mp      metric.MeterProvider
	tp      trace.TracerProvider
	backend string
	names   NameAttribute
}

// WithMeterProvider sets where metrics go; the default is the global one
// (otel.GetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithTracerProvider sets where spans go; the default is the global one
// (otel.GetTracerProvider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithBackend sets the dlock.backend attribute, such as the URL's scheme
// ("etcd", "redis"): the hooks cannot see which backend a client uses.
func WithBackend(name string) Option {
	return func(c *config) { c.backend = name }
}

// WithNameAttribute sets how dlock.lock.name is reported: NamePlain,
// NameHashed or NameNone.
func WithNameAttribute(mode NameAttribute) Option {
	return func(c *config) { c.names = mode }
}

// WithTelemetry returns a dlock option that installs the hooks of Hooks:
// give it to dlock.Open or dlock.New for every lock of the client, or to
// one Mutex. It replaces other dlock.WithHooks.
func WithTelemetry(opts ...Option) dlock.Option {
	return dlock.WithHooks(Hooks(opts...))
}

// Hooks returns dlock hooks that record the metrics and spans of the
// package documentation. An instrument that cannot be created is reported
// to otel.Handle and left out.
func Hooks(opts ...Option) dlock.Hooks {
	c := config{}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	t := newTelemetry(c)
	return dlock.Hooks{Attempt: t.attempt}
}

type telemetry struct {
	config
	tracer                 trace.Tracer
	acquire, hold, renewal metric.Float64Histogram
	held                   metric.Int64UpDownCounter
	lost                   metric.Int64Counter
}

// Bucket boundaries in seconds: waits and holds run from a round trip to
// an hour; renewals are round trips.
var (
	longBuckets  = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
	shortBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}
)

func newTelemetry(c config) *telemetry {
	m := c.mp.Meter(ScopeName)
	t := &telemetry{config: c, tracer: c.tp.Tracer(ScopeName)}
	var err error
	t.acquire, err = m.Float64Histogram("dlock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a Lock or TryLock call waited, by outcome."),
		metric.WithExplicitBucketBoundaries(longBuckets...))
	handle(err)
	t.hold, err = m.Float64Histogram("dlock.lease.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a lease was held, from its grant to its release or loss."),
		metric.WithExplicitBucketBoundaries(longBuckets...))
	handle(err)
	t.renewal, err = m.Float64Histogram("dlock.renewal.duration", metric.WithUnit("s"),
		metric.WithDescription("Round trip of each confirmed lease renewal."),
		metric.WithExplicitBucketBoundaries(shortBuckets...))
	handle(err)
	t.held, err = m.Int64UpDownCounter("dlock.lease.held", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases held now."))
	handle(err)
	t.lost, err = m.Int64Counter("dlock.lease.lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases lost before they were released, by cause."))
	handle(err)
	return t
}

func handle(err error) {
	if err != nil {
		otel.Handle(err)
	}
}

// nameValue is the dlock.lock.name of name; false if it is left out.
func (t *telemetry) nameValue(name string) (string, bool) {
	switch t.names {
	case NameNone:
		return "", false
	case NameHashed:
		sum := sha256.Sum256([]byte(name))
		return "sha256:" + hex.EncodeToString(sum[:8]), true
	}
	return name, true
}

// attempt starts the dlock.lock span and returns the hooks of this attempt
// and its lease.
func (t *telemetry) attempt(ctx context.Context, a dlock.LockAttempt) *dlock.Hooks {
	common := make([]attribute.KeyValue, 0, 4)
	if t.backend != "" {
		common = append(common, AttrBackend.String(t.backend))
	}
	if v, ok := t.nameValue(a.Name); ok {
		common = append(common, AttrLockName.String(v))
	}
	common = append(common, AttrFair.Bool(a.Fair))
	common = common[:len(common):len(common)] // each append below copies
	metricAttrs := metric.WithAttributeSet(attribute.NewSet(common...))

	_, lockSpan := t.tracer.Start(ctx, "dlock.lock", trace.WithAttributes(append(common, AttrTry.Bool(!a.Wait))...))
	var (
		leaseSpan trace.Span // set by Acquired, which runs before the other lease hooks
		granted   time.Time
	)
	outcome := func(o string) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(append(common, AttrOutcome.String(o))...))
	}
	endLease := func(end string) {
		held := time.Since(granted).Seconds()
		t.held.Add(context.Background(), -1, metricAttrs)
		t.hold.Record(context.Background(), held, metric.WithAttributeSet(attribute.NewSet(append(common, AttrLeaseEnd.String(end))...)))
	}
	return &dlock.Hooks{
		Acquired: func(_ string, token uint64, waited time.Duration) {
			granted = time.Now()
			t.acquire.Record(ctx, waited.Seconds(), outcome(OutcomeAcquired))
			t.held.Add(ctx, 1, metricAttrs)
			lockSpan.SetAttributes(AttrOutcome.String(OutcomeAcquired), AttrWait.Float64(waited.Seconds()), AttrToken.Int64(int64(token)))
			lockSpan.End()
			_, leaseSpan = t.tracer.Start(ctx, "dlock.lease", trace.WithAttributes(append(common, AttrToken.Int64(int64(token)))...))
		},
		AcquireFailed: func(_ string, waited time.Duration, err error) {
			o := acquireOutcome(err)
			t.acquire.Record(context.Background(), waited.Seconds(), outcome(o))
			lockSpan.SetAttributes(AttrOutcome.String(o), AttrWait.Float64(waited.Seconds()))
			if o == OutcomeUnavailable {
				lockSpan.RecordError(err)
				lockSpan.SetStatus(codes.Error, err.Error())
			}
			lockSpan.End()
		},
		Renewed: func(_ string, _ uint64, rtt time.Duration) {
			t.renewal.Record(context.Background(), rtt.Seconds(), metricAttrs)
		},
		RenewalFailed: func(_ string, _ uint64, err error) {
			leaseSpan.AddEvent("dlock.renewal.failed", trace.WithAttributes(attribute.String("exception.message", err.Error())))
		},
		Released: func(string, uint64, time.Duration) {
			endLease("released")
			leaseSpan.End()
		},
		Lost: func(_ string, _ uint64, cause error) {
			why := dlock.LossCause(cause)
			t.lost.Add(context.Background(), 1, metric.WithAttributeSet(attribute.NewSet(append(common, AttrLossCause.String(why))...)))
			endLease("lost")
			leaseSpan.AddEvent("dlock.lease.lost", trace.WithAttributes(AttrLossCause.String(why), attribute.String("exception.message", cause.Error())))
			leaseSpan.SetStatus(codes.Error, "lease lost: "+why)
			leaseSpan.End()
		},
	}
}

// acquireOutcome is the dlock.outcome of a failed Lock or TryLock.
func acquireOutcome(err error) string {
	switch {
	case errors.Is(err, dlock.ErrNotAcquired):
		return OutcomeNotAcquired
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return OutcomeCancelled
	}
	return OutcomeUnavailable
}
