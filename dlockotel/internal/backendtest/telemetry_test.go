package backendtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlock/dlock"
	_ "github.com/dlock/dlock/backend/etcdlock"
	_ "github.com/dlock/dlock/backend/redislock"
	"github.com/dlock/dlock/dlockotel"
	"github.com/dlock/dlock/dlocktest"
	"github.com/dlock/dlock/internal/testenv"
)

func TestMain(m *testing.M) { dlocktest.Main(m) }

// backend starts a real server for one test and returns the URL of a
// client that reaches it through proxy.
type backend struct {
	name  string
	start func(t *testing.T) (addr string, url func(addr string) string)
}

var backends = []backend{
	{"etcd", func(t *testing.T) (string, func(string) string) {
		srv := testenv.StartEtcd(t, testenv.EtcdConfig{})
		return srv.Endpoints()[0], func(addr string) string { return "etcd://" + addr }
	}},
	{"redis", func(t *testing.T) (string, func(string) string) {
		srv := testenv.StartRedis(t)
		return srv.Addr, func(addr string) string { return "redis://" + addr + "/0" }
	}},
}

// world is one backend server, telemetry recorded in memory, and clients
// of that server that report to it.
type world struct {
	t       *testing.T
	backend string
	addr    string
	url     func(addr string) string
	reader  *sdkmetric.ManualReader
	spans   *tracetest.SpanRecorder
	tp      *sdktrace.TracerProvider
	opts    []dlockotel.Option
}

func newWorld(t *testing.T, b backend) *world {
	addr, url := b.start(t)
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	w := &world{t: t, backend: b.name, addr: addr, url: url, reader: reader, spans: spans, tp: tp}
	w.opts = []dlockotel.Option{
		dlockotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		dlockotel.WithTracerProvider(tp),
		dlockotel.WithBackend(b.name),
	}
	return w
}

// client opens a client with telemetry, to addr (the server's by
// default, or a proxy's).
func (w *world) client(addr string, opts ...dlock.Option) *dlock.Client {
	w.t.Helper()
	if addr == "" {
		addr = w.addr
	}
	c, err := dlock.Open(testenv.Context(w.t, 10*time.Second), w.url(addr), append([]dlock.Option{dlockotel.WithTelemetry(w.opts...)}, opts...)...)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = c.Close() })
	return c
}

func (w *world) collect() metricdata.ResourceMetrics {
	w.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := w.reader.Collect(context.Background(), &rm); err != nil {
		w.t.Fatal(err)
	}
	return rm
}

// has reports whether set holds every one of want.
func has(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

func find(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// histogram returns the count and sum of the points of histogram name
// whose attributes include want.
func (w *world) histogram(name string, want ...attribute.KeyValue) (count uint64, sum float64) {
	w.t.Helper()
	m, ok := find(w.collect(), name)
	if !ok {
		return 0, 0
	}
	h, ok := m.Data.(metricdata.Histogram[float64])
	if !ok {
		w.t.Fatalf("%s is a %T, not a float64 histogram", name, m.Data)
	}
	for _, p := range h.DataPoints {
		if has(p.Attributes, want) {
			count += p.Count
			sum += p.Sum
		}
	}
	return count, sum
}

// sum returns the total of the points of counter name whose attributes
// include want.
func (w *world) sum(name string, want ...attribute.KeyValue) int64 {
	w.t.Helper()
	m, ok := find(w.collect(), name)
	if !ok {
		return 0
	}
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		w.t.Fatalf("%s is a %T, not an int64 sum", name, m.Data)
	}
	var total int64
	for _, p := range s.DataPoints {
		if has(p.Attributes, want) {
			total += p.Value
		}
	}
	return total
}

// ended returns the ended spans called name.
func (w *world) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range w.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func forEachBackend(t *testing.T, test func(t *testing.T, w *world)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { test(t, newWorld(t, b)) })
	}
}

func outcome(o string) attribute.KeyValue { return dlockotel.AttrOutcome.String(o) }

