//lint:file-ignore ST1005 errors begin with the name of the Config field they are about, as it is spelled.

package admit

// This file checks a Config and builds what an Engine applies from it:
// the gate, the client identity, the policies and the routes, keeping
// from the configuration before it what must outlive a change (the
// limiters' state, the counters).

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/internal/gcra"
	"github.com/limitsgo/limits/quota"
)

// state is a configuration as an Engine applies it; a request sees one
// state from its admission to its end.
type state struct {
	cfg       Config
	cap       *capacity
	id        identity
	timeout   time.Duration
	busyRetry time.Duration
	// global are the policies every request takes that matches no route
	// (routes add theirs after them).
	global []*policy
	// policies are every policy, in the order they apply.
	policies []*policy
	router   *router // nil without route patterns
	slots    *slots  // requests in progress per client, nil if not capped
	streams  *slots  // streams open per client, nil if not capped
	failOpen bool
	headers  headerMode
	// callerField names the field of the caller key (Config.CallerKey),
	// and tierField that of the tier.
	callerField, tierField string
	logger                 *slog.Logger
	// limits are the changes of limit to apply to what the state keeps of
	// the state before it, and kept what it keeps, by limiter (see Update).
	limits []setLimit
	kept   map[string]*kept
}

// policy is a rate policy as an Engine applies it.
type policy struct {
	name string
	// field names the field whose value keys the buckets; "" keys them by
	// client address.
	field string
	// keyless is the policy that requests without field take, by address,
	// in place of this one.
	keyless *policy
	base    *limiter
	// tiers and overrides are the limiters of tiers, by tier, and of
	// keys, by value; nil if none.
	tiers, overrides map[string]*limiter
	cost             int
	shadow           bool
}

// all returns the policy's limiters: its own, then its tiers' and its
// overrides', in order.
func (p *policy) all() []*limiter {
	out := []*limiter{p.base}
	for _, t := range sortedKeys(p.tiers) {
		out = append(out, p.tiers[t])
	}
	for _, k := range sortedKeys(p.overrides) {
		out = append(out, p.overrides[k])
	}
	return out
}

// compile checks cfg and builds its state, reusing what old, the state
// before it (nil for a new Engine), holds that cfg keeps. e.mu is held.
func (e *Engine) compile(cfg *Config, old *state) (*state, error) {
	st := &state{cfg: *cfg, logger: cfg.Logger, failOpen: cfg.FailOpen}
	if err := checkNonNegative(cfg); err != nil {
		return nil, err
	}
	var err error
	if st.headers, err = parseHeaders(cfg.Headers); err != nil {
		return nil, err
	}
	if st.id, err = newIdentity(cfg); err != nil {
		return nil, err
	}
	if st.cap, err = newCapacity(cfg, old); err != nil {
		return nil, err
	}
	st.timeout = cfg.Timeout
	st.busyRetry = cfg.BusyRetryAfter
	if st.busyRetry == 0 {
		st.busyRetry = time.Second
	}
	timeout := cfg.LimiterTimeout
	if timeout == 0 {
		timeout = defaultLimiterTimeout
		if cfg.Timeout > 0 {
			timeout = min(timeout, cfg.Timeout)
		}
	}
	b := builder{e: e, cfg: cfg, timeout: timeout, names: map[string]bool{}, kept: map[string]*kept{}}
	if err := b.configPolicies(st); err != nil {
		return nil, err
	}
	hasAddr := len(st.global) > 0 && st.global[0].field == ""
	st.router = &router{}
	for i, p := range cfg.Policies {
		pol, routes, err := b.policy(p, hasAddr, "p\x00"+p.Name)
		if err != nil {
			return nil, fmt.Errorf("Policies[%d] (%q): %w", i, p.Name, err)
		}
		st.policies = append(st.policies, pol)
		if len(routes) == 0 {
			st.global = append(st.global, pol)
			continue
		}
		for j, s := range routes {
			r, err := st.router.add(s)
			if err != nil {
				return nil, fmt.Errorf("Policies[%d] (%q).Routes[%d]: %w", i, p.Name, j, err)
			}
			if !slices.Contains(r.own, pol) {
				r.own = append(r.own, pol)
			}
		}
	}
	for i, s := range cfg.Exempt {
		r, err := st.router.add(s)
		if err != nil {
			return nil, fmt.Errorf("Exempt[%d]: %w", i, err)
		}
		r.exempt = true
	}
	if err := checkExempt(cfg, len(st.global) > 0); err != nil {
		return nil, err
	}
	if len(st.router.all) == 0 {
		st.router = nil
	} else {
		for _, r := range st.router.all {
			if r.counts = e.routes[r.pattern]; r.counts == nil {
				r.counts = new(counts)
				e.routes[r.pattern] = r.counts
			}
		}
	}
	if err := st.shadow(cfg.Shadow); err != nil {
		return nil, err
	}
	st.tierField = cfg.Tier
	st.limits = b.limits
	st.kept = b.kept
	maxKeys := or(cfg.MaxKeys, maxKeysDefault)
	if cfg.MaxInFlightPerClient > 0 {
		st.slots = reuseSlots(oldSlots(old, false), cfg.MaxInFlightPerClient, maxKeys)
	}
	if cfg.MaxStreamsPerClient > 0 {
		st.streams = reuseSlots(oldSlots(old, true), cfg.MaxStreamsPerClient, maxKeys)
	}
	return st, nil
}

