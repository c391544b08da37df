// Package limitsotel exports the counters of package limits, of its front
// ends and of the Redis GCRA as OpenTelemetry asynchronous instruments:
// the series of package limitsprom, with the same values, for services
// that report through an OpenTelemetry MeterProvider rather than a
// Prometheus registry.
//
//	reg, err := limitsotel.Register(otel.Meter("limits"), "api", middleware)
//	...
//	defer reg.Unregister()
//
// Like limitsprom, it takes any component package metrics describes (a
// limits.Gate or GCRA, an httplimit.Middleware, a grpclimit.Interceptor,
// an admit.Engine, a redislimit.GCRA), from the one description of
// package metrics, and links none of the front ends or clients itself.
//
// Each metric of limitsprom is an instrument named with dots and without
// the unit suffixes: limits_http_requests_total is the counter
// limits.http.requests, of unit {request}; limits_grpc_requests_total the
// counter limits.grpc.requests, of unit {call}; limits_gate_in_flight the
// gauge limits.gate.in_flight. Counters are Int64ObservableCounters, but
// for the seconds of limits_gate_wait_seconds_total, the
// Float64ObservableCounter limits.gate.wait of unit s; gauges are
// Int64ObservableGauges. The Redis GCRA's latency histogram is left out:
// OpenTelemetry has no asynchronous histogram. Every observation carries
// the attribute name=<name>, and the labels of the Prometheus series as
// attributes of the same names and values.
//
// The instruments are read by one callback per component, which reads
// the component's snapshot once per collection: the request path pays
// nothing for them.
package limitsotel

import (
	"fmt"

	"github.com/limitsgo/limits/limitsprom/limitsotel/internal/otelexport"
	"github.com/limitsgo/limits/metrics"
	"go.opentelemetry.io/otel/metric"
)

// Register creates the instruments of c's kind on meter, or takes those
// meter has already, and registers a callback that observes c's counters
// at each collection, with the attribute name=<name>. Unregister the
// Registration returned to stop observing c. c is any component package
// metrics describes (metrics.For).
//
// name tells components of a kind apart, and must be unique among them:
// OpenTelemetry does not check that two callbacks observe different
// series. Register returns an error if c is nil or of a type package
// metrics does not describe, if name is empty or not UTF-8, or if meter
// refuses an instrument or the callback.
func Register(meter metric.Meter, name string, c any) (metric.Registration, error) {
	set, ok := metrics.For(c)
	if !ok {
		if c == nil {
			return nil, fmt.Errorf("limitsotel: nil component")
		}
		return nil, fmt.Errorf("limitsotel: %T: nil, or not a component package metrics describes", c)
	}
	return otelexport.Register("limitsotel", meter, name, set)
}