// A lock held for 200 ms is one hold sample of about 200 ms, one acquire
// with outcome acquired, and one lease held while it is held and none
// after; its Lock and lease spans are children of the caller's span and
// carry the token.
func TestHoldIsOneSampleOfItsDuration(t *testing.T) {
	forEachBackend(t, func(t *testing.T, w *world) {
		c := w.client("")
		ctx, parent := w.tp.Tracer("test").Start(testenv.Context(t, 10*time.Second), "request")
		l, err := c.Mutex("orders/42").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		name := dlockotel.AttrLockName.String("orders/42")
		if held := w.sum("dlock.lease.held", name); held != 1 {
			t.Errorf("dlock.lease.held while held = %d, want 1", held)
		}
		time.Sleep(200 * time.Millisecond) // the hold being measured
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		parent.End()

		backendAttr := dlockotel.AttrBackend.String(w.backend)
		n, sum := w.histogram("dlock.lease.duration", name, backendAttr, dlockotel.AttrLeaseEnd.String("released"))
		if n != 1 || sum < 0.2 || sum > 2 {
			t.Errorf("dlock.lease.duration: %d samples, sum %.3fs; want 1 sample of 0.2s..2s", n, sum)
		}
		if n, _ := w.histogram("dlock.acquire.duration", name, backendAttr, outcome(dlockotel.OutcomeAcquired)); n != 1 {
			t.Errorf("dlock.acquire.duration{outcome=acquired}: %d samples, want 1", n)
		}
		if held := w.sum("dlock.lease.held", name); held != 0 {
			t.Errorf("dlock.lease.held after Unlock = %d, want 0", held)
		}

		locks, leases := w.ended("dlock.lock"), w.ended("dlock.lease")
		if len(locks) != 1 || len(leases) != 1 {
			t.Fatalf("ended spans: %d dlock.lock, %d dlock.lease; want 1 each", len(locks), len(leases))
		}
		for _, s := range []sdktrace.ReadOnlySpan{locks[0], leases[0]} {
			if s.Parent().SpanID() != parent.SpanContext().SpanID() || s.SpanContext().TraceID() != parent.SpanContext().TraceID() {
				t.Errorf("span %s is not a child of the caller's span", s.Name())
			}
			if v, ok := attr(s, dlockotel.AttrToken); !ok || v.AsInt64() != int64(l.Token()) {
				t.Errorf("span %s: dlock.token = %v, want %d", s.Name(), v.String(), l.Token())
			}
		}
		if d := leases[0].EndTime().Sub(leases[0].StartTime()); d < 200*time.Millisecond {
			t.Errorf("the dlock.lease span lasted %v, less than the 200ms hold", d)
		}
		if v, _ := attr(locks[0], dlockotel.AttrOutcome); v.AsString() != dlockotel.OutcomeAcquired {
			t.Errorf("dlock.lock span outcome = %q, want acquired", v.AsString())
		}
	})
}

