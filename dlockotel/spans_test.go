package dlockotel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/memlock"
	"github.com/dlock/dlock/dlockotel"
)

// A holder cut off from its backend records each failed renewal as an
// event of its lease's span, and the loss (cause unreachable) as the
// span's last event and error status.
func TestLeaseSpanRecordsFailedRenewalsAndTheLoss(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	d := memlock.New(memlock.NewServer())
	c := dlock.New(d, dlock.WithTTL(300*time.Millisecond), dlockotel.WithTelemetry(
		dlockotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Mutex("x").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d.SetPartitioned(true)
	defer d.SetPartitioned(false)
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatal("the cut-off lease was not lost")
	}
	var lease sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(5 * time.Second); lease == nil && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, s := range spans.Ended() {
			if s.Name() == "dlock.lease" {
				lease = s
			}
		}
	}
	if lease == nil {
		t.Fatal("no dlock.lease span ended after the loss")
	}
	events := lease.Events()
	if len(events) < 2 || events[0].Name != "dlock.renewal.failed" || events[len(events)-1].Name != "dlock.lease.lost" {
		t.Fatalf("lease span events %v; want dlock.renewal.failed ones, then dlock.lease.lost", events)
	}
	last := events[len(events)-1]
	cause := ""
	for _, kv := range last.Attributes {
		if kv.Key == dlockotel.AttrLossCause {
			cause = kv.Value.AsString()
		}
	}
	if cause != dlock.LossUnreachable || lease.Status().Code != codes.Error {
		t.Errorf("loss event cause %q, span status %v; want %q and Error", cause, lease.Status(), dlock.LossUnreachable)
	}
}
