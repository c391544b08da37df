// Package grpclimitotel exports the counters of a grpclimit.Interceptor
// as OpenTelemetry asynchronous instruments: the series of package
// grpclimitprom, with the same values, named as package limitsotel names
// them (limits.grpc.requests, limits.grpc.policy_keys and so on, of unit
// {call} for calls and {key} for keys; its gate's as limits.gate.*).
//
//	reg, err := grpclimitotel.Register(otel.Meter("limits"), "rpc", interceptor)
//	...
//	defer reg.Unregister()
package grpclimitotel

import (
	"github.com/limitsgo/limits/grpclimit"
	"github.com/limitsgo/limits/limitsprom/internal/grpcseries"
	"github.com/limitsgo/limits/limitsprom/internal/otelexport"
	"go.opentelemetry.io/otel/metric"
)

// Register creates the instruments of an Interceptor on meter, or takes
// those meter has already, and registers a callback that observes the
// counters of it at each collection, with the attribute name=<name>.
// Unregister the Registration returned to stop observing it.
//
// name must be unique among the Interceptors observed, and, for one with
// a gate, among the gates: OpenTelemetry does not check that two
// callbacks observe different series. Register returns an error if name
// is empty or not UTF-8, or if meter refuses an instrument or the
// callback. It panics if it is nil, a programming error.
func Register(meter metric.Meter, name string, it *grpclimit.Interceptor) (metric.Registration, error) {
	if it == nil {
		panic("grpclimitotel: nil Interceptor")
	}
	return otelexport.Register("grpclimitotel", meter, name, grpcseries.Set(it))
}
