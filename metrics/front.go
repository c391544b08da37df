package metrics

// This file describes the metrics of an admission engine's front end from
// its admit.Stats: every front end reports the same counters, so one
// description and one reader serve them all; a front end differs only in
// the subsystem that names its metrics (Stats.Protocol) and in the words
// of its help texts.

import (
	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
)

// front is what names and describes the metrics of one kind of front end.
type front struct {
	// unit is the unit of its requests, such as "{request}"; what names
	// them in help texts; route names the label of its routes.
	unit, what, route string
}

// fronts are the kinds of front end, by Stats.Protocol; any other takes
// the protocol as its subsystem and the words of "".
var fronts = map[string]front{
	"http": {unit: "{request}", what: "HTTP requests", route: "route"},
	"grpc": {unit: "{call}", what: "gRPC calls, and stream messages when they are limited,", route: "method"},
	"":     {unit: "{request}", what: "Requests", route: "route"},
}

// layerOf returns the layer that decides an outcome, as the label layer
// of requests_total gives it.
func layerOf(r limits.Reason) string {
	switch r {
	case admit.Allowed:
		return "all"
	case admit.Exempt:
		return "exempt"
	case admit.ServerBusy, admit.RequestTimeout:
		return "capacity"
	case admit.ConcurrencyLimited, admit.ConcurrencyTableFull:
		return "concurrency"
	}
	return "rate"
}

// The metrics of a front end, at these indices of the Metrics of its Set;
// its gate's, if it has one of its own, follow.
const (
	frontRequests = iota
	frontShadow
	frontPolicyRequests
	frontPolicyShadow
	frontPolicyKeys
	frontPolicyMaxKeys
	frontRouteRequests
	nFront
)

// policyOutcomes are the outcomes of a rate policy.
var policyOutcomes = []limits.Reason{admit.Allowed, limits.ReasonRateLimited, limits.ReasonTableFull,
	limits.ReasonCostAboveBurst, limits.ReasonInvalidCost, admit.LimiterError}

// policyShadowOutcomes are the refusals a rate policy in shadow mode
// counts: its limiter's, never a failure (a failed call is counted as
// such, in shadow mode or not).
var policyShadowOutcomes = []limits.Reason{limits.ReasonRateLimited, limits.ReasonTableFull,
	limits.ReasonCostAboveBurst, limits.ReasonInvalidCost}

// shadowOutcomes are the refusals of the layers that have a shadow mode:
// the gate's, and the rate policies'.
var shadowOutcomes = append([]limits.Reason{admit.ServerBusy}, policyShadowOutcomes...)

// frontSet returns the Set of a front end whose counters stats returns.
// The subsystem is the protocol of its first snapshot ("admit" for an
// engine used directly). The front end's gate, if it has one of its own,
// is exported as a Gate of the same name; a shared gate
// (Stats.SharedGate) is not, as its own collector exports it once however
// many front ends use it. Whether there is a gate to export is read once,
// here, as a front end's gate is set when it is made.
func frontSet(stats func() admit.Stats) Set {
	first := stats()
	sub := first.Protocol
	fr, ok := fronts[sub]
	if !ok {
		fr = fronts[""]
	}
	if sub == "" {
		sub = "admit"
	}
	metrics := []Metric{
		frontRequests: {Subsystem: sub, Name: "requests", Kind: Counter, Unit: fr.unit, Labels: []string{"layer", "outcome"},
			Help: fr.what + " by outcome, with the layer that decided it: allowed (layer all), exempt, or the reason of a refusal. " +
				"request_timeout also counts requests allowed and cut short, and limiter_error every failed limiter call, " +
				"including those the failure policy let through."},
		frontShadow: {Subsystem: sub, Name: "shadow_refusals", Kind: Counter, Unit: fr.unit, Labels: []string{"layer", "outcome"},
			Help: fr.what + " that a layer in shadow mode (the gate, or a rate policy) would have refused, by layer and reason; " +
				"they went on as if allowed."},
		frontPolicyRequests: {Subsystem: sub, Name: "policy_requests", Kind: Counter, Unit: fr.unit, Labels: []string{"policy", "outcome"},
			Help: fr.what + " by rate policy and outcome: allowed, or the reason the policy refused them."},
		frontPolicyShadow: {Subsystem: sub, Name: "policy_shadow_refusals", Kind: Counter, Unit: fr.unit, Labels: []string{"policy", "outcome"},
			Help: fr.what + " that a rate policy in shadow mode would have refused, by policy and reason."},
		frontPolicyKeys: {Subsystem: sub, Name: "policy_keys", Kind: Gauge, Unit: "{key}", Labels: []string{"policy"},
			Help: "Keys the local GCRA of the rate policy holds, including expired keys whose place has not been reused yet; " +
				"0 for a policy decided by another limiter alone, or that shares the table of a policy before it (keyless), so that a sum counts each table once."},
		frontPolicyMaxKeys: {Subsystem: sub, Name: "policy_max_keys", Kind: Gauge, Unit: "{key}", Labels: []string{"policy"},
			Help: "Most keys the local GCRA of the rate policy holds; 0 for a policy decided by another limiter alone, or that shares the table of a policy before it."},
		frontRouteRequests: {Subsystem: sub, Name: fr.route + "_requests", Kind: Counter, Unit: fr.unit, Labels: []string{fr.route, "outcome"},
			Help: fr.what + " by the " + fr.route + " pattern of the configuration they matched (other for the rest) and outcome: " +
				"allowed, exempt, or the reason of a refusal by any layer."},
	}
	hasGate := first.Gate != nil && !first.SharedGate
	if hasGate {
		metrics = append(metrics, gateMetrics[:]...)
	}
	return Set{Metrics: metrics, Read: func(e Emitter) {
		s := stats()
		for r, n := range s.Requests {
			reason := limits.Reason(r)
			e.Value(frontRequests, Count(n), layerOf(reason), reason.String())
		}
		for _, r := range shadowOutcomes {
			e.Value(frontShadow, Count(s.Shadow[r]), layerOf(r), r.String())
		}
		for i := range s.Policies {
			p := &s.Policies[i]
			for _, r := range policyOutcomes {
				e.Value(frontPolicyRequests, Count(p.Requests[r]), p.Name, r.String())
			}
			for _, r := range policyShadowOutcomes {
				e.Value(frontPolicyShadow, Count(p.Shadow[r]), p.Name, r.String())
			}
			e.Value(frontPolicyKeys, int64(p.Keys), p.Name)
			e.Value(frontPolicyMaxKeys, int64(p.MaxKeys), p.Name)
		}
		for i := range s.Routes {
			rt := &s.Routes[i]
			for r, n := range rt.Requests {
				e.Value(frontRouteRequests, Count(n), rt.Route, limits.Reason(r).String())
			}
		}
		if hasGate && s.Gate != nil {
			readGate(e, nFront, *s.Gate)
		}
	}}
}
