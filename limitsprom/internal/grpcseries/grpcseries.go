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

// Set returns the Set of it, which must not be nil.
func Set(it *grpclimit.Interceptor) series.Set {
	return series.FrontSet(series.GRPC, func() httplimit.Stats { return Stats(it.Stats()) })
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