// shadow sets the policies named in names, and the gate if "gate" is
// one of them, to only measure, or returns an error naming one that is
// neither.
func (st *state) shadow(names []string) error {
	for i, name := range names {
		found := false
		if name == "gate" && st.cap != nil {
			c := *st.cap
			c.shadow = true
			st.cap, found = &c, true
		}
		for _, p := range st.policies {
			if p.name == name {
				p.shadow, found = true, true
			}
			if p.keyless != nil && p.keyless != p && p.keyless.name == name {
				p.keyless.shadow, found = true, true
			}
		}
		if !found {
			return fmt.Errorf("Shadow[%d]: %q names no policy (nor the gate, if there is one)", i, name)
		}
	}
	return nil
}

// oldSlots returns old's table of requests (or of streams) per client.
func oldSlots(old *state, streams bool) *slots {
	switch {
	case old == nil:
		return nil
	case streams:
		return old.streams
	}
	return old.slots
}

// reuseSlots returns s with new caps, or a new table if s is nil: the
// requests in progress keep their counts.
func reuseSlots(s *slots, max, maxKeys int) *slots {
	if s == nil {
		return newSlots(max, maxKeys)
	}
	s.set(max, maxKeys)
	return s
}

// checkNonNegative returns an error naming the first count or duration of
// cfg that is negative.
func checkNonNegative(cfg *Config) error {
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MaxInFlight", int64(cfg.MaxInFlight)}, {"QueueWait", int64(cfg.QueueWait)},
		{"QueueAdapt", int64(cfg.QueueAdapt)}, {"Timeout", int64(cfg.Timeout)},
		{"BusyRetryAfter", int64(cfg.BusyRetryAfter)}, {"Burst", int64(cfg.Burst)},
		{"MaxKeys", int64(cfg.MaxKeys)}, {"LimiterTimeout", int64(cfg.LimiterTimeout)},
		{"AddressMultiplier", int64(cfg.AddressMultiplier)},
		{"MaxInFlightPerClient", int64(cfg.MaxInFlightPerClient)},
		{"MaxStreamsPerClient", int64(cfg.MaxStreamsPerClient)},
	} {
		if f.v < 0 {
			return fmt.Errorf("%s must not be negative, got %d", f.name, f.v)
		}
	}
	return nil
}

// newIdentity returns the identity cfg configures.
func newIdentity(cfg *Config) (identity, error) {
	id := identity{v4: or(cfg.IPv4Prefix, 32), v6: or(cfg.IPv6Prefix, 64)}
	if id.v4 > 32 || id.v4 < 0 || id.v6 > 128 || id.v6 < 0 {
		return identity{}, fmt.Errorf("IPv4Prefix and IPv6Prefix must be within 0-32 and 0-128, got %d and %d", cfg.IPv4Prefix, cfg.IPv6Prefix)
	}
	switch strings.ToLower(cfg.ForwardedHeader) {
	case "", "x-forwarded-for":
		id.header = "X-Forwarded-For"
	case "forwarded":
		id.header, id.rfc7239 = "Forwarded", true
	case "x-real-ip":
		id.header = "X-Real-Ip"
	default:
		return identity{}, fmt.Errorf("ForwardedHeader must be X-Forwarded-For, Forwarded or X-Real-IP, got %q", cfg.ForwardedHeader)
	}
	id.proxies = make([]netip.Prefix, len(cfg.TrustedProxies))
	for i, p := range cfg.TrustedProxies {
		if !p.IsValid() {
			return identity{}, fmt.Errorf("TrustedProxies[%d] is not a valid prefix", i)
		}
		id.proxies[i] = p.Masked()
	}
	return id, nil
}

