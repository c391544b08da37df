package series

// This file reads the counters of a front end, the layers that apply
// limits to requests. Every front end reports the fields of
// httplimit.Stats (grpclimit.Stats has the same fields and JSON names), so
// one description and one reader serve them all: a front end differs only
// in the subsystem that names its metrics and in its help texts.

import (
	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/httplimit"
)

// Front describes a kind of front end.
type Front struct {
	// Subsystem names its metrics: limits_<Subsystem>_requests_total.
	Subsystem string
	// Unit is the unit of its requests, such as "{request}".
	Unit string
	// Requests and PolicyRequests are the help texts of its requests by
	// layer and outcome, and by rate policy and outcome.
	Requests, PolicyRequests string
}

// HTTP is the front end of package httplimit.
var HTTP = Front{
	Subsystem: "http",
	Unit:      "{request}",
	Requests: "HTTP requests by outcome, with the layer that decided it: allowed (layer all), exempt, or the reason of a refusal. " +
		"request_timeout also counts as allowed, and so does limiter_error when the policy lets requests through.",
	PolicyRequests: "HTTP requests by rate policy and outcome: allowed, or the reason the policy refused them.",
}

// GRPC is the front end of package grpclimit, whose calls are described
// here so that its metrics are defined next to HTTP's; package grpcseries
// reads them.
var GRPC = Front{
	Subsystem: "grpc",
	Unit:      "{call}",
	Requests: "gRPC calls by outcome, with the layer that decided it: allowed (layer all), exempt, or the reason of a refusal. " +
		"request_timeout also counts as allowed, and so does limiter_error when the policy lets calls through; " +
		"the rate layer's refusals include stream messages when messages are limited.",
	PolicyRequests: "gRPC calls, and stream messages when they are limited, by rate policy and outcome: allowed, or the reason the policy refused them.",
}

// Every outcome of a front end's requests, with the layer that decides
// it: the index of each in frontStats.requests.
const (
	outExempt = iota
	outAllowed
	outServerBusy
	outRequestTimeout
	outRateLimited
	outTableFull
	outCostAboveBurst
	outInvalidCost
	outLimiterError
	outConcurrencyLimited
	outConcurrencyTableFull
	nOutcomes
)

// outcomes holds the label values of each outcome, indexed as above.
var outcomes = [nOutcomes]struct{ layer, outcome string }{
	outExempt:               {"exempt", "exempt"},
	outAllowed:              {"all", "allowed"},
	outServerBusy:           {"capacity", httplimit.ReasonServerBusy},
	outRequestTimeout:       {"capacity", httplimit.ReasonRequestTimeout},
	outRateLimited:          {"rate", httplimit.ReasonRateLimited},
	outTableFull:            {"rate", httplimit.ReasonTableFull},
	outCostAboveBurst:       {"rate", httplimit.ReasonCostAboveBurst},
	outInvalidCost:          {"rate", httplimit.ReasonInvalidCost},
	outLimiterError:         {"rate", httplimit.ReasonLimiterError},
	outConcurrencyLimited:   {"concurrency", httplimit.ReasonConcurrencyLimited},
	outConcurrencyTableFull: {"concurrency", httplimit.ReasonConcurrencyTableFull},
}

// The outcomes of a rate policy: the index of each in policyStats.counts.
const (
	polAllowed = iota
	polRateLimited
	polTableFull
	polCostAboveBurst
	polInvalidCost
	polLimiterError
	nPolicyOutcomes
)

// policyOutcomes holds the label value of each policy outcome.
var policyOutcomes = [nPolicyOutcomes]string{
	polAllowed:        "allowed",
	polRateLimited:    httplimit.ReasonRateLimited,
	polTableFull:      httplimit.ReasonTableFull,
	polCostAboveBurst: httplimit.ReasonCostAboveBurst,
	polInvalidCost:    httplimit.ReasonInvalidCost,
	polLimiterError:   httplimit.ReasonLimiterError,
}

// frontStats is a front end's snapshot, with its outcomes indexed.
type frontStats struct {
	requests [nOutcomes]uint64
	gate     *limits.GateStats // nil without a gate
	policies []policyStats
}