// Each Lock and TryLock counts once, under its outcome.
func TestAcquireOutcomesAreCountedByOutcome(t *testing.T) {
	forEachBackend(t, func(t *testing.T, w *world) {
		holder, other := w.client(""), w.client("")
		l, err := holder.Mutex("x").Lock(testenv.Context(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := other.Mutex("x").TryLock(testenv.Context(t, 10*time.Second)); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryLock of a held lock: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if _, err := other.Mutex("x").Lock(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Lock of a held lock until a deadline: %v", err)
		}
		_ = l.Unlock(testenv.Context(t, 10*time.Second))
		for o, want := range map[string]uint64{
			dlockotel.OutcomeAcquired:    1,
			dlockotel.OutcomeNotAcquired: 1,
			dlockotel.OutcomeCancelled:   1,
			dlockotel.OutcomeUnavailable: 0,
		} {
			if n, _ := w.histogram("dlock.acquire.duration", outcome(o)); n != want {
				t.Errorf("dlock.acquire.duration{outcome=%s}: %d samples, want %d", o, n, want)
			}
		}
		if n, sum := w.histogram("dlock.acquire.duration", outcome(dlockotel.OutcomeCancelled)); n == 1 && sum < 0.1 {
			t.Errorf("the cancelled Lock waited %.3fs by the histogram, less than its 100ms deadline", sum)
		}
	})
}

// A lease broken by Client.Break counts as lost with cause broken, its
// hold as lost, and its span ends with the loss.
func TestBrokenLeaseCountsAsLostBroken(t *testing.T) {
	forEachBackend(t, func(t *testing.T, w *world) {
		holder, admin := w.client("", dlock.WithTTL(3*time.Second)), w.client("")
		l, err := holder.Mutex("x").Lock(testenv.Context(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := admin.Break(testenv.Context(t, 10*time.Second), "x"); err != nil {
			t.Fatal(err)
		}
		waitLost(t, w, l)
		if n := w.sum("dlock.lease.lost", dlockotel.AttrLossCause.String(dlock.LossBroken)); n != 1 {
			t.Errorf("dlock.lease.lost{cause=broken} = %d, want 1 (all causes: %d)", n, w.sum("dlock.lease.lost"))
		}
		if n, _ := w.histogram("dlock.lease.duration", dlockotel.AttrLeaseEnd.String("lost")); n != 1 {
			t.Errorf("dlock.lease.duration{end=lost}: %d samples, want 1", n)
		}
		if held := w.sum("dlock.lease.held"); held != 0 {
			t.Errorf("dlock.lease.held after the loss = %d, want 0", held)
		}
		leases := w.ended("dlock.lease")
		if len(leases) != 1 {
			t.Fatalf("%d dlock.lease spans ended, want 1", len(leases))
		}
		if leases[0].Status().Code != codes.Error || !hasEvent(leases[0], "dlock.lease.lost", dlock.LossBroken) {
			t.Errorf("the lost lease's span: status %v, events %v; want Error and a dlock.lease.lost event with cause broken", leases[0].Status(), leases[0].Events())
		}
	})
}

// A holder cut off from its backend (a silent network: its renewals get
// no answer) loses its lease at its deadline, counted with cause
// unreachable, after renewals that were confirmed while it could reach
// the backend.
func TestCutOffHolderCountsAsLostUnreachable(t *testing.T) {
	forEachBackend(t, func(t *testing.T, w *world) {
		proxy := testenv.NewProxy(t, w.addr)
		c := w.client(proxy.Addr(), dlock.WithTTL(2*time.Second))
		l, err := c.Mutex("x").Lock(testenv.Context(t, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 10*time.Second, "a confirmed renewal", func() error {
			if n, _ := w.histogram("dlock.renewal.duration"); n == 0 {
				return errors.New("dlock.renewal.duration has no sample")
			}
			return nil
		})
		proxy.Block()
		defer proxy.Unblock()
		waitLost(t, w, l)
		if n := w.sum("dlock.lease.lost", dlockotel.AttrLossCause.String(dlock.LossUnreachable)); n != 1 {
			t.Errorf("dlock.lease.lost{cause=unreachable} = %d, want 1 (lease error: %v)", n, l.Err())
		}
		if held := w.sum("dlock.lease.held"); held != 0 {
			t.Errorf("dlock.lease.held after the loss = %d, want 0", held)
		}
	})
}

// waitLost waits for l to be lost and for the loss to have been
// reported (the Lost hook runs just after Done closes).
func waitLost(t *testing.T, w *world, l *dlock.Lease) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the lease was not lost within 30s")
	}
	testenv.Eventually(t, 10*time.Second, "the loss reported", func() error {
		if len(w.ended("dlock.lease")) == 0 {
			return fmt.Errorf("no dlock.lease span ended (lease error %v)", l.Err())
		}
		return nil
	})
}

func hasEvent(s sdktrace.ReadOnlySpan, name, cause string) bool {
	for _, e := range s.Events() {
		if e.Name != name {
			continue
		}
		if cause == "" {
			return true
		}
		for _, kv := range e.Attributes {
			if kv.Key == dlockotel.AttrLossCause && kv.Value.AsString() == cause {
				return true
			}
		}
	}
	return false
}
