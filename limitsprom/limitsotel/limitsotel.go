// Package limitsotel exports the counters of package limits and its
// net/http front end as OpenTelemetry asynchronous instruments: the series
// of package limitsprom, with the same values, for services that report
// through an OpenTelemetry MeterProvider rather than a Prometheus
// registry.
//
//	reg, err := limitsotel.Register(otel.Meter("limits"), "api", middleware)
//	...
//	defer reg.Unregister()
//
// Like limitsprom, it handles the components of the core module only, and
// links neither a Redis client nor gRPC; its subpackages redislimitotel
// and grpclimitotel export a redislimit.GCRA and a grpclimit.Interceptor.
//
// Each metric of limitsprom is an instrument named with dots and without
// the unit suffixes: limits_http_requests_total is the counter
// limits.http.requests, of unit {request}; limits_gate_in_flight the gauge
// limits.gate.in_flight. Counters are Int64ObservableCounters, but for
// the seconds of limits_gate_wait_seconds_total, the Float64ObservableCounter
// limits.gate.wait of unit s; gauges are Int64ObservableGauges. Every
// observation carries the attribute
// name=<name>, and the labels of the Prometheus series as attributes of
// the same names and values.
//
// The instruments are read by one callback per component, which reads
// the component's snapshot once per collection: the request path pays
// nothing for them.
package limitsotel

import (
	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/limitsprom/internal/otelexport"
	"github.com/limitsgo/limits/limitsprom/internal/series"
	"go.opentelemetry.io/otel/metric"
)

// Component is the set of types of the core module whose counters this
// package exports: the Gate and the GCRA of package limits and the
// net/http Middleware of package httplimit.
type Component interface {
	*limits.Gate | *limits.GCRA | *httplimit.Middleware
}

// Register creates the instruments of c's kind on meter, or takes those
// meter has already, and registers a callback that observes c's counters
// at each collection, with the attribute name=<name>. Unregister the
// Registration returned to stop observing c.
//
// name tells components of a kind apart, and must be unique among them:
// OpenTelemetry does not check that two callbacks observe different
// series. Register returns an error if name is empty or not UTF-8, or if
// meter refuses an instrument or the callback. It panics if c is nil, a
// programming error.
func Register[C Component](meter metric.Meter, name string, c C) (metric.Registration, error) {
	set, ok := series.For(c)
	if !ok {
		panic("limitsotel: nil component")
	}
	return otelexport.Register("limitsotel", meter, name, set)
}
