package front

// This file is the part of a front end's New that every front end shares:
// it checks the fields their Configs have in common and builds the layers
// they configure, so that a shared gate, a policy or a priority is one
// piece of code whatever the protocol.

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
)

// Common holds the fields that every front end's Config has, with the
// same names and meanings (see httplimit.Config, whose field docs are the
// reference), as a front end's New hands them over. Fields typed by the
// protocol (Exempt, Cost, CallerKey, Priority) stay with the front end,
// which passes them to Setup as functions of its request type.
type Common struct {
	MaxInFlight           int
	QueueWait, QueueAdapt time.Duration
	Adaptive              *adaptive.Config
	// Gate and Controller are a shared gate, and the controller that
	// moves its maximum (see CapacityConfig).
	Gate       *limits.Gate
	Controller *adaptive.Controller
	Timeout    time.Duration
	// BusyRetryAfter is checked, not used: each protocol rounds it its
	// own way.
	BusyRetryAfter time.Duration

	Rate              limits.Limit
	Burst, MaxKeys    int
	Limiter           limits.Limiter
	LimiterTimeout    time.Duration
	CallerKeyed       bool
	AddressMultiplier int
	CallerLimiter     limits.Limiter

	TrustedProxies []netip.Prefix
	// Forwarded says the forwarding header is RFC 7239's Forwarded.
	Forwarded              bool
	IPv4Prefix, IPv6Prefix int

	MaxInFlightPerClient int
	PolicyName           string
}

// Base is what Setup builds for a front end whose requests are of type R.
type Base[R any] struct {
	// Capacity is the gate, nil if none.
	Capacity *Capacity
	// Identity tells clients apart.
	Identity Identity
	// Rates are the layers of the Config's rate policies, in order.
	Rates []*Layer[R]
	// HasAddr says Rates starts with an address bucket, which a policy
	// keyed by the caller needs in front of it.
	HasAddr bool
	// Slots counts each client's requests in progress, nil if
	// MaxInFlightPerClient is 0.
	Slots *Slots
	// LimiterTimeout bounds each call of a limiter that does not decide
	// in process (see LimiterBound).
	LimiterTimeout time.Duration
}

// Setup checks c and builds its layers: the counts and durations must not
// be negative (the first one that is, in the order of Common's fields
// then of extra, is named), the prefix lengths must be in range, and the
// gate and rate fields must make sense together. key returns a request's
// caller key and cost its cost (nil: 1). The error names the Config field
// at fault; the front end prefixes its package name.
func Setup[R any](c Common, key func(R) string, cost func(R) int, extra ...Field) (*Base[R], error) {
	fields := append([]Field{
		{Name: "MaxInFlight", Value: int64(c.MaxInFlight)}, {Name: "QueueWait", Value: int64(c.QueueWait)},
		{Name: "Timeout", Value: int64(c.Timeout)}, {Name: "BusyRetryAfter", Value: int64(c.BusyRetryAfter)},
		{Name: "Burst", Value: int64(c.Burst)}, {Name: "MaxKeys", Value: int64(c.MaxKeys)},
		{Name: "LimiterTimeout", Value: int64(c.LimiterTimeout)}, {Name: "AddressMultiplier", Value: int64(c.AddressMultiplier)},
		{Name: "MaxInFlightPerClient", Value: int64(c.MaxInFlightPerClient)},
	}, extra...)
	if err := CheckNonNegative(fields...); err != nil {
		return nil, err
	}
	b := &Base[R]{LimiterTimeout: LimiterBound(c.LimiterTimeout, c.Timeout)}
	var err error
	if b.Identity, err = NewIdentity(c.TrustedProxies, c.IPv4Prefix, c.IPv6Prefix, c.Forwarded); err != nil {
		return nil, err
	}
	if b.Capacity, err = NewCapacity(CapacityConfig{
		Max: c.MaxInFlight, Wait: c.QueueWait, Adapt: c.QueueAdapt, Adaptive: c.Adaptive,
		Gate: c.Gate, Ctrl: c.Controller,
	}); err != nil {
		return nil, err
	}
	if b.Rates, err = Layers(RateConfig{
		PolicyName: c.PolicyName, Rate: c.Rate, Burst: c.Burst, MaxKeys: c.MaxKeys,
		Limiter: c.Limiter, LimiterTimeout: b.LimiterTimeout,
		CallerKeyed: c.CallerKeyed, AddressMultiplier: c.AddressMultiplier, CallerLimiter: c.CallerLimiter,
	}, key, cost); err != nil {
		return nil, err
	}
	b.HasAddr = len(b.Rates) > 0 && b.Rates[0].Kind == ByAddress
	if c.MaxInFlightPerClient > 0 {
		b.Slots = NewSlots(c.MaxInFlightPerClient, Or(c.MaxKeys, DefaultMaxKeys))
	}
	return b, nil
}

// PolicySpec is one per-route (HTTP) or per-method (gRPC) rate policy,
// with the meanings of httplimit.Policy's fields; Key and Cost are
// functions of the front end's request type.
type PolicySpec[R any] struct {
	Name           string
	Rate           limits.Limit
	Burst, MaxKeys int
	Limiter        limits.Limiter
	Key            func(R) string
	Cost           func(R) int
}

// Policies returns the layers of specs, in order, for a front end whose
// policies so far are existing, whose Config has an address bucket if
// hasAddr, and whose limiter calls are bounded by timeout. A policy needs
// a name unique among existing and specs, non-negative Burst and MaxKeys,
// a Rate or a Limiter, and, keyed by the caller, an address bucket in
// front of it, so that a caller key gets a bucket only for requests its
// address allowed. The error names the policy.
func Policies[R any](existing []*Layer[R], hasAddr bool, timeout time.Duration, specs []PolicySpec[R]) ([]*Layer[R], error) {
	names := map[string]bool{}
	for _, l := range existing {
		names[l.Name] = true
	}
	var out []*Layer[R]
	for _, p := range specs {
		switch {
		case p.Name == "":
			return nil, errors.New("a Policy needs a Name")
		case names[p.Name]:
			return nil, fmt.Errorf("policy %q: there already is a policy of that name", p.Name)
		case p.Burst < 0 || p.MaxKeys < 0:
			return nil, fmt.Errorf("policy %q: Burst and MaxKeys must not be negative", p.Name)
		case p.Key != nil && !hasAddr:
			return nil, fmt.Errorf("policy %q is keyed by the caller and needs an address bucket in front of it (Config.Rate or Config.Limiter)", p.Name)
		}
		ls, err := PolicyLayers(p.Name, p.Rate, p.Burst, p.MaxKeys, p.Limiter, timeout, p.Key, p.Cost)
		if err != nil {
			return nil, fmt.Errorf("policy %q: %w", p.Name, err)
		}
		out = append(out, ls...)
		names[p.Name] = true
	}
	return out, nil
}
