// Package limitsprom exports the counters of package limits and its
// net/http front end as Prometheus metrics, so that a limit that fires is
// seen, and so is one that never does.
//
// One call registers a component under a name of the caller's choosing:
//
//	var (
//		middleware *httplimit.Middleware
//		loginGCRA  *limits.GCRA
//		jobsGate   *limits.Gate
//	)
//	reg := prometheus.NewRegistry()
//	limitsprom.Register(reg, "api", middleware)  // *httplimit.Middleware, with its gate
//	limitsprom.Register(reg, "login", loginGCRA) // *limits.GCRA
//	limitsprom.Register(reg, "jobs", jobsGate)   // *limits.Gate
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// This package handles the components of the core module only, and links
// neither a Redis client nor gRPC. The components of other modules have a
// package each, in a module of its own, with the same conventions:
//
//	var (
//		redisGCRA   *redislimit.GCRA
//		interceptor *grpclimit.Interceptor
//	)
//	reg := prometheus.NewRegistry()
//	redislimitprom.Register(reg, "fleet", redisGCRA) // *redislimit.GCRA
//	grpclimitprom.Register(reg, "rpc", interceptor)  // *grpclimit.Interceptor, with its gate
//
// The collectors read each component's snapshot when scraped, and keep no
// state between scrapes: the request path pays nothing for them. Every
// metric carries the label name="<name>"; the others have a fixed, small
// set of values (a layer, an outcome, a policy name from the
// configuration), never a client's key or address. Every series is
// exported from the start, at 0, so that a limit that has never fired
// shows as 0, not as missing. Package limitsotel, a module of its own, exports
// the same series as OpenTelemetry instruments.
//
// # Metrics
//
// A limits.Gate, and the gate of an httplimit.Middleware (or a
// grpclimit.Interceptor) configured with MaxInFlight, under the front
// end's name:
//
//	limits_gate_capacity            gauge    most requests admitted at once
//	limits_gate_in_flight           gauge    requests inside now
//	limits_gate_peak_in_flight      gauge    most requests inside at once, ever
//	limits_gate_waiting             gauge    requests waiting for a place now
//	limits_gate_admitted_total      counter  requests let in
//	limits_gate_shed_total          counter  requests refused at once
//	limits_gate_timed_out_total     counter  requests that waited and gave up
//	limits_gate_waited_total        counter  requests that waited, let in or not
//	limits_gate_overloaded          gauge    1 while waits are cut (Gate.AdaptWait)
//	limits_gate_overloads_total     counter  times waits began to be cut
//	limits_gate_wait_seconds_total  counter  seconds spent waiting, added up
//
// and, by priority (label priority: sheddable, default, critical; see
// limits.WithReserve):
//
//	limits_gate_priority_capacity        gauge    requests inside below which the priority enters
//	limits_gate_priority_admitted_total  counter  requests of the priority let in
//	limits_gate_priority_shed_total      counter  requests of the priority refused at once
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
//	limits_http_requests_total{layer, outcome}          counter
//	limits_http_policy_requests_total{policy, outcome}  counter
//	limits_http_policy_keys{policy}                     gauge    keys the policy's local GCRA holds
//	limits_http_policy_max_keys{policy}                 gauge    most keys it may hold
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
// refusal by that policy. The keys of a policy are those of the GCRA that
// decides it in the process (the one asked before a remote Limiter, if
// any): both gauges are 0 for a policy decided by a remote Limiter alone.
//
// Package grpclimitprom exports the same series for a gRPC Interceptor,
// as limits_grpc_requests_total and so on; package redislimitprom exports
// a Redis GCRA's calls, failures, fallbacks and call latency, as
// limits_redis_*.
//
// # Queries
//
// Refusals per second by reason, over every middleware:
//
//	sum by (outcome) (rate(limits_http_requests_total{outcome!~"allowed|exempt"}[5m]))
//
// Gate saturation, the share of the capacity in use, and the requests
// shed:
//
//	limits_gate_in_flight / limits_gate_capacity
//	rate(limits_gate_shed_total[5m]) + rate(limits_gate_timed_out_total[5m])
//
// The mean wait for a place, and the share of each priority refused:
//
//	rate(limits_gate_wait_seconds_total[5m]) / rate(limits_gate_waited_total[5m])
//	rate(limits_gate_priority_shed_total[5m]) / (rate(limits_gate_priority_shed_total[5m]) + rate(limits_gate_priority_admitted_total[5m]))
//
// Table fullness, of a GCRA and of each policy's table, and refusals for a
// full table:
//
//	limits_gcra_keys / limits_gcra_max_keys
//	limits_http_policy_keys / (limits_http_policy_max_keys > 0)
//	rate(limits_gcra_table_full_total[5m])
//	rate(limits_http_policy_requests_total{outcome="table_full"}[5m])
package limitsprom
