package grpclimit

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/internal/front"
)

// Policy is a rate limit of some methods, which Interceptor.Method applies
// to their calls after the layers of Config: a login method limited per
// address, a search limited per API key, an export that costs more than a
// read. It has the fields, and the meanings, of httplimit.Policy, for a
// call. The zero Policy is not valid: it needs a Name and a Rate or a
// Limiter.
type Policy struct {
	// Name names the policy in refusals' details, logs and Stats;
	// printable ASCII, required, and unique among the policies of the
	// Interceptor.
	Name string
	// Rate is the policy's limit, applied by a local limiter of at most
	// MaxKeys keys (DefaultMaxKeys if 0) in bursts of Burst (Rate.Events
	// if 0).
	Rate    limits.Limit
	Burst   int
	MaxKeys int
	// Limiter, if set, decides in place of the local limiter, with a local
	// limiter of Rate, if set, asked first (see Config.Limiter). Its calls
	// are bounded by Config.LimiterTimeout.
	Limiter limits.Limiter
	// Key, if set, returns the key of the call's bucket that the caller
	// chooses, such as an API key (see MetadataKey); nil means the client
	// address. Limiters see a hash of such a key, never the key, and a
	// call without one shares one bucket per address. A policy with Key
	// needs the Interceptor to have an address bucket (Config.Rate or
	// Config.Limiter) in front of it.
	Key func(ctx context.Context) string
	// Cost, if set, returns the call's cost in this policy's bucket; nil
	// means 1.
	Cost func(ctx context.Context, fullMethod string) int
}

// route is what Method registered for a name: the layers a call of it
// takes after Config's, and the counts of its calls' outcomes.
type route struct {
	name   string
	own    []*rateLayer // the policies registered under this name
	layers []*rateLayer // for a method: its service's, then its own
	n      front.Counters
}

// routes are the names Method registered, by full method and by service,
// replaced whole on each registration.
type routes struct {
	methods, services map[string]*route
	order             []*route // in the order registered
}

// OtherMethods labels, in Stats.Methods and the metrics, the calls of the
// methods that Method did not register, whose number the Interceptor does
// not bound.
const OtherMethods = "other"

// Method applies policies to the calls of name, after the layers of
// Config, all or nothing: a refusal by any of them gives back what every
// earlier layer charged, Config's included. name is a full method name
// ("/package.Service/Method"), or a service ("package.Service") whose
// methods all take its policies, before a method's own if it has some;
// with Config.LimitMessages, a stream's messages take them too.
// The policies share the Interceptor's gate, client identity, per-client
// counts, failure policy and counters; their refusals are answered as
// Config's are, with the policy's name in the details. Stats (and the
// metrics) count the calls of each name Method registered, so a Method
// with no policies registers a name only to count its calls; the calls
// of names never registered are counted together, as OtherMethods.
//
// Call Method before serving. It returns an error, and changes nothing,
// for an invalid name, a name registered before, or a policy that New
// would refuse (see httplimit.Middleware.With); a policy keyed by the
// caller needs Config.Rate or Config.Limiter.
func (it *Interceptor) Method(name string, policies ...Policy) error {
	isMethod := strings.HasPrefix(name, "/")
	if svc, m, ok := strings.Cut(strings.TrimPrefix(name, "/"), "/"); name == "" || name == OtherMethods ||
		isMethod && (!ok || svc == "" || m == "" || strings.Contains(m, "/")) || !isMethod && strings.Contains(name, "/") {
		return fmt.Errorf("grpclimit: Method needs a full method name (/package.Service/Method) or a service (package.Service), got %q", name)
	}
	it.mu.Lock()
	defer it.mu.Unlock()
	old := it.routes.Load()
	next := &routes{methods: map[string]*route{}, services: map[string]*route{}}
	if old != nil {
		next.methods, next.services = maps.Clone(old.methods), maps.Clone(old.services)
		next.order = append(next.order, old.order...)
	}
	if next.methods[name] != nil || next.services[name] != nil {
		return fmt.Errorf("grpclimit: Method %q: registered before", name)
	}
	existing := append([]*rateLayer(nil), it.rates...)
	for _, r := range next.order {
		existing = append(existing, r.own...)
	}
	specs := make([]front.PolicySpec[call], len(policies))
	for i, p := range policies {
		specs[i] = front.PolicySpec[call]{Name: p.Name, Rate: p.Rate, Burst: p.Burst, MaxKeys: p.MaxKeys, Limiter: p.Limiter}
		if key := p.Key; key != nil {
			specs[i].Key = func(c call) string { return key(c.ctx) }
		}
		if cost := p.Cost; cost != nil {
			specs[i].Cost = func(c call) int { return cost(c.ctx, c.method) }
		}
	}
	own, err := front.Policies(existing, it.hasAddr, it.limTime, specs)
	if err != nil {
		return fmt.Errorf("grpclimit: Method %q: %w", name, err)
	}
	r := &route{name: name, own: own}
	if isMethod {
		next.methods[name] = r
	} else {
		next.services[name] = r
	}
	next.order = append(next.order, r)
	// A method's layers: its service's, then its own. Every method is
	// rebuilt, as a service may be registered after its methods. The
	// layers are new slices: calls in progress keep the old ones.
	for _, m := range next.methods {
		m.layers = m.own
		if s := next.services[serviceOf(m.name)]; s != nil && len(s.own) > 0 {
			m.layers = append(append([]*rateLayer(nil), s.own...), m.own...)
		}
	}
	for _, s := range next.services {
		s.layers = s.own
	}
	it.routes.Store(next)
	return nil
}

