package redislimit

// This file describes the metrics of a GCRA and of a Quota for the
// exporters of package metrics, so that they export them as they export
// the core's components, without linking a Redis client themselves.

import "github.com/limitsgo/limits/metrics"

// latencyBounds are the upper bounds of the buckets of CallStats.Latency,
// in seconds.
var latencyBounds = func() []float64 {
	b := make([]float64, LatencyBuckets)
	for i := range b {
		b[i] = Latency{}.Bound(i).Seconds()
	}
	return b
}()

// failureKinds are the label values of the fields of Failures, in order.
var failureKinds = [...]string{"timeout", "connection", "canceled", "server", "other"}

// Metrics returns the description of g's metrics and what reads them,
// from Stats and CallStats, for the exporters of package metrics
// (limitsprom.Register, limitsotel.Register):
//
//	limits_redis_calls_total{op, result}    counter    script calls: op decide or refund, result ok or failed
//	limits_redis_failures_total{kind}       counter    failed calls: timeout, connection, canceled, server, other
//	limits_redis_fallbacks_total            counter    decisions made by the fallback GCRA
//	limits_redis_call_duration_seconds      histogram  time calls took, answered or not, in the buckets of Latency
//
// and, for a GCRA with leases (WithLeases), from LeaseStats:
//
//	limits_redis_leases_total                   counter  lease calls Redis answered with at least one slot
//	limits_redis_leases_ahead_total             counter  of them, those taken ahead
//	limits_redis_lease_ahead_failures_total     counter  leases taken ahead that failed
//	limits_redis_lease_slots_granted_total      counter  slots the leases granted
//	limits_redis_lease_slots_expired_total      counter  slots dropped unspent when their time passed
//	limits_redis_lease_slots_returned_total     counter  slots given back by ReturnLeases or SetLimit
//	limits_redis_lease_slots_held               gauge    slots in hand now
//	limits_redis_local_decisions_total          counter  decisions made without a call
//
// The kinds of failure add up to the failed calls. The set reads g's
// counters when an exporter collects, and costs g's calls nothing more.
func (g *GCRA) Metrics() metrics.Set {
	set := callMetrics(g.Stats, g.CallStats)
	if !g.leases {
		return set
	}
	const sub = "redis"
	first := len(set.Metrics)
	set.Metrics = append(set.Metrics,
		metrics.Metric{Subsystem: sub, Name: "leases", Kind: metrics.Counter, Unit: "{call}",
			Help: "Lease calls Redis answered with at least one slot, taken ahead or not."},
		metrics.Metric{Subsystem: sub, Name: "leases_ahead", Kind: metrics.Counter, Unit: "{call}",
			Help: "Leases taken ahead, while the key's slots in hand were still being spent (counted in limits_redis_leases_total too)."},
		metrics.Metric{Subsystem: sub, Name: "lease_ahead_failures", Kind: metrics.Counter, Unit: "{call}",
			Help: "Leases taken ahead that failed; they decided no request."},
		metrics.Metric{Subsystem: sub, Name: "lease_slots_granted", Kind: metrics.Counter, Unit: "{slot}",
			Help: "Emission slots the leases granted."},
		metrics.Metric{Subsystem: sub, Name: "lease_slots_expired", Kind: metrics.Counter, Unit: "{slot}",
			Help: "Slots dropped unspent when their time passed: the leases' under-admission."},
		metrics.Metric{Subsystem: sub, Name: "lease_slots_returned", Kind: metrics.Counter, Unit: "{slot}",
			Help: "Slots given back to Redis by ReturnLeases or SetLimit, or dropped by them."},
		metrics.Metric{Subsystem: sub, Name: "lease_slots_held", Kind: metrics.Gauge, Unit: "{slot}",
			Help: "Slots in hand now, leased and not yet spent, expired or returned."},
		metrics.Metric{Subsystem: sub, Name: "local_decisions", Kind: metrics.Counter, Unit: "{request}",
			Help: "Decisions made without a call to Redis: from the slots in hand, and refusals while Redis had granted none."},
	)
	read := set.Read
	set.Read = func(e metrics.Emitter) {
		read(e)
		l := g.LeaseStats()
		for i, v := range [...]uint64{l.Leases, l.Ahead, l.AheadErrors, l.Slots, l.Expired, l.Returned, l.Held, l.Local} {
			e.Value(first+i, metrics.Count(v))
		}
	}
	return set
}

// Metrics returns the description of q's metrics and what reads them, for
// the exporters of package metrics: those of a GCRA without leases (see
// GCRA.Metrics), from q's Stats and CallStats. A Quota has no fallback:
// limits_redis_fallbacks_total stays 0.
func (q *Quota) Metrics() metrics.Set { return callMetrics(q.Stats, q.CallStats) }

// callMetrics returns the metrics of a limiter's calls to Redis, read
// from stats and calls.
func callMetrics(stats func() Stats, calls func() CallStats) metrics.Set {
	const sub = "redis"
	return metrics.Set{
		Metrics: []metrics.Metric{
			{Subsystem: sub, Name: "calls", Kind: metrics.Counter, Unit: "{call}", Labels: []string{"op", "result"},
				Help: "Calls of the Redis GCRA's scripts, by operation (decide or refund) and result (ok, or failed: no answer in time, or an error)."},
			{Subsystem: sub, Name: "failures", Kind: metrics.Counter, Unit: "{call}", Labels: []string{"kind"},
				Help: "Failed calls to Redis by kind: timeout, connection, canceled (by the caller), server (an error reply) or other."},
			{Subsystem: sub, Name: "fallbacks", Kind: metrics.Counter, Unit: "{request}",
				Help: "Decisions made by the local fallback GCRA because Redis gave none."},
			{Subsystem: sub, Name: "call_duration", Kind: metrics.Histogram, Unit: "s",
				Help: "Time calls to Redis took, answered or not."},
		},
		Read: func(e metrics.Emitter) {
			s, cs := stats(), calls()
			e.Value(0, metrics.Count(s.Answered), "decide", "ok")
			e.Value(0, metrics.Count(s.Errors), "decide", "failed")
			e.Value(0, metrics.Count(s.Refunds), "refund", "ok")
			e.Value(0, metrics.Count(s.RefundErrors), "refund", "failed")
			f := cs.Failures
			for i, n := range [len(failureKinds)]uint64{f.Timeout, f.Connection, f.Canceled, f.Server, f.Other} {
				e.Value(1, metrics.Count(n), failureKinds[i])
			}
			e.Value(2, metrics.Count(s.Fallbacks))
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
