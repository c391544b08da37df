package series

import "github.com/limitsgo/limits/redislimit"

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

func redisSet(g *redislimit.GCRA) Set {
	const sub = "redis"
	return Set{
		Metrics: []Metric{
			{Subsystem: sub, Name: "calls", Kind: Counter, Unit: "{call}", Labels: []string{"op", "result"},
				Help: "Calls of the Redis GCRA's scripts, by operation (decide or refund) and result (ok, or failed: no answer in time, or an error)."},
			{Subsystem: sub, Name: "failures", Kind: Counter, Unit: "{call}", Labels: []string{"kind"},
				Help: "Failed calls to Redis by kind: timeout, connection, canceled (by the caller), server (an error reply) or other."},
			{Subsystem: sub, Name: "fallbacks", Kind: Counter, Unit: "{request}",
				Help: "Decisions made by the local fallback GCRA because Redis gave none."},
			{Subsystem: sub, Name: "call_duration", Kind: Histogram, Unit: "s",
				Help: "Time calls to Redis took, answered or not."},
		},
		Read: func(e Emitter) {
			s, cs := g.Stats(), g.CallStats()
			e.Value(0, count(s.Answered), "decide", "ok")
			e.Value(0, count(s.Errors), "decide", "failed")
			e.Value(0, count(s.Refunds), "refund", "ok")
			e.Value(0, count(s.RefundErrors), "refund", "failed")
			f := cs.Failures
			for i, n := range [len(kinds)]uint64{f.Timeout, f.Connection, f.Canceled, f.Server, f.Other} {
				e.Value(1, count(n), kinds[i])
			}
			e.Value(2, count(s.Fallbacks))
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
