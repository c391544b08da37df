package ratelimit

// This file turns the domains of a configuration into what a Service
// applies: a tree per domain to match descriptors against, as
// envoyproxy/ratelimit matches them, and the admit.Config whose policies
// are the tree's limits.

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
)

// rules is a configuration as a Service applies it; a request sees one
// rules from its start to its end.
type rules struct {
	domains map[string]*domain
	// policies are the nodes with a limit, by policy name.
	policies map[string]*node
	// nodes are the nodes with a limit, in the order of their policies.
	nodes []*node
	cfg   admit.Config
	text  string // what the rules are, for /rlconfig
	// overrides are the limits that requests' descriptors gave
	// (RateLimitDescriptor.limit), by overrideKey.
	overrides map[overrideKey]*node
}

// overrideKey is a limit a descriptor of a request gives in place of the
// configuration's, in a domain.
type overrideKey struct {
	domain string
	rpu    uint32
	unit   Unit
}

// maxOverrides bounds the limits requests may give: each is a policy,
// made on first use.
const maxOverrides = 64

// domain is one domain's tree.
type domain struct {
	name  string
	route string // the route of its requests, for the engine
	level
}

// level is one descriptor list: its entries by envoyproxy/ratelimit's
// composite key (key, or key_value), and its wildcard entries in order.
type level struct {
	children  map[string]*node
	wildcards []*node
}

// node is one descriptor entry.
type node struct {
	level
	key, value string
	// final is the entry's composite key, key or key_value, and prefix,
	// for a wildcard value, final without its "*".
	final, prefix string
	// path is the entry's path from the domain, envoyproxy/ratelimit's
	// stat key (domain.key_value.key), and policy the name of its policy.
	path, policy string
	limit        *RateLimit // nil for none
	shadow       bool
	share        bool // share_threshold
	onError      FailurePolicy
	// desc is the current_limit a status reports for the node.
	rpu  uint32
	unit Unit
	// burst is the policy's burst, its limit and period the GCRA's.
	burst  int
	period time.Duration
	idx    int // the index of the node in rules.nodes
	// near counts the hits near the limit, kept across loads.
	near *atomic.Uint64
	// cur is the current_limit of the node's statuses.
	cur *pb.RateLimitResponse_RateLimit
}

// compileOptions are what compile needs of the Service's options.
type compileOptions struct {
	onError      FailurePolicy
	globalShadow bool
	limiter      func(n *node) (limits.Limiter, error) // nil: decided in process
	timeout      time.Duration
	maxKeys      int
}

// compile builds the rules of domains.
func compile(domains []*Domain, overrides []overrideKey, o compileOptions) (*rules, error) {
	r := &rules{domains: map[string]*domain{}, policies: map[string]*node{}, overrides: map[overrideKey]*node{}}
	r.cfg = admit.Config{TrustedKeys: true, Headers: "ietf", LimiterTimeout: o.timeout}
	var text strings.Builder
	for _, d := range domains {
		if r.domains[d.Domain] != nil {
			return nil, fmt.Errorf("%s: domain %q is configured twice", d.File, d.Domain)
		}
		dom := &domain{name: d.Domain, route: "/" + url.PathEscape(d.Domain)}
		dom.route = strings.NewReplacer("{", "%7B", "}", "%7D").Replace(dom.route)
		r.domains[d.Domain] = dom
		onError := d.OnError
		if onError == "" {
			onError = o.onError
		}
		if err := r.level(&dom.level, dom, d.Domain, d.Descriptors, onError, o, &text); err != nil {
			return nil, fmt.Errorf("%s: %w", d.File, err)
		}
	}
	for _, k := range overrides {
		dom := r.domains[k.domain]
		if dom == nil {
			continue // a domain no longer configured
		}
		n := &node{final: "limit_override", onError: o.onError,
			limit: &RateLimit{RequestsPerUnit: k.rpu, Unit: k.unit}}
		n.path = fmt.Sprintf("%s.limit_override_%d_per_%s", k.domain, k.rpu, k.unit)
		if err := r.policy(n, dom, o); err != nil {
			return nil, fmt.Errorf("%s: %w", n.path, err)
		}
		r.overrides[k] = n
		fmt.Fprintf(&text, "%s: %d per %s, burst %d (policy %q), given by requests\n", n.path, k.rpu, k.unit, n.burst, n.policy)
	}
	r.text = text.String()
	return r, nil
}

