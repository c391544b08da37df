// Package limitsprom exports the counters of package limits, of its front
// ends and of the Redis GCRA as Prometheus metrics, so that a limit that
// fires is seen, and so is one that never does.
//
// One call registers a component, of any kind, under a name of the
// caller's choosing:
//
//	var (
//		middleware  *httplimit.Middleware
//		interceptor *grpclimit.Interceptor
//		loginGCRA   *limits.GCRA
//		jobsGate    *limits.Gate
//		fleet       *redislimit.GCRA
//	)
//	reg := prometheus.NewRegistry()
//	limitsprom.Register(reg, "api", middleware)  // with its gate
//	limitsprom.Register(reg, "rpc", interceptor) // with its gate
//	limitsprom.Register(reg, "login", loginGCRA)
//	limitsprom.Register(reg, "jobs", jobsGate)
//	limitsprom.Register(reg, "fleet", fleet)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// The metrics are described once, by package metrics of the core module,
// for every exporter: this package and limitsotel export the same series.
// A component is anything metrics.For describes: a Gate or a GCRA of
// package limits, anything with the Stats of an admission engine (an
// admit.Engine, an httplimit.Middleware, a grpclimit.Interceptor), and a
// component that describes itself (a redislimit.GCRA). This package
// imports none of the front ends or clients: a service registers what it
// has, and links no gRPC or Redis client for the others.
//
// The collectors read each component's snapshot when scraped, and keep no
// state between scrapes: the request path pays nothing for them. Every
// metric carries the label name="<name>"; the others have a fixed, small
// set of values (a layer, an outcome, a policy name or a route pattern
// from the configuration), never a client's key or address, nor a
// request's path. Every series is exported from the start, at 0, so that
// a limit that has never fired shows as 0, not as missing. Package
// limitsotel, a module of its own, exports the same series as
// OpenTelemetry instruments.
//
// # Metrics
//
// A limits.Gate, and the gate of a front end configured with MaxInFlight,
// under the front end's name:
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
// A gate shared by front ends (admit.Config.Gate) is exported by its own
// registration only, so that its requests are counted once.
//
// A limits.GCRA:
//
//	limits_gcra_keys                gauge    keys held, expired ones not yet reused included
//	limits_gcra_max_keys            gauge    most keys the table holds
//	limits_gcra_table_full_total    counter  new keys refused: the table was full of keys in use
//
// A front end, under the subsystem of its protocol: limits_http_* for an
// httplimit.Middleware, limits_grpc_* for a grpclimit.Interceptor (whose
// unit is the call, and whose route label is method),
// limits_admit_* for an admit.Engine used directly:
//
//	limits_http_requests_total{layer, outcome}                 counter
//	limits_http_shadow_refusals_total{layer, outcome}          counter  what layers in shadow mode would have refused
//	limits_http_policy_requests_total{policy, outcome}         counter
//	limits_http_policy_shadow_refusals_total{policy, outcome}  counter
//	limits_http_policy_keys{policy}                            gauge    keys the policy's local GCRA holds
//	limits_http_policy_max_keys{policy}                        gauge    most keys it may hold
//	limits_http_route_requests_total{route, outcome}           counter  by route pattern; other for the rest
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
// rate limit fields), the outcome is allowed or the reason of a refusal
// by that policy. The keys of a policy are those of the GCRA that decides
// it in the process (the one asked before a remote limiter, if any): both
// gauges are 0 for a policy decided by a remote limiter alone. The routes
// are the patterns of the configuration (the policies' Routes and
// Exempt), and other for the requests that match none; there are none
// without patterns.
//
// A redislimit.GCRA (see GCRA.Metrics there): its calls by op and result,
// failures by kind, fallbacks and call latency, as limits_redis_*.
//
// # Queries
//
// Refusals per second by reason, over every middleware:
//
//	sum by (outcome) (rate(limits_http_requests_total{outcome!~"allowed|exempt"}[5m]))
//
// The routes refused most, and what a policy in shadow mode would refuse:
//
//	topk(5, sum by (route) (rate(limits_http_route_requests_total{outcome!~"allowed|exempt"}[5m])))
//	sum by (policy, outcome) (rate(limits_http_policy_shadow_refusals_total[5m]))
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