// newCapacity returns the gate cfg configures, nil for none: the gate of
// old, the state it replaces, if old has one of its own and cfg keeps one,
// with its size, reserves and waits changed.
func newCapacity(cfg *Config, old *state) (*capacity, error) {
	if cfg.Gate != nil || cfg.Controller != nil {
		return sharedCapacity(cfg)
	}
	if cfg.MaxInFlight <= 0 {
		switch {
		case cfg.Adaptive != nil:
			return nil, errors.New("Adaptive needs MaxInFlight, the most it may admit at once")
		case cfg.QueueAdapt > 0:
			return nil, errors.New("QueueAdapt needs MaxInFlight, a gate whose queue to adapt")
		case len(cfg.Reserve) > 0:
			return nil, errors.New("Reserve needs MaxInFlight, a gate whose places to keep")
		}
		return nil, nil
	}
	if cfg.QueueAdapt > 0 && cfg.QueueWait <= 0 {
		return nil, errors.New("QueueAdapt needs QueueWait: a gate that lets nobody wait has no queue to adapt")
	}
	var opts []limits.Option
	for _, p := range []limits.Priority{limits.PriorityDefault, limits.PriorityCritical} {
		if n, ok := cfg.Reserve[p]; ok {
			opts = append(opts, limits.WithReserve(p, n))
		}
	}
	for p := range cfg.Reserve {
		if p != limits.PriorityDefault && p != limits.PriorityCritical {
			return nil, fmt.Errorf("Reserve: places may be kept for %v and %v, not %v", limits.PriorityDefault, limits.PriorityCritical, p)
		}
	}
	if old != nil && old.cap != nil && !old.cap.shared {
		// The gate serving now: changed in place, as the update lands.
		o := old.cap
		switch {
		case !reflect.DeepEqual(cfg.Adaptive, o.adaptive):
			return nil, errors.New("Adaptive cannot change while serving")
		case cfg.Adaptive != nil && cfg.MaxInFlight != o.max:
			return nil, errors.New("MaxInFlight, the ceiling of an adaptive gate, cannot change while serving")
		}
		if _, err := limits.NewGate(cfg.MaxInFlight, opts...); err != nil {
			return nil, fmt.Errorf("MaxInFlight and Reserve: %w", err)
		}
		c := &capacity{gate: o.gate, ctrl: o.ctrl, wait: cfg.QueueWait, max: cfg.MaxInFlight, reserve: cfg.Reserve,
			adapt: cfg.QueueAdapt, adaptive: o.adaptive}
		c.apply = func() {
			if cfg.MaxInFlight != o.max || !maps.Equal(cfg.Reserve, o.reserve) {
				// An adaptive gate keeps the limit its controller set.
				o.gate.SetSize(cfg.MaxInFlight, opts...)
			}
			if cfg.QueueAdapt != o.adapt {
				o.gate.AdaptWait(cfg.QueueAdapt)
			}
		}
		return c, nil
	}
	g, err := limits.NewGate(cfg.MaxInFlight, opts...)
	if err != nil {
		return nil, fmt.Errorf("MaxInFlight and Reserve: %w", err)
	}
	c := &capacity{gate: g, wait: cfg.QueueWait, max: cfg.MaxInFlight, reserve: cfg.Reserve, adapt: cfg.QueueAdapt}
	if cfg.QueueAdapt > 0 {
		g.AdaptWait(cfg.QueueAdapt)
	}
	if cfg.Adaptive != nil {
		ac := *cfg.Adaptive
		c.adaptive = cfg.Adaptive
		switch {
		case ac.Max == 0:
			ac.Max = cfg.MaxInFlight
		case ac.Max > cfg.MaxInFlight:
			return nil, fmt.Errorf("Adaptive.Max (%d) must not exceed MaxInFlight (%d)", ac.Max, cfg.MaxInFlight)
		}
		if c.ctrl, err = adaptive.New(g, ac); err != nil {
			return nil, fmt.Errorf("Adaptive (with MaxInFlight %d as its Max unless set): %w", cfg.MaxInFlight, err)
		}
	}
	return c, nil
}