// policyStats counts the outcomes of one rate policy, and the keys of its
// local GCRA.
type policyStats struct {
	name          string
	counts        [nPolicyOutcomes]uint64
	keys, maxKeys int
}

// fromStats indexes the counters of a front end.
func fromStats(s httplimit.Stats) frontStats {
	f := frontStats{gate: s.Gate, policies: make([]policyStats, len(s.Policies))}
	f.requests = [nOutcomes]uint64{
		outExempt:               s.Exempt,
		outAllowed:              s.Allowed,
		outServerBusy:           s.ServerBusy,
		outRequestTimeout:       s.RequestTimeout,
		outRateLimited:          s.RateLimited,
		outTableFull:            s.TableFull,
		outCostAboveBurst:       s.CostAboveBurst,
		outInvalidCost:          s.InvalidCost,
		outLimiterError:         s.LimiterError,
		outConcurrencyLimited:   s.ConcurrencyLimited,
		outConcurrencyTableFull: s.ConcurrencyTableFull,
	}
	for i, p := range s.Policies {
		f.policies[i] = policyStats{name: p.Name, keys: p.Keys, maxKeys: p.MaxKeys, counts: [nPolicyOutcomes]uint64{
			polAllowed:        p.Allowed,
			polRateLimited:    p.RateLimited,
			polTableFull:      p.TableFull,
			polCostAboveBurst: p.CostAboveBurst,
			polInvalidCost:    p.InvalidCost,
			polLimiterError:   p.LimiterError,
		}}
	}
	return f
}

// The metrics of a front end, at these indices of the Metrics of its Set;
// its gate's, if it has one, follow.
const (
	frontRequests = iota
	frontPolicyRequests
	frontPolicyKeys
	frontPolicyMaxKeys
	nFront
)

// FrontSet returns the Set of a front end of kind fr whose counters stats
// returns. The front end's gate, if it has one of its own, is exported as
// a Gate of the same name; a shared gate (Stats.SharedGate) is not, as
// its own collector exports it once however many front ends use it.
// Whether there is a gate to export is read once, here, as a front end's
// gate is set when it is made.
func FrontSet(fr Front, stats func() httplimit.Stats) Set {
	sub := fr.Subsystem
	metrics := []Metric{
		frontRequests: {Subsystem: sub, Name: "requests", Kind: Counter, Unit: fr.Unit, Labels: []string{"layer", "outcome"},
			Help: fr.Requests},
		frontPolicyRequests: {Subsystem: sub, Name: "policy_requests", Kind: Counter, Unit: fr.Unit, Labels: []string{"policy", "outcome"},
			Help: fr.PolicyRequests},
		frontPolicyKeys: {Subsystem: sub, Name: "policy_keys", Kind: Gauge, Unit: "{key}", Labels: []string{"policy"},
			Help: "Keys the local GCRA of the rate policy holds, including expired keys whose place has not been reused yet; " +
				"0 for a policy decided by another limiter alone, or that shares the table of a policy before it (keyless), so that a sum counts each table once."},
		frontPolicyMaxKeys: {Subsystem: sub, Name: "policy_max_keys", Kind: Gauge, Unit: "{key}", Labels: []string{"policy"},
			Help: "Most keys the local GCRA of the rate policy holds; 0 for a policy decided by another limiter alone, or that shares the table of a policy before it."},
	}
	first := stats()
	hasGate := first.Gate != nil && !first.SharedGate
	if hasGate {
		metrics = append(metrics, gateMetrics[:]...)
	}
	return Set{Metrics: metrics, Read: func(e Emitter) {
		s := fromStats(stats())
		for i, n := range s.requests {
			e.Value(frontRequests, Count(n), outcomes[i].layer, outcomes[i].outcome)
		}
		for _, p := range s.policies {
			for i, n := range p.counts {
				e.Value(frontPolicyRequests, Count(n), p.name, policyOutcomes[i])
			}
			e.Value(frontPolicyKeys, int64(p.keys), p.name)
			e.Value(frontPolicyMaxKeys, int64(p.maxKeys), p.name)
		}
		if hasGate && s.gate != nil {
			readGate(e, nFront, *s.gate)
		}
	}}
}
