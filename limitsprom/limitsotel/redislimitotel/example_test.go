package redislimitotel_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/limitsprom/limitsotel/redislimitotel"
	"github.com/limitsgo/limits/redislimit"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// quiet drops go-redis's log lines, which the failed dial below would
// print.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// A Redis GCRA whose server cannot be reached lets its fallback decide;
// the instruments count the failed call by kind, and the fallback's
// decision.
func ExampleRegister() {
	redis.SetLogger(quiet{})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: every dial is refused
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer rdb.Close()
	perKey, err := redislimit.New(rdb, 100, time.Minute,
		redislimit.WithFallback(limits.NewGCRA(100, time.Minute)))
	if err != nil {
		panic(err)
	}
	reader := sdkmetric.NewManualReader()
	meter := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("limits")
	reg, err := redislimitotel.Register(meter, "fleet", perKey)
	if err != nil {
		panic(err)
	}
	defer reg.Unregister()
	perKey.Allow(context.Background(), "key-123")

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
			if dp.Value == 0 {
				continue
			}
			fmt.Print(m.Name, " ", m.Unit)
			for _, a := range dp.Attributes.ToSlice() {
				fmt.Printf(" %s=%s", a.Key, a.Value.AsString())
			}
			fmt.Println(":", dp.Value)
		}
	}
	// Output:
	// limits.redis.calls {call} name=fleet op=decide result=failed: 1
	// limits.redis.failures {call} kind=connection name=fleet: 1
	// limits.redis.fallbacks {request} name=fleet: 1
}
