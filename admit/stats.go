package admit

import (
	"encoding/json"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/quota"
)

// Counts counts outcomes by reason, in requests: Counts[r] is the count of
// reason r (Allowed, Exempt, ServerBusy, a limiter's reason,
// and so on). It marshals to JSON as an object keyed by the reasons'
// codes ("allowed", "rate_limited", ...).
type Counts [numReasons]uint64

// MarshalJSON returns c as an object keyed by the reasons' codes.
func (c Counts) MarshalJSON() ([]byte, error) {
	m := make(map[string]uint64, numReasons)
	for r, n := range c {
		m[limits.Reason(r).String()] = n
	}
	return json.Marshal(m)
}

// load returns a snapshot of n's counts and of its shadow counts.
func (n *counts) load() (c, shadow Counts) {
	for r := range c {
		c[r] = n.n[r].Load()
		shadow[r] = n.shadow[r].Load()
	}
	return c, shadow
}

// Stats is a snapshot of an Engine's counters, from 0 when the Engine was
// made; each is read atomically, but not all at one instant. Counters
// keep counting across updates. It marshals to JSON, so it can be
// published with expvar.
type Stats struct {
	// Protocol names the front end the counts are of, such as "http" or
	// "grpc", as metrics name them; "" for an Engine used directly.
	Protocol string `json:"protocol,omitempty"`
	// Requests counts the requests by outcome: Allowed (admitted), Exempt,
	// or the reason of a refusal. RequestTimeout also counts admitted
	// requests whose handler ran past the deadline (Ticket.TimedOut), and
	// LimiterError every failed limiter call, whether the request was
	// then refused or served (Config.FailOpen).
	Requests Counts `json:"requests"`
	// Shadow counts what layers in shadow mode would have refused, by
	// reason; their requests are counted in Requests as they went.
	Shadow Counts `json:"shadow"`
	// Gate holds the gate's counters, if there is a gate.
	Gate *limits.GateStats `json:"gate,omitempty"`
	// SharedGate says the gate is a shared one (Config.Gate or
	// Config.Controller): Gate and Adaptive are then the counters of the
	// whole gate, which others use too.
	SharedGate bool `json:"shared_gate,omitempty"`
	// Adaptive holds the adaptive limit's state and recent history, if
	// Config.Adaptive is set.
	Adaptive *adaptive.Stats `json:"adaptive,omitempty"`
	// Policies holds the counts of each rate policy, in the order they
	// apply.
	Policies []PolicyStats `json:"policies,omitempty"`
	// Routes holds the counts of each route pattern configured (in
	// Policies' Routes and Exempt), then of the requests of no route,
	// under the route "other"; nil without route patterns.
	Routes []RouteStats `json:"routes,omitempty"`
}

// PolicyStats counts the outcomes of one rate policy, in requests. A
// request allowed by the policy and refused by a later layer counts as
// allowed here.
type PolicyStats struct {
	// Name is the policy's name, as in the rate limit fields: with its
	// tier's after a slash, for a tier's limit ("api/pro").
	Name string `json:"name"`
	// Tier is the tier of the limit counted, "" for the policy's own.
	Tier string `json:"tier,omitempty"`
	// Requests counts the requests the policy allowed and charged
	// (Allowed), refused, by reason, or could not decide (LimiterError).
	Requests Counts `json:"requests"`
	// Shadow counts the requests the policy would have refused, in shadow
	// mode.
	Shadow Counts `json:"shadow"`
	// Keys is the number of keys the policy's local limiter holds, and
	// MaxKeys the most it may: a table near full is a limit set too low,
	// or an attack. Both are 0 for a policy decided elsewhere alone, and
	// for one that shares the table of a policy before it (keyless shares
	// the caller key's), so that a sum counts each table once.
	Keys    int `json:"keys"`
	MaxKeys int `json:"max_keys"`
}

// RouteStats counts the outcomes of the requests of one route pattern.
type RouteStats struct {
	// Route is the pattern, or "other" for the requests of no route.
	Route string `json:"route"`
	// Requests counts the route's requests by outcome, as Stats.Requests
	// does.
	Requests Counts `json:"requests"`
}

// otherRoute labels the requests of no route.
const otherRoute = "other"

// Stats returns a snapshot of e's counters.
func (e *Engine) Stats() Stats {
	st := e.st.Load()
	var s Stats
	s.Requests, s.Shadow = e.n.load()
	s.Gate, s.Adaptive = st.cap.stats()
	s.SharedGate = st.cap != nil && st.cap.shared
	for _, p := range st.policies {
		base := p.base.stats()
		for _, l := range p.overrides {
			o := l.stats()
			for r := range base.Requests {
				base.Requests[r] += o.Requests[r]
				base.Shadow[r] += o.Shadow[r]
			}
		}
		s.Policies = append(s.Policies, base)
		for _, t := range sortedKeys(p.tiers) {
			s.Policies = append(s.Policies, p.tiers[t].stats())
		}
		if p.keyless != nil && p.keyless != p {
			s.Policies = append(s.Policies, p.keyless.base.stats())
		}
	}
	if st.router != nil {
		for _, r := range st.router.all {
			rs := RouteStats{Route: r.pattern}
			rs.Requests, _ = r.counts.load()
			s.Routes = append(s.Routes, rs)
		}
		rs := RouteStats{Route: otherRoute}
		rs.Requests, _ = e.other.load()
		s.Routes = append(s.Routes, rs)
	}
	return s
}

// stats returns the counts of lim's policy.
func (lim *limiter) stats() PolicyStats {
	p := PolicyStats{Name: lim.name, Tier: lim.tier}
	p.Requests, p.Shadow = lim.n.load()
	switch {
	case !lim.keys:
	case lim.counter != nil:
		if q, ok := lim.counter.(*quota.Quota); ok {
			p.Keys, p.MaxKeys = q.Len(), q.MaxKeys()
		}
	case lim.local != nil:
		p.Keys, p.MaxKeys = lim.local.Len(), lim.local.MaxKeys()
	}
	return p
}