// sharedCapacity returns the capacity of a shared gate.
func sharedCapacity(cfg *Config) (*capacity, error) {
	g := cfg.Gate
	switch {
	case g == nil:
		g = cfg.Controller.Gate()
	case cfg.Controller != nil && cfg.Controller.Gate() != g:
		return nil, errors.New("Controller moves another gate than Gate: set one of them, or the Gate the Controller was made for")
	}
	switch {
	case cfg.MaxInFlight != 0:
		return nil, errors.New("MaxInFlight makes a gate of the engine's own: leave it 0 with a shared Gate, which has the size it was made with")
	case cfg.Adaptive != nil:
		return nil, errors.New("Adaptive makes a controller of the engine's own: with a shared Gate, set Controller to the gate's controller")
	case cfg.QueueAdapt > 0:
		return nil, errors.New("QueueAdapt configures a gate of the engine's own: call AdaptWait on the shared Gate")
	case len(cfg.Reserve) > 0:
		return nil, errors.New("Reserve configures a gate of the engine's own: give the shared Gate its reserves (limits.WithReserve)")
	}
	return &capacity{gate: g, ctrl: cfg.Controller, wait: cfg.QueueWait, shared: true}, nil
}

// builder builds the policies of one configuration.
type builder struct {
	e       *Engine
	cfg     *Config
	timeout time.Duration
	names   map[string]bool // the policies' names so far
	// kept are what the new configuration keeps of the engine's, by
	// limiter, and limits the changes of limit to apply to kept GCRAs and
	// to the limiters of Limiters that take one (see Update).
	kept   map[string]*kept
	limits []setLimit
}

// setLimit is a change of limit to apply to a limiter an update keeps.
type setLimit struct {
	l interface {
		SetLimit(int, time.Duration, int) error
	}
	events, burst int
	period        time.Duration
	policy, what  string
}

// configPolicies builds the policies of Config's own fields: the client
// address's bucket, if Rate or Limiter is set; then, with CallerKey, the
// caller key's bucket and the keyless one.
func (b *builder) configPolicies(st *state) error {
	cfg := b.cfg
	name := cfg.PolicyName
	if name == "" {
		name = defaultPolicy
	}
	if _, ok := sfString(name); !ok {
		return fmt.Errorf("PolicyName %q must be printable ASCII", cfg.PolicyName)
	}
	hasRate := cfg.Rate != limits.Limit{}
	if hasRate {
		if err := cfg.Rate.Validate(); err != nil {
			return fmt.Errorf("Rate: %w", err)
		}
	}
	scale, addrName := 1, name
	if cfg.CallerKey != "" {
		scale, addrName = or(cfg.AddressMultiplier, 4), addressPolicy
	}
	if (len(cfg.Tiers) > 0 || len(cfg.Overrides) > 0) && cfg.CallerKey == "" {
		return errors.New("Tiers and Overrides need CallerKey: they are the caller keys' limits")
	}
	if cfg.Limiter != "" || hasRate {
		lim, err := b.limiter("a\x00", addrName, "", cfg.Rate, cfg.Burst, cfg.MaxKeys, cfg.Limiter, scale)
		if err != nil {
			return fmt.Errorf("Rate and Limiter: %w", err)
		}
		b.names[addrName] = true
		p := &policy{name: addrName, base: lim}
		for _, tier := range sortedKeys(cfg.Tiers) {
			t := cfg.Tiers[tier]
			if err := t.onlyLimit(); err != nil || t.Quota != "" {
				if err == nil {
					err = errors.New("a caller key's tier has a Rate, not a Quota")
				}
				return fmt.Errorf("Tiers[%q]: %w", tier, err)
			}
			if t.Rate == (limits.Limit{}) {
				continue // a tier decided elsewhere alone: the address keeps Rate
			}
			// The address bucket of a tier: AddressMultiplier times the
			// tier's limit, without its Limiter, which is the key's.
			l, err := b.limiter("a\x00t\x00"+tier, addrName, tier, t.Rate, t.Burst, t.MaxKeys, "", scale)
			if err != nil {
				return fmt.Errorf("Tiers[%q]: %w", tier, err)
			}
			if p.tiers == nil {
				p.tiers = map[string]*limiter{}
			}
			p.tiers[tier] = l
		}
		st.global = append(st.global, p)
	}
	if cfg.CallerKey != "" {
		st.callerField = cfg.CallerKey
		if cfg.CallerLimiter == "" && !hasRate {
			return errors.New("CallerKey needs Rate or CallerLimiter")
		}
		caller := Policy{Name: name, Rate: cfg.Rate, Burst: cfg.Burst, MaxKeys: cfg.MaxKeys, Limiter: cfg.CallerLimiter,
			Key: cfg.CallerKey, Tiers: cfg.Tiers, Overrides: cfg.Overrides}
		p, _, err := b.policy(caller, true, "c\x00")
		if err != nil {
			if len(cfg.Tiers) > 0 || len(cfg.Overrides) > 0 {
				return fmt.Errorf("Rate, CallerLimiter, Tiers and Overrides: %w", err)
			}
			return fmt.Errorf("Rate and CallerLimiter: %w", err)
		}
		b.names[keylessPolicy] = true
		p.keyless = &policy{name: keylessPolicy, base: b.shared("n\x00", p.base, keylessPolicy)}
		st.global = append(st.global, p)
	}
	st.policies = append(st.policies, st.global...)
	return nil
}

