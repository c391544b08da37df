package limitsotel_test

import (
	"context"
	"fmt"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/limitsprom/limitsotel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// A GCRA whose table of 2 keys is full refuses a third key; a reader of
// the meter's provider sees it at its next collection.
func ExampleRegister() {
	reader := sdkmetric.NewManualReader()
	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("limits")
	perKey := limits.NewGCRA(10, time.Minute, limits.WithMaxKeys(2))
	reg, err := limitsotel.Register(meter, "per_key", perKey)
	if err != nil {
		panic(err)
	}
	defer reg.Unregister()
	for _, k := range []string{"alice", "bob", "carol"} {
		perKey.Allow(k)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		var dp metricdata.DataPoint[int64]
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			dp = d.DataPoints[0]
		case metricdata.Gauge[int64]:
			dp = d.DataPoints[0]
		}
		name, _ := dp.Attributes.Value("name")
		fmt.Printf("%s %s{name=%s} %d\n", m.Name, m.Unit, name.AsString(), dp.Value)
	}
	// Output:
	// limits.gcra.keys {key}{name=per_key} 2
	// limits.gcra.max_keys {key}{name=per_key} 2
	// limits.gcra.table_full {request}{name=per_key} 1
}
