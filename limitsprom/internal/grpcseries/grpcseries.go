// Package grpcseries describes the metrics of a grpclimit.Interceptor for
// the exporters of package series, apart from the core's, so that only
// the packages that export an Interceptor link gRPC.
//
// An Interceptor's counters are those of an httplimit.Middleware, field
// for field: they are converted, and exported under series.GRPC with the
// outcomes, layers and metrics that series defines for every front end.
package grpcseries

import (
	"github.com/limitsgo/limits/grpclimit"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/limitsprom/internal/series"
)

// Set returns the Set of it, which must not be nil: the series of every
// front end, then limits_grpc_method_requests_total, the calls of each
// method registered with Interceptor.Method by outcome, the others under
// the method "other", so that the label's values are bounded by the
// methods registered.
func Set(it *grpclimit.Interceptor) series.Set {
	stats := func() httplimit.Stats { return Stats(it.Stats()) }
	set := series.FrontSet(series.GRPC, stats)
	at := len(set.Metrics)
	set.Metrics = append(set.Metrics[:at:at], series.Metric{
		Subsystem: "grpc", Name: "method_requests", Kind: series.Counter, Unit: "{call}", Labels: []string{"method", "outcome"},
		Help: "gRPC calls, and stream messages when they are limited, by the method registered with Interceptor.Method (other for the rest) " +
			"and outcome: allowed, exempt, or the reason of a refusal by any layer.",
	})
	set.Read = func(e series.Emitter) {
		// One snapshot for every series of a read.
		s := it.Stats()
		series.FrontSet(series.GRPC, func() httplimit.Stats { return Stats(s) }).Read(e)
		readMethods(e, at, s.Methods)
	}
	return set
}

// outcomes are the outcomes of a call by method, with their label values.
var outcomes = []struct {
	label string
	count func(*grpclimit.MethodStats) uint64
}{
	{"allowed", func(m *grpclimit.MethodStats) uint64 { return m.Allowed }},
	{"exempt", func(m *grpclimit.MethodStats) uint64 { return m.Exempt }},
	{grpclimit.ReasonServerBusy, func(m *grpclimit.MethodStats) uint64 { return m.ServerBusy }},
	{grpclimit.ReasonRequestTimeout, func(m *grpclimit.MethodStats) uint64 { return m.RequestTimeout }},
	{grpclimit.ReasonRateLimited, func(m *grpclimit.MethodStats) uint64 { return m.RateLimited }},
	{grpclimit.ReasonTableFull, func(m *grpclimit.MethodStats) uint64 { return m.TableFull }},
	{grpclimit.ReasonCostAboveBurst, func(m *grpclimit.MethodStats) uint64 { return m.CostAboveBurst }},
	{grpclimit.ReasonInvalidCost, func(m *grpclimit.MethodStats) uint64 { return m.InvalidCost }},
	{grpclimit.ReasonLimiterError, func(m *grpclimit.MethodStats) uint64 { return m.LimiterError }},
	{grpclimit.ReasonConcurrencyLimited, func(m *grpclimit.MethodStats) uint64 { return m.ConcurrencyLimited }},
	{grpclimit.ReasonConcurrencyTableFull, func(m *grpclimit.MethodStats) uint64 { return m.ConcurrencyTableFull }},
}

// readMethods sends the counts of methods as metric m.
func readMethods(e series.Emitter, m int, methods []grpclimit.MethodStats) {
	for i := range methods {
		for _, o := range outcomes {
			e.Value(m, series.Count(o.count(&methods[i])), methods[i].Method, o.label)
		}
	}
}

// Stats returns s with the type of an httplimit.Stats, which has the same
// fields.
func Stats(s grpclimit.Stats) httplimit.Stats {
	h := httplimit.Stats{
		Exempt:               s.Exempt,
		Allowed:              s.Allowed,
		RateLimited:          s.RateLimited,
		ServerBusy:           s.ServerBusy,
		RequestTimeout:       s.RequestTimeout,
		LimiterError:         s.LimiterError,
		TableFull:            s.TableFull,
		CostAboveBurst:       s.CostAboveBurst,
		InvalidCost:          s.InvalidCost,
		ConcurrencyLimited:   s.ConcurrencyLimited,
		ConcurrencyTableFull: s.ConcurrencyTableFull,
		Gate:                 s.Gate,
		SharedGate:           s.SharedGate,
		Policies:             make([]httplimit.PolicyStats, len(s.Policies)),
	}
	for i, p := range s.Policies {
		// A conversion, not a copy: it stops compiling if the two
		// PolicyStats part ways.
		h.Policies[i] = httplimit.PolicyStats(p)
	}
	return h
}
