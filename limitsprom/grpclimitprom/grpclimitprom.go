// Package grpclimitprom exports the counters of a grpclimit.Interceptor
// as Prometheus metrics: its calls by layer and outcome, by rate policy,
// the fullness of each policy's table of clients, and its gate.
//
//	var interceptor *grpclimit.Interceptor
//	reg := prometheus.NewRegistry()
//	grpclimitprom.Register(reg, "rpc", interceptor) // *grpclimit.Interceptor, with its gate
//
// It follows the conventions of package limitsprom, whose package
// documentation describes them: one call per component, values read at
// scrape time, the label name="<name>" on every metric, every series
// present from the start at 0. It is a package, and a module, of its own
// so that limitsprom links no gRPC and its users get no gRPC module.
//
// # Metrics
//
// The series of an httplimit.Middleware, under the subsystem grpc, with
// the same layers, outcomes and policies:
//
//	limits_grpc_requests_total{layer, outcome}          counter
//	limits_grpc_policy_requests_total{policy, outcome}  counter
//	limits_grpc_policy_keys{policy}                     gauge    keys the policy's local GCRA holds
//	limits_grpc_policy_max_keys{policy}                 gauge    most keys it may hold
//	limits_grpc_method_requests_total{method, outcome}  counter  by the names registered with Interceptor.Method, "other" for the rest
//
// and, for an Interceptor configured with MaxInFlight, the limits_gate_*
// metrics of its gate under the Interceptor's name (so a gate, or a
// middleware with a gate, cannot share that name). A gate shared through
// Config.Gate is not exported here: register it once, under a name of its
// own, with limitsprom.Register. A stream counts as one
// call, when it opens; with Config.LimitMessages, the rate layer's
// outcomes and the policies' also count the stream messages charged or
// refused.
//
// # Queries
//
// Refusals per second by reason, and the fullness of each policy's table:
//
//	sum by (outcome) (rate(limits_grpc_requests_total{outcome!~"allowed|exempt"}[5m]))
//	limits_grpc_policy_keys / (limits_grpc_policy_max_keys > 0)
package grpclimitprom

import (
	"github.com/limitsgo/limits/grpclimit"
	"github.com/limitsgo/limits/limitsprom/internal/grpcseries"
	"github.com/limitsgo/limits/limitsprom/internal/promexport"
	"github.com/prometheus/client_golang/prometheus"
)

// NewCollector returns a prometheus.Collector that exports the counters
// of it, each metric labelled name="<name>".
//
// The collector reads it.Stats each time it is collected, and keeps
// nothing in between: a call through it costs the same with or without
// the collector. It is safe for concurrent use, as it is.
//
// name tells Interceptors apart: several may be registered side by side
// under different names, and registering two under one name fails. It
// must be a non-empty UTF-8 string; otherwise registering the collector
// returns an error saying so. NewCollector panics if it is nil, a
// programming error.
func NewCollector(name string, it *grpclimit.Interceptor) prometheus.Collector {
	if it == nil {
		panic("grpclimitprom: nil Interceptor")
	}
	return promexport.Collector("grpclimitprom", name, grpcseries.Set(it))
}

// Register registers NewCollector(name, it) with reg, and returns reg's
// error, if any: an invalid name, or an Interceptor already registered
// under name (or, for one with a gate, a gate).
func Register(reg prometheus.Registerer, name string, it *grpclimit.Interceptor) error {
	return reg.Register(NewCollector(name, it))
}
