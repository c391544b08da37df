// Package redisseries describes the metrics of a redislimit.GCRA for the
// exporters of package series, apart from the core's, so that only the
// packages that export a Redis GCRA link the Redis client.
package redisseries

import (
	"github.com/limitsgo/limits/limitsprom/internal/series"
	"github.com/limitsgo/limits/redislimit"
)

// latencyBounds are the upper bounds of redislimit's latency buckets, in
// seconds.
var latencyBounds = func() []float64 {
	b := make([]float64, redislimit.LatencyBuckets)
	for i := range b {
		b[i] = redislimit.Latency{}.Bound(i).Seconds()
	}
	return b
}()

// kinds are the label values of redislimit.Failures' fields, in order.
var kinds = [...]string{"timeout", "connection", "canceled", "server", "other"}

// Set returns the Set of g, which must not be nil.
func Set(g *redislimit.GCRA) series.Set {
	const sub = "redis"
	return series.Set{
		Metrics: []series.Metric{
			{Subsystem: sub, Name: "calls", Kind: series.Counter, Unit: "{call}", Labels: []string{"op", "result"},
				Help: "Calls of the Redis GCRA's scripts, by operation (decide or refund) and result (ok, or failed: no answer in time, or an error)."},
			{Subsystem: sub, Name: "failures", Kind: series.Counter, Unit: "{call}", Labels: []string{"kind"},
				Help: "Failed calls to Redis by kind: timeout, connection, canceled (by the caller), server (an error reply) or other."},
			{Subsystem: sub, Name: "fallbacks", Kind: series.Counter, Unit: "{request}",
				Help: "Decisions made by the local fallback GCRA because Redis gave none."},
			{Subsystem: sub, Name: "call_duration", Kind: series.Histogram, Unit: "s",
				Help: "Time calls to Redis took, answered or not."},
		},
		Read: func(e series.Emitter) {
			s, cs := g.Stats(), g.CallStats()
			e.Value(0, series.Count(s.Answered), "decide", "ok")
			e.Value(0, series.Count(s.Errors), "decide", "failed")
			e.Value(0, series.Count(s.Refunds), "refund", "ok")
			e.Value(0, series.Count(s.RefundErrors), "refund", "failed")
			f := cs.Failures
			for i, n := range [len(kinds)]uint64{f.Timeout, f.Connection, f.Canceled, f.Server, f.Other} {
				e.Value(1, series.Count(n), kinds[i])
			}
			e.Value(2, series.Count(s.Fallbacks))
			cum := make([]uint64, len(latencyBounds))
			var n uint64
			for i := range cum {
				n += cs.Latency.Counts[i]
				cum[i] = n
			}
			e.Histogram(3, cs.Latency.Count, cs.Latency.Sum.Seconds(), latencyBounds, cum)
		},
	}
}