// policy builds the policy of p, reporting its routes; hasAddr says
// Config has an address bucket, which a policy keyed by a field needs in
// front of it. The engine keeps its limiters' state as id: a policy's by
// its name, Config's own whatever their names.
func (b *builder) policy(p Policy, hasAddr bool, id string) (*policy, []string, error) {
	switch {
	case p.Name == "":
		return nil, nil, errors.New("a Policy needs a Name")
	case b.names[p.Name]:
		return nil, nil, errors.New("there already is a policy of that name")
	case p.Cost < 0:
		return nil, nil, errors.New("Cost must not be negative")
	case p.Key != "" && !hasAddr && !b.cfg.TrustedKeys:
		return nil, nil, errors.New("a policy with a Key needs an address bucket in front of it (Config.Rate or Config.Limiter), or TrustedKeys")
	}
	if _, ok := sfString(p.Name); !ok {
		return nil, nil, fmt.Errorf("the name %q must be printable ASCII", p.Name)
	}
	lim, err := b.limit(id, p.Name, "", &p)
	if err != nil {
		return nil, nil, err
	}
	if err := costFits(p.Cost, &p); err != nil {
		return nil, nil, err
	}
	b.names[p.Name] = true
	pol := &policy{name: p.Name, field: p.Key, base: lim, cost: p.Cost}
	if p.Key != "" && !b.cfg.TrustedKeys {
		// Requests without the key share one bucket per address, in the
		// policy's own table and counts.
		pol.keyless = pol
	}
	for _, tier := range sortedKeys(p.Tiers) {
		t := p.Tiers[tier]
		if err := t.onlyLimit(); err != nil {
			return nil, nil, fmt.Errorf("Tiers[%q]: %w", tier, err)
		}
		name := p.Name + "/" + tier
		if _, ok := sfString(name); !ok || tier == "" {
			return nil, nil, fmt.Errorf("Tiers[%q]: a tier's name must be printable ASCII, not empty", tier)
		}
		l, err := b.limit(id+"\x00t\x00"+tier, name, tier, &t)
		if err == nil {
			err = costFits(p.Cost, &t)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("Tiers[%q]: %w", tier, err)
		}
		if pol.tiers == nil {
			pol.tiers = map[string]*limiter{}
		}
		pol.tiers[tier] = l
	}
	for _, key := range sortedKeys(p.Overrides) {
		o := p.Overrides[key]
		if err := o.onlyLimit(); err != nil {
			return nil, nil, fmt.Errorf("Overrides[%q]: %w", key, err)
		}
		if key == "" {
			return nil, nil, errors.New(`Overrides[""]: a request without a key has none to override`)
		}
		if p.Key == "" {
			// By address: the key is the client's prefix, as the engine
			// keys the client.
			k, err := addressKey(key, or(b.cfg.IPv4Prefix, 32), or(b.cfg.IPv6Prefix, 64))
			if err != nil {
				return nil, nil, fmt.Errorf("Overrides[%q]: %w", key, err)
			}
			if _, dup := pol.overrides[k]; dup {
				return nil, nil, fmt.Errorf("Overrides[%q]: another override names the prefix %s", key, k)
			}
			key = k
		}
		l, err := b.limit(id+"\x00o\x00"+key, p.Name, "", &o)
		if err == nil {
			err = costFits(p.Cost, &o)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("Overrides[%q]: %w", key, err)
		}
		l.keys = false // a table of its own, for one key: not reported
		if pol.overrides == nil {
			pol.overrides = map[string]*limiter{}
		}
		pol.overrides[key] = l
	}
	return pol, p.Routes, nil
}

