package fenceotel_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
	"github.com/fencing/fence/fenceotel"
)

// A Client observed by fenceotel records its metrics on the meter
// provider given (here an SDK one with a manual reader).
func ExampleNew() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(ctx)

	obs := fenceotel.New(fenceotel.WithMeterProvider(mp))
	defer obs.Close()
	client := fence.New(fencemem.New(), fence.WithObserver(obs))
	lease, err := client.Acquire(ctx, "invoices")
	if err != nil {
		panic(err)
	}
	var rm metricdata.ResourceMetrics
	reader.Collect(ctx, &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "fence.leases.held" {
			fmt.Println("leases held:", m.Data.(metricdata.Sum[int64]).DataPoints[0].Value)
		}
	}
	lease.Release(ctx)
	// Output: leases held: 1
}