// level builds the entries of one descriptor list under path.
func (r *rules) level(l *level, dom *domain, path string, ds []*Descriptor, onError FailurePolicy, o compileOptions, text *strings.Builder) error {
	l.children = make(map[string]*node, len(ds))
	for _, d := range ds {
		n := &node{key: d.Key, value: d.Value, final: d.Key, shadow: d.ShadowMode, share: d.ShareThreshold,
			limit: d.RateLimit, onError: d.OnError}
		if d.Value != "" {
			n.final += "_" + d.Value
		}
		n.path = path + "." + n.final
		if n.onError == "" {
			n.onError = onError
		}
		if l.children[n.final] != nil {
			return fmt.Errorf("line %d: duplicate descriptor %s", d.Line, n.path)
		}
		l.children[n.final] = n
		if strings.HasSuffix(n.final, "*") {
			n.prefix = strings.TrimSuffix(n.final, "*")
			l.wildcards = append(l.wildcards, n)
		}
		if lim := d.RateLimit; lim != nil {
			fmt.Fprintf(text, "%s: ", n.path)
			if lim.Unlimited {
				text.WriteString("unlimited")
			} else {
				if err := r.policy(n, dom, o); err != nil {
					return fmt.Errorf("line %d: %s: %w", d.Line, n.path, err)
				}
				fmt.Fprintf(text, "%d per %s, burst %d (policy %q)", lim.RequestsPerUnit, lim.Unit, n.burst, n.policy)
			}
			if n.shadow {
				text.WriteString(", shadow mode")
			}
			if lim.Name != "" {
				fmt.Fprintf(text, ", name %q", lim.Name)
			}
			if len(lim.Replaces) > 0 {
				fmt.Fprintf(text, ", replaces %q", lim.Replaces)
			}
			text.WriteString("\n")
		}
		if err := r.level(&n.level, dom, n.path, d.Descriptors, n.onError, o, text); err != nil {
			return err
		}
	}
	return nil
}

// policy makes the admit.Policy of n's limit.
func (r *rules) policy(n *node, dom *domain, o compileOptions) error {
	lim := n.limit
	n.rpu, n.unit, n.period = lim.RequestsPerUnit, lim.Unit, lim.Unit.Period()
	n.cur = &pb.RateLimitResponse_RateLimit{Name: lim.Name, RequestsPerUnit: n.rpu, Unit: unitOf(n.unit)}
	n.policy = policyName(n.path, r.policies)
	n.idx = len(r.nodes)
	r.policies[n.policy] = n
	r.nodes = append(r.nodes, n)
	p := admit.Policy{Name: n.policy, Routes: []string{dom.route}, Key: n.policy, MaxKeys: o.maxKeys}
	events, burst := int(lim.RequestsPerUnit), int(lim.Burst)
	if burst == 0 {
		burst = events
	}
	if uint64(events) > math.MaxInt32 || uint64(burst) > math.MaxInt32 {
		return fmt.Errorf("the limit is too large")
	}
	n.burst = burst
	if r.cfg.Limiters == nil {
		r.cfg.Limiters = map[string]limits.Limiter{}
	}
	switch {
	case events == 0:
		// requests_per_unit 0 refuses every request: a limiter that does,
		// behind a local limit of one a unit.
		n.burst = 0
		p.Rate, p.Burst = limits.Limit{Events: 1, Period: n.period}, 1
		r.cfg.Limiters[n.policy] = denyLimiter{n.period}
		p.Limiter = n.policy
	case o.limiter != nil:
		l, err := o.limiter(n)
		if err != nil {
			return err
		}
		r.cfg.Limiters[n.policy] = l
		p.Limiter = n.policy
		fallthrough
	default:
		p.Rate, p.Burst = limits.Limit{Events: events, Period: n.period}, burst
	}
	r.cfg.Policies = append(r.cfg.Policies, p)
	if n.shadow || o.globalShadow {
		r.cfg.Shadow = append(r.cfg.Shadow, n.policy)
	}
	return nil
}

// policyName returns the name of the policy of the entry at path: the
// path, its characters outside printable ASCII, quotes and backslashes
// as "_", and a suffix if another policy already has the name.
func policyName(path string, taken map[string]*node) string {
	b := []byte(path)
	for i, c := range b {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			b[i] = '_'
		}
	}
	name := string(b)
	if len(name) > 200 {
		h := fnv.New64a()
		h.Write([]byte(path))
		name = name[:180] + "~" + strconv.FormatUint(h.Sum64(), 16)
	}
	base := name
	for i := 2; taken[name] != nil; i++ {
		name = base + "#" + strconv.Itoa(i)
	}
	return name
}

// redisPrefix returns the prefix of the Redis keys of the policy of the
// entry at path: the same in every process reading the same
// configuration, and after a reload.
func redisPrefix(prefix, path string) string {
	h := fnv.New64a()
	h.Write([]byte(path))
	return prefix + strconv.FormatUint(h.Sum64(), 16) + ":"
}

// denyLimiter refuses every request: the limit of requests_per_unit 0.
// It decides in this process, as the engine's limiters of this process
// do.
type denyLimiter struct{ period time.Duration }

// AllowN refuses, until the unit's end at the earliest.
func (d denyLimiter) AllowN(key string, n int) limits.Decision {
	return limits.Decision{Reason: limits.ReasonRateLimited, Period: d.period, Cost: n, RetryAfter: d.period, ResetAfter: d.period, At: time.Now()}
}

// Take is AllowN.
func (d denyLimiter) Take(_ context.Context, key string, n int) (limits.Decision, error) {
	return d.AllowN(key, n), nil
}

// Refund has nothing to give back.
func (denyLimiter) Refund(context.Context, string, limits.Decision) error { return nil }