// checkExempt returns an error if cfg's exemptions leave a limit nothing
// to limit: every request, while a limit applies to every route (global),
// or every route of a policy.
func checkExempt(cfg *Config, global bool) error {
	if len(cfg.Exempt) == 0 {
		return nil
	}
	var ex router
	for _, s := range cfg.Exempt {
		ex.add(s) // checked
	}
	if global && exempts(&ex, "/") {
		return errors.New("Exempt exempts every request: no limit would apply")
	}
	for i, p := range cfg.Policies {
		if len(p.Routes) > 0 && !slices.ContainsFunc(p.Routes, func(r string) bool { return !exempts(&ex, r) }) {
			return fmt.Errorf("Policies[%d] (%q): Exempt exempts every route of the policy", i, p.Name)
		}
	}
	return nil
}

// exempts reports whether ex, a router of exemptions, exempts every request
// the route pattern s matches: whether it matches the pattern's path
// itself, wildcards and all, and, for a pattern of a subtree, the paths
// below it.
func exempts(ex *router, s string) bool {
	method, path, p, err := parsePattern(s)
	if err != nil {
		return false
	}
	paths := []string{path}
	if p.rest {
		base := path[:strings.LastIndexByte(path, '/')+1]
		paths = append(paths, base, base+"{a}/{b}")
	}
	for _, path := range paths {
		var buf [maxMatch]*route
		if len(ex.match(method, path, &buf)) == 0 {
			return false
		}
	}
	return true
}

// addressKey returns the prefix s names, as the engine keys a client by
// address (its IPv4 or IPv6 prefix of v4 or v6 bits: "192.0.2.7/32"), or
// an error if s is neither an address nor a prefix of those bits.
func addressKey(s string, v4, v6 int) (string, error) {
	var pfx netip.Prefix
	if a, err := netip.ParseAddr(s); err == nil {
		a = a.Unmap()
		bits := v6
		if a.Is4() {
			bits = v4
		}
		pfx, _ = a.WithZone("").Prefix(bits)
	} else if pfx, err = netip.ParsePrefix(s); err != nil {
		return "", errors.New("a client's address or prefix, such as 192.0.2.7 or 2001:db8::/64, overrides a policy by address")
	} else if a := pfx.Addr(); a.Is4() && pfx.Bits() != v4 || !a.Is4() && pfx.Bits() != v6 {
		return "", fmt.Errorf("clients are told apart by /%d (IPv4) and /%d (IPv6) prefixes (IPv4Prefix, IPv6Prefix): an override names one", v4, v6)
	}
	return pfx.Masked().String(), nil
}

// costFits returns an error if cost, a policy's fixed Cost, is above the
// burst of p's limit, if known: every request would be refused.
func costFits(cost int, p *Policy) error {
	burst := p.Burst
	if burst == 0 {
		burst = p.Rate.Events
	}
	if p.Quota != "" {
		burst, _, _ = parseQuota(p.Quota)
	}
	if cost > 0 && burst > 0 && cost > burst {
		return fmt.Errorf("Cost %d is above the burst, %d: every request would be refused (cost_above_burst)", cost, burst)
	}
	return nil
}

// onlyLimit returns an error if p, a tier or an override, sets more than a
// limit.
func (p *Policy) onlyLimit() error {
	if p.Name != "" || len(p.Routes) > 0 || p.Key != "" || p.Cost != 0 || len(p.Tiers) > 0 || len(p.Overrides) > 0 {
		return errors.New("a tier or an override sets a limit only: Rate, Burst, MaxKeys, Limiter, Quota or Location")
	}
	return nil
}

