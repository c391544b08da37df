// Package redislimitotel exports the counters of a redislimit.GCRA as
// OpenTelemetry asynchronous instruments: the series of package
// redislimitprom, with the same values, named as package limitsotel
// names them (limits.redis.calls, limits.redis.failures,
// limits.redis.fallbacks).
//
//	reg, err := redislimitotel.Register(otel.Meter("limits"), "fleet", perKey)
//	...
//	defer reg.Unregister()
//
// The latency histogram of redislimitprom is left out: OpenTelemetry has
// no asynchronous histogram to carry it.
package redislimitotel

import (
	"github.com/limitsgo/limits/limitsprom/internal/otelexport"
	"github.com/limitsgo/limits/limitsprom/internal/redisseries"
	"github.com/limitsgo/limits/redislimit"
	"go.opentelemetry.io/otel/metric"
)

// Register creates the instruments of a Redis GCRA on meter, or takes
// those meter has already, and registers a callback that observes g's
// counters at each collection, with the attribute name=<name>. Unregister
// the Registration returned to stop observing g.
//
// name must be unique among the Redis GCRAs observed: OpenTelemetry does
// not check that two callbacks observe different series. Register returns
// an error if name is empty or not UTF-8, or if meter refuses an
// instrument or the callback. It panics if g is nil, a programming error.
func Register(meter metric.Meter, name string, g *redislimit.GCRA) (metric.Registration, error) {
	if g == nil {
		panic("redislimitotel: nil GCRA")
	}
	return otelexport.Register("redislimitotel", meter, name, redisseries.Set(g))
}
