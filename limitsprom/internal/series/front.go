package series

// This file reads the counters of a front end, the layers that apply
// limits to requests. A front end is read through frontStats, so that
// another front end whose Stats has the fields of httplimit.Stats (such
// as a gRPC one) is added by a function that copies them, as fromHTTP
// does, a front naming its subsystem, and a case in For.

import (
	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/httplimit"
)

// front describes a kind of front end.
type front struct {
	// subsystem names its metrics: limits_<subsystem>_requests_total.
	subsystem string
	// what the help texts call its requests, such as "HTTP requests".
	what string
}

var httpFront = front{subsystem: "http", what: "HTTP requests"}

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

// frontStats is a front end's snapshot, whatever the front end.
type frontStats struct {
	requests [nOutcomes]uint64
	gate     *limits.GateStats // nil without a gate
	policies []policyStats
}

// policyStats counts the outcomes of one rate policy.
type policyStats struct {
	name   string
	counts [nPolicyOutcomes]uint64
}

// fromHTTP returns the counters of an httplimit.Middleware.
func fromHTTP(s httplimit.Stats) frontStats {
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
		f.policies[i] = policyStats{name: p.Name, counts: [nPolicyOutcomes]uint64{
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

// frontSet returns the Set of a front end of kind fr whose snapshot
// stats returns. The front end's gate, if it has one, is exported as a
// Gate of the same name; whether it has one is read once, here, as a
// front end's gate is set when it is made.
func frontSet(fr front, stats func() frontStats) Set {
	metrics := []Metric{
		{Subsystem: fr.subsystem, Name: "requests", Kind: Counter, Unit: "{request}", Labels: []string{"layer", "outcome"},
			Help: fr.what + " by outcome, with the layer that decided it: allowed (layer all), exempt, or the reason of a refusal. " +
				"request_timeout also counts as allowed, and so does limiter_error when the policy lets requests through."},
		{Subsystem: fr.subsystem, Name: "policy_requests", Kind: Counter, Unit: "{request}", Labels: []string{"policy", "outcome"},
			Help: fr.what + " by rate policy and outcome: allowed, or the reason the policy refused them."},
	}
	hasGate := stats().gate != nil
	if hasGate {
		metrics = append(metrics, gateMetrics[:]...)
	}
	return Set{Metrics: metrics, Read: func(e Emitter) {
		s := stats()
		for i, n := range s.requests {
			e.Value(0, count(n), outcomes[i].layer, outcomes[i].outcome)
		}
		for _, p := range s.policies {
			for i, n := range p.counts {
				e.Value(1, count(n), p.name, policyOutcomes[i])
			}
		}
		if hasGate && s.gate != nil {
			readGate(e, 2, *s.gate)
		}
	}}
}
