package dlockotel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/memlock"
	"github.com/dlock/dlock/dlockotel"
)

// The lock name is reported as it is, hashed, or not at all.
func TestNameAttributeModes(t *testing.T) {
	for _, tc := range []struct {
		mode dlockotel.NameAttribute
		want string // "" for absent
	}{
		{dlockotel.NamePlain, "orders/42"},
		{dlockotel.NameHashed, "sha256:c4dd165f06c35f87"},
		{dlockotel.NameNone, ""},
	} {
		reader := sdkmetric.NewManualReader()
		c := dlock.New(memlock.New(memlock.NewServer()), dlockotel.WithTelemetry(
			dlockotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
			dlockotel.WithNameAttribute(tc.mode)))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := c.Do(ctx, "orders/42", func(context.Context, *dlock.Lease) error { return nil }); err != nil {
			t.Fatal(err)
		}
		cancel()
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		for _, m := range rm.ScopeMetrics[0].Metrics {
			var sets []attribute.Set
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					sets = append(sets, p.Attributes)
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					sets = append(sets, p.Attributes)
				}
			}
			for _, s := range sets {
				v, ok := s.Value(dlockotel.AttrLockName)
				if got := v.AsString(); ok != (tc.want != "") || got != tc.want {
					t.Errorf("mode %d: %s has dlock.lock.name %q (present %v), want %q", tc.mode, m.Name, got, ok, tc.want)
				}
			}
		}
		_ = c.Close()
	}
}