// serviceOf returns the service of a full method name, without slashes.
func serviceOf(fullMethod string) string {
	s := strings.TrimPrefix(fullMethod, "/")
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[:i]
	}
	return s
}

// route returns what Method registered for a call of fullMethod: the
// method's own entry, or its service's; nil if neither is registered.
func (it *Interceptor) route(fullMethod string) *route {
	rs := it.routes.Load()
	if rs == nil {
		return nil
	}
	if r := rs.methods[fullMethod]; r != nil {
		return r
	}
	if len(rs.services) == 0 {
		return nil
	}
	return rs.services[serviceOf(fullMethod)]
}

// counters returns the counters of r's calls, or those of the calls of
// names never registered if r is nil, or nil if Method was never called.
func (it *Interceptor) counters(r *route) *front.Counters {
	if r != nil {
		return &r.n
	}
	if it.routes.Load() == nil {
		return nil
	}
	return &it.other
}

// MethodStats counts the calls of one name that Interceptor.Method
// registered, or of all the others (Method is OtherMethods), by outcome,
// with the fields of Stats: calls and stream messages refused by any
// layer, Config's or the name's own policies.
type MethodStats struct {
	// Method is the name registered: a full method name, a service, or
	// OtherMethods.
	Method string `json:"method"`
	// The counts, as in Stats.
	Exempt               uint64 `json:"exempt"`
	Allowed              uint64 `json:"allowed"`
	RateLimited          uint64 `json:"rate_limited"`
	ServerBusy           uint64 `json:"server_busy"`
	RequestTimeout       uint64 `json:"request_timeout"`
	LimiterError         uint64 `json:"limiter_error"`
	TableFull            uint64 `json:"table_full"`
	CostAboveBurst       uint64 `json:"cost_above_burst"`
	InvalidCost          uint64 `json:"invalid_cost"`
	ConcurrencyLimited   uint64 `json:"concurrency_limited"`
	ConcurrencyTableFull uint64 `json:"concurrency_table_full"`
}

// methodStats returns the counts of every name registered, in the order
// registered, then OtherMethods; nil if Method was never called.
func (it *Interceptor) methodStats() []MethodStats {
	rs := it.routes.Load()
	if rs == nil {
		return nil
	}
	out := make([]MethodStats, 0, len(rs.order)+1)
	for _, r := range rs.order {
		out = append(out, methodStatsOf(r.name, &r.n))
	}
	return append(out, methodStatsOf(OtherMethods, &it.other))
}

func methodStatsOf(name string, n *front.Counters) MethodStats {
	t := n.Load()
	return MethodStats{
		Method: name, Exempt: t.Exempt, Allowed: t.Allowed, RateLimited: t.RateLimited, ServerBusy: t.ServerBusy,
		RequestTimeout: t.RequestTimeout, LimiterError: t.LimiterError, TableFull: t.TableFull,
		CostAboveBurst: t.CostAboveBurst, InvalidCost: t.InvalidCost,
		ConcurrencyLimited: t.ConcurrencyLimited, ConcurrencyTableFull: t.ConcurrencyTableFull,
	}
}