// limit builds the limiter of p's limit (Rate, Burst, MaxKeys, Limiter,
// Quota, Location), kept as id, named name in the rate limit fields.
func (b *builder) limit(id, name, tier string, p *Policy) (*limiter, error) {
	switch {
	case p.Burst < 0 || p.MaxKeys < 0:
		return nil, errors.New("Burst and MaxKeys must not be negative")
	case p.Quota != "" && p.Rate != (limits.Limit{}):
		return nil, errors.New("a policy has a Rate or a Quota, not both")
	case p.Quota == "" && p.Location != "":
		return nil, errors.New("Location needs a Quota")
	case p.Rate == (limits.Limit{}) && p.Limiter == "" && p.Quota == "":
		return nil, errors.New("needs Rate, Quota or Limiter")
	}
	if p.Rate != (limits.Limit{}) {
		if err := p.Rate.Validate(); err != nil {
			return nil, fmt.Errorf("Rate: %w", err)
		}
	}
	if p.Quota != "" {
		return b.quota(id, name, tier, p)
	}
	return b.limiter(id, name, tier, p.Rate, p.Burst, p.MaxKeys, p.Limiter, 1)
}

// quota builds the limiter of p's Quota, kept as id: a quota.Quota of this
// process, alone, or in front of p's Limiter. What the engine kept as id,
// it keeps, with its counts, if the period and the time zone are the same
// (its limit changed, if it changed).
func (b *builder) quota(id, name, tier string, p *Policy) (*limiter, error) {
	events, per, err := parseQuota(p.Quota)
	if err != nil {
		return nil, fmt.Errorf("Quota: %w", err)
	}
	loc, err := time.LoadLocation(p.Location)
	if err != nil {
		return nil, fmt.Errorf("Location: %w", err)
	}
	if p.Burst != 0 {
		return nil, errors.New("a Quota has no Burst: its limit is the whole period's")
	}
	lim := &limiter{name: name, tier: tier, timeout: b.timeout, keys: true}
	lim.item, _ = sfString(name)
	if p.Limiter != "" {
		if lim.remote = b.cfg.Limiters[p.Limiter]; lim.remote == nil {
			return nil, fmt.Errorf("no limiter named %q in Limiters", p.Limiter)
		}
	}
	k := b.e.kept[id]
	if k == nil || k.quota == nil || k.per != per || k.loc != loc.String() {
		k = &kept{per: per, loc: loc.String()}
		if k.quota, err = quota.New(quota.Config{Limit: events, Per: per, Location: loc, MaxKeys: p.MaxKeys}); err != nil {
			return nil, err
		}
	} else if k.quota.MaxKeys() != or(p.MaxKeys, maxKeysDefault) {
		return nil, fmt.Errorf("MaxKeys of policy %q: %d while serving %d: a table's size cannot change while it serves (give the policy another name for a new table)", name, p.MaxKeys, k.quota.MaxKeys())
	} else if k.quota.Limit() != events {
		b.limits = append(b.limits, setLimit{quotaSetter{k.quota}, events, 0, 0, name, "its quota"})
	}
	if l, ok := lim.remote.(interface {
		Per() quota.Calendar
		Location() *time.Location
	}); ok && (l.Per() != per || l.Location().String() != loc.String()) {
		return nil, fmt.Errorf("Quota %q in %v: its Limiter %q counts per %v in %v", p.Quota, loc, p.Limiter, l.Per(), l.Location())
	}
	if l, ok := lim.remote.(limitSetter); ok && l.Limit() != events && b.e.kept[id] != nil {
		// A shared quota follows the policy's, as the one of this
		// process in front of it does.
		b.limits = append(b.limits, setLimit{quotaSetter{l}, events, 0, 0, name, "its Limiter " + strconv.Quote(p.Limiter)})
	}
	lim.counter = k.quota
	lim.kept = k
	b.kept[id] = k
	return lim, nil
}

// limitSetter is a quota whose limit changes while it serves.
type limitSetter interface {
	SetLimit(int) error
	Limit() int
}

// quotaSetter sets a quota's limit as setLimit does a GCRA's.
type quotaSetter struct{ q limitSetter }

func (s quotaSetter) SetLimit(events int, _ time.Duration, _ int) error { return s.q.SetLimit(events) }

