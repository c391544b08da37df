// Package limitsprom exports the counters of package limits and its front
// ends as Prometheus metrics, so that a limit that fires is seen, and so is
// one that never does.
//
// One call registers a component under a name of the caller's choosing:
//
//	reg := prometheus.NewRegistry()
//	limitsprom.Register(reg, "api", middleware)   // *httplimit.Middleware, with its gate
//	limitsprom.Register(reg, "login", loginGCRA)  // *limits.GCRA
//	limitsprom.Register(reg, "fleet", redisGCRA)  // *redislimit.GCRA
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// The collectors read each component's snapshot when scraped, and keep no
// state between scrapes: the request path pays nothing for them. Every
// metric carries the label name="<name>"; the others have a fixed, small
// set of values (a layer, an outcome, a policy name from the
// configuration), never a client's key or address. Every series is
// exported from the start, at 0, so that a limit that has never fired
// shows as 0, not as missing. Package limitsotel, in this module, exports
// the same series as OpenTelemetry instruments.
//
// # Metrics
//
// A limits.Gate, and the gate of an httplimit.Middleware configured with
// MaxInFlight, under the middleware's name:
//
//	limits_gate_capacity            gauge    most requests admitted at once
//	limits_gate_in_flight           gauge    requests inside now
//	limits_gate_peak_in_flight      gauge    most requests inside at once, ever
//	limits_gate_waiting             gauge    requests waiting for a place now
//	limits_gate_admitted_total      counter  requests let in
//	limits_gate_shed_total          counter  requests refused at once
//	limits_gate_timed_out_total     counter  requests that waited and gave up
//
// A limits.GCRA:
//
//	limits_gcra_keys                gauge    keys held, expired ones not yet reused included
//	limits_gcra_max_keys            gauge    most keys the table holds
//	limits_gcra_table_full_total    counter  new keys refused: the table was full of keys in use
//
// An httplimit.Middleware, and those its With made, which share its
// counters:
//
//	limits_http_requests_total{layer, outcome}
//	limits_http_policy_requests_total{policy, outcome}
//
// The outcome of a request is allowed (layer "all": every layer let it
// through), exempt (layer "exempt"), or the reason of its refusal, with the
// layer that refused it: server_busy and request_timeout (layer
// "capacity"); rate_limited, table_full, cost_above_burst, invalid_cost and
// limiter_error (layer "rate"); concurrency_limited and
// concurrency_table_full (layer "concurrency"). Two outcomes overlap with
// allowed: request_timeout counts allowed requests that ran past the
// deadline, and limiter_error counts every limiter failure, requests let
// through by the FailOpen policy included. Per policy (as named in the
// RateLimit header fields), the outcome is allowed or the reason of a
// refusal by that policy.
//
// A redislimit.GCRA:
//
//	limits_redis_calls_total{op, result}      counter    script calls: op decide or refund, result ok or failed
//	limits_redis_failures_total{kind}         counter    failed calls: timeout, connection, canceled, server, other
//	limits_redis_fallbacks_total              counter    decisions made by the fallback GCRA
//	limits_redis_call_duration_seconds        histogram  time calls took, buckets from 25µs doubling to 409.6ms
//
// # Queries
//
// Refusals per second by reason, over every middleware:
//
//	sum by (outcome) (rate(limits_http_requests_total{outcome!~"allowed|exempt"}[5m]))
//
// Gate saturation, the share of the capacity in use, and the requests shed:
//
//	limits_gate_in_flight / limits_gate_capacity
//	rate(limits_gate_shed_total[5m]) + rate(limits_gate_timed_out_total[5m])
//
// Table fullness, and refusals for a full table:
//
//	limits_gcra_keys / limits_gcra_max_keys
//	rate(limits_gcra_table_full_total[5m])
package limitsprom
