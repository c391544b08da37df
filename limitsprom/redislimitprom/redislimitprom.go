// Package redislimitprom exports the counters of a redislimit.GCRA as
// Prometheus metrics: its calls to Redis, their failures by kind, the
// decisions made by its fallback, and the time calls took.
//
//	var perKey *redislimit.GCRA
//	reg := prometheus.NewRegistry()
//	redislimitprom.Register(reg, "fleet", perKey) // *redislimit.GCRA
//
// It follows the conventions of package limitsprom, whose package
// documentation describes them: one call per component, values read at
// scrape time, the label name="<name>" on every metric, every series
// present from the start at 0. It is a package, and a module, of its own
// so that limitsprom links no Redis client and its users get no Redis
// module.
//
// # Metrics
//
//	limits_redis_calls_total{op, result}      counter    script calls: op decide or refund, result ok or failed
//	limits_redis_failures_total{kind}         counter    failed calls: timeout, connection, canceled, server, other
//	limits_redis_fallbacks_total              counter    decisions made by the fallback GCRA
//	limits_redis_call_duration_seconds        histogram  time calls took, buckets from 25µs doubling to 409.6ms
//
// The kinds of failure add up to the calls with result="failed".
//
// # Queries
//
// The 99th percentile of call time, and failures by kind:
//
//	histogram_quantile(0.99, sum by (name, le) (rate(limits_redis_call_duration_seconds_bucket[5m])))
//	sum by (name, kind) (rate(limits_redis_failures_total[5m]))
package redislimitprom

import (
	"github.com/limitsgo/limits/limitsprom/internal/promexport"
	"github.com/limitsgo/limits/limitsprom/internal/redisseries"
	"github.com/limitsgo/limits/redislimit"
	"github.com/prometheus/client_golang/prometheus"
)

// NewCollector returns a prometheus.Collector that exports g's counters,
// each metric labelled name="<name>".
//
// The collector reads g's Stats and CallStats each time it is collected,
// and keeps nothing in between: a call of g costs the same with or
// without it. It is safe for concurrent use, as g is.
//
// name tells Redis GCRAs apart: several may be registered side by side
// under different names, and registering two under one name fails. It
// must be a non-empty UTF-8 string; otherwise registering the collector
// returns an error saying so. NewCollector panics if g is nil, a
// programming error.
func NewCollector(name string, g *redislimit.GCRA) prometheus.Collector {
	if g == nil {
		panic("redislimitprom: nil GCRA")
	}
	return promexport.Collector("redislimitprom", name, redisseries.Set(g))
}

// Register registers NewCollector(name, g) with reg, and returns reg's
// error, if any: an invalid name, or a Redis GCRA already registered
// under name.
func Register(reg prometheus.Registerer, name string, g *redislimit.GCRA) error {
	return reg.Register(NewCollector(name, g))
}
