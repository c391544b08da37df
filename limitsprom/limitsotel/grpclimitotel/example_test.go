package grpclimitotel_test

import (
	"context"
	"fmt"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/grpclimit"
	"github.com/limitsgo/limits/limitsprom/limitsotel/grpclimitotel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Every instrument of an Interceptor is observed from the start, before
// its first call: each outcome at 0, and the size of each policy's table.
func ExampleRegister() {
	it, err := grpclimit.New(grpclimit.Config{
		MaxInFlight: 64,
		Rate:        limits.Limit{Events: 100, Period: time.Minute},
		MaxKeys:     10_000,
	})
	if err != nil {
		panic(err)
	}
	reader := sdkmetric.NewManualReader()
	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("limits")
	reg, err := grpclimitotel.Register(meter, "rpc", it)
	if err != nil {
		panic(err)
	}
	defer reg.Unregister()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		var dps []metricdata.DataPoint[int64]
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			dps = d.DataPoints
		case metricdata.Gauge[int64]:
			dps = d.DataPoints
		case metricdata.Sum[float64]: // seconds, counted here in whole ones
			for _, dp := range d.DataPoints {
				dps = append(dps, metricdata.DataPoint[int64]{Value: int64(dp.Value)})
			}
		}
		var sum int64
		for _, dp := range dps {
			sum += dp.Value
		}
		fmt.Printf("%-29s %-9s %2d points, sum %d\n", m.Name, m.Unit, len(dps), sum)
	}
	// Output:
	// limits.grpc.requests          {call}    11 points, sum 0
	// limits.grpc.policy_requests   {call}     6 points, sum 0
	// limits.grpc.policy_keys       {key}      1 points, sum 0
	// limits.grpc.policy_max_keys   {key}      1 points, sum 10000
	// limits.gate.capacity          {request}  1 points, sum 64
	// limits.gate.in_flight         {request}  1 points, sum 0
	// limits.gate.peak_in_flight    {request}  1 points, sum 0
	// limits.gate.waiting           {request}  1 points, sum 0
	// limits.gate.admitted          {request}  1 points, sum 0
	// limits.gate.shed              {request}  1 points, sum 0
	// limits.gate.timed_out         {request}  1 points, sum 0
	// limits.gate.waited            {request}  1 points, sum 0
	// limits.gate.overloaded        1          1 points, sum 0
	// limits.gate.overloads         {period}   1 points, sum 0
	// limits.gate.wait              s          1 points, sum 0
	// limits.gate.priority_capacity {request}  3 points, sum 192
	// limits.gate.priority_admitted {request}  3 points, sum 0
	// limits.gate.priority_shed     {request}  3 points, sum 0
}
