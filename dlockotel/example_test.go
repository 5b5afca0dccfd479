package dlockotel_test

import (
	"context"
	"fmt"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dlock/dlock"
	"github.com/dlock/dlock/backend/memlock"
	"github.com/dlock/dlock/dlockotel"
)

// Telemetry for every lock of a client. A program would pass its own
// providers (or set the global ones) and export to its collector or to
// Prometheus; here a manual reader shows what was recorded.
func Example() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	c := dlock.New(memlock.New(memlock.NewServer()), dlockotel.WithTelemetry(
		dlockotel.WithMeterProvider(mp),
		dlockotel.WithBackend("mem"),
	))
	defer c.Close()

	err := c.Do(ctx, "orders/42", func(ctx context.Context, l *dlock.Lease) error {
		time.Sleep(10 * time.Millisecond) // the protected work
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Histogram[float64]:
			fmt.Printf("%s: %d sample(s)\n", m.Name, d.DataPoints[0].Count)
		case metricdata.Sum[int64]:
			fmt.Printf("%s: %d\n", m.Name, d.DataPoints[0].Value)
		}
	}
	// Output:
	// dlock.acquire.duration: 1 sample(s)
	// dlock.lease.duration: 1 sample(s)
	// dlock.lease.held: 0
}
