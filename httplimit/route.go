package httplimit

import (
	"context"
	"fmt"
	"net/http"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/internal/front"
)

// Policy is a rate limit of one route, which a Middleware made by With
// applies after the layers of the Middleware it was made from: a login
// route limited per address, an API limited per key, an upload that
// costs more than a read. The zero Policy is not valid: it needs a Name
// and a Rate or a Limiter.
type Policy struct {
	// Name names the policy in the RateLimit header fields, problem
	// bodies, logs and Stats; printable ASCII, required, and unique among
	// the policies of a Middleware and its routes.
	Name string
	// Rate is the policy's limit, applied by a local limiter of at most
	// MaxKeys keys (DefaultMaxKeys if 0) in bursts of Burst (Rate.Events
	// if 0).
	Rate    limits.Limit
	Burst   int
	MaxKeys int
	// Limiter, if set, decides in place of the local limiter, with a local
	// limiter of Rate, if set, asked first (see Config.Limiter).
	Limiter limits.Limiter
	// Key, if set, returns the key of the request's bucket that the caller
	// chooses, such as an API key (see HeaderKey); nil means the client
	// address. Limiters see a hash of such a key, never the key, and a
	// request without one shares one bucket per address. A policy with Key
	// needs the Middleware to have an address bucket (Config.Rate or
	// Config.Limiter) in front of it, so that a caller key gets a bucket
	// only for requests its address allowed.
	Key func(*http.Request) string
	// Cost, if set, returns the request's cost in this policy's bucket;
	// nil means 1.
	Cost func(*http.Request) int
}

// With returns a Middleware for a route: it applies m's layers, then the
// given policies, in order, all or nothing (a refusal by any gives back
// what every earlier layer charged). It shares m's gate, per-client
// counts and counters, so that one process has one gate whatever its
// routes, and ReleaseCapacity frees the request's one place.
//
// Wrap the whole server in m.Handler and each route in the Handler of the
// Middleware With returns: a request that went through m then has only the
// route's policies applied by it; one that did not (a route served without
// m around it) has all the layers applied. Call With before serving.
//
// Either way the route's policies come before per-client concurrency: a
// request over MaxInFlightPerClient that the route's policy would refuse
// is refused by the policy (rate_limited, with its RateLimit fields). For
// that, the enclosing m finds the route behind a router that says which
// handler serves a request, as http.ServeMux does (its Handler method),
// with the route's Handler registered on it; behind other routers, m
// applies per-client concurrency before the route's policies.
func (m *Middleware) With(policies ...Policy) (*Middleware, error) {
	c := m.c
	r := &Middleware{c: c, rates: append([]*rateLayer(nil), m.rates...), own: m.own}
	c.mu.Lock()
	defer c.mu.Unlock()
	specs := make([]front.PolicySpec[*http.Request], len(policies))
	for i, p := range policies {
		specs[i] = front.PolicySpec[*http.Request](p)
	}
	ls, err := front.Policies(c.policies, c.hasAddr, c.limTime, specs)
	if err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	r.rates = append(r.rates, ls...)
	r.own += len(ls)
	c.policies = append(c.policies, r.rates[len(r.rates)-r.own+m.own:]...)
	c.nested.Store(true)
	return r, nil
}

// ClientKey returns the key of r's client address, as the address bucket
// and per-client concurrency see it: "a:" and the client's address prefix,
// such as "a:192.0.2.7/32" or "a:2001:db8:1:2::/64" (the peer, or the
// address trusted proxies forwarded, or the nearest trusted hop where a
// forwarded entry is no address; "a:invalid" if the peer's own address
// cannot be parsed).
// Use it to log a client or to charge a limiter of one's own by client,
// such as one counting failed logins.
//
// The keys limiters see: "a:"+prefix for buckets by address; "c:" and 32
// hex digits of the SHA-256 of the key for buckets by a key the caller
// chooses (Config.CallerKey, Policy.Key); "n:" and the address key for
// the bucket that requests without such a key share.
func (m *Middleware) ClientKey(r *http.Request) string {
	return m.c.clientKey(r)
}

// Reset forgets key's state in every limiter of m and of its routes that
// can forget (a local GCRA; a limiter with a Reset(ctx, key) error method,
// such as the Redis one), so that the client finds its full burst again:
// to unblock an address by hand, say, with the key ClientKey gives. It
// returns the first error of a limiter that failed, after trying them all.
func (m *Middleware) Reset(ctx context.Context, key string) error {
	c := m.c
	c.mu.Lock()
	layers := append([]*rateLayer(nil), c.policies...)
	c.mu.Unlock()
	if err := front.Reset(ctx, layers, key); err != nil {
		return fmt.Errorf("httplimit: %w", err)
	}
	return nil
}