// parseQuota parses a Quota: events, a slash and a calendar unit, day,
// week or month.
func parseQuota(s string) (int, quota.Calendar, error) {
	events, unit, ok := strings.Cut(s, "/")
	n, err := strconv.Atoi(strings.TrimSpace(events))
	if !ok || err != nil || n < 1 {
		return 0, 0, fmt.Errorf("%q: want events per day, week or month, such as 100/day", s)
	}
	switch strings.ToLower(strings.TrimSpace(unit)) {
	case "day", "d":
		return n, quota.Day, nil
	case "week", "w":
		return n, quota.Week, nil
	case "month", "mo":
		return n, quota.Month, nil
	}
	return 0, 0, fmt.Errorf("%q: the period must be day, week or month", s)
}

// limiter builds the limiter kept as id, named name: remote, the limiter of
// Config.Limiters named so, in front of which a local GCRA of rate (scaled
// by scale) is asked first if rate is set; or, if remote is "", that local
// GCRA alone. What the engine kept as id, it keeps: the local GCRA, with
// its keys' state (its limit changed, as the update applies, if the rate
// changed), and the counts.
func (b *builder) limiter(id, name, tier string, rate limits.Limit, burst, maxKeys int, remote string, scale int) (*limiter, error) {
	lim := &limiter{name: name, tier: tier, timeout: b.timeout, keys: true}
	lim.item, _ = sfString(name)
	if remote != "" {
		if lim.remote = b.cfg.Limiters[remote]; lim.remote == nil {
			return nil, fmt.Errorf("no limiter named %q in Limiters", remote)
		}
		if g, ok := lim.remote.(*limits.GCRA); ok && rate == (limits.Limit{}) {
			lim.local, lim.remote = g, nil // decides in process, alone
		}
	}
	k := b.e.kept[id]
	if k == nil {
		k = &kept{}
	}
	if rate != (limits.Limit{}) {
		burst = or(burst, rate.Events)
		if rate.Events > math.MaxInt/scale || burst > math.MaxInt/scale {
			return nil, fmt.Errorf("%v times %d overflows", rate, scale)
		}
		events, burst := rate.Events*scale, burst*scale
		if _, err := gcra.New(events, rate.Period, burst); err != nil {
			return nil, err
		}
		maxKeys = or(maxKeys, maxKeysDefault)
		if maxKeys > 1<<28 {
			return nil, fmt.Errorf("MaxKeys must be at most %d, got %d", 1<<28, maxKeys)
		}
		switch g := k.gcra; {
		case g == nil:
			k.gcra = limits.NewGCRA(events, rate.Period, limits.WithBurst(burst), limits.WithMaxKeys(maxKeys))
		case g.MaxKeys() != maxKeys:
			return nil, fmt.Errorf("MaxKeys of policy %q: %d while serving %d: a table's size cannot change while it serves (give the policy another name for a new table)", name, maxKeys, g.MaxKeys())
		case g.Limit() != events || g.Period() != rate.Period || g.Burst() != burst:
			b.limits = append(b.limits, setLimit{g, events, burst, rate.Period, name, "its local limiter"})
		}
		lim.local = k.gcra
		if l, ok := lim.remote.(interface {
			SetLimit(int, time.Duration, int) error
			Limit() int
			Period() time.Duration
			Burst() int
		}); ok && (l.Limit() != events || l.Period() != rate.Period || l.Burst() != burst) && b.e.kept[id] != nil {
			// A shared limiter that takes a limit follows the policy's
			// Rate, as the local one in front of it does.
			b.limits = append(b.limits, setLimit{l, events, burst, rate.Period, name, "its Limiter " + strconv.Quote(remote)})
		}
	} else if k.gcra != nil && lim.local != k.gcra {
		k = &kept{} // no local limiter any more: counts start afresh
	}
	lim.kept = k
	b.kept[id] = k
	return lim, nil
}

// shared returns a limiter deciding with lim's limiters, named name, with
// counts of its own, kept as id+name.
func (b *builder) shared(id string, lim *limiter, name string) *limiter {
	l := &limiter{name: name, local: lim.local, remote: lim.remote, timeout: lim.timeout}
	l.item, _ = sfString(name)
	id += name
	if l.kept = b.e.kept[id]; l.kept == nil {
		l.kept = &kept{}
	}
	b.kept[id] = l.kept
	return l
}

// sortedKeys returns m's keys in order, so that errors name the first in
// a stable order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// or returns v, or def if v is 0.
func or(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}
