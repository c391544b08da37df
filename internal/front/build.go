package front

// This file builds, from the fields every front end's Config shares, what
// front ends apply: the client identity and the rate layers, with errors
// that name the field at fault (the front end prefixes its package name).

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"time"

	"github.com/limitsgo/limits"
)

// Defaults shared by the front ends' configurations.
const (
	// DefaultMaxKeys is the number of clients a local limiter, and a
	// per-client concurrency table, track at most unless configured
	// otherwise.
	DefaultMaxKeys = 1 << 20
	// DefaultAddressMultiplier scales the address bucket when a caller key
	// is configured and no multiplier is given.
	DefaultAddressMultiplier = 4
	// KeylessPolicy names the bucket that requests without a caller key
	// share per client address when a caller key is configured.
	KeylessPolicy = "keyless"
	// DefaultPolicy names the client's policy when none is configured.
	DefaultPolicy = "default"
	// AddressPolicy names the address bucket when a caller key is
	// configured.
	AddressPolicy = "address"
)

// Field is a configuration field's name and value, for CheckNonNegative.
type Field struct {
	Name  string
	Value int64
}

// CheckNonNegative returns an error naming the first of fields whose value
// is negative, or nil.
func CheckNonNegative(fields ...Field) error {
	for _, f := range fields {
		if f.Value < 0 {
			return fmt.Errorf("%s must not be negative, got %d", f.Name, f.Value)
		}
	}
	return nil
}

// NewIdentity returns the Identity of the configured trusted proxies
// (masked, copied) and prefix lengths (0 means 32 for IPv4 and 64 for
// IPv6), or an error if a length is out of range.
func NewIdentity(proxies []netip.Prefix, ipv4, ipv6 int, forwarded bool) (Identity, error) {
	id := Identity{IPv4Bits: Or(ipv4, 32), IPv6Bits: Or(ipv6, 64), Forwarded: forwarded}
	if id.IPv4Bits > 32 || id.IPv4Bits < 0 || id.IPv6Bits > 128 || id.IPv6Bits < 0 {
		return Identity{}, fmt.Errorf("prefix lengths must be within 0-32 (IPv4) and 0-128 (IPv6), got %d and %d", ipv4, ipv6)
	}
	id.Proxies = make([]netip.Prefix, len(proxies))
	for i, p := range proxies {
		id.Proxies[i] = p.Masked()
	}
	return id, nil
}

// LimiterBound returns the bound on each limiter call: configured, or if
// 0, DefaultLimiterTimeout, or the request timeout if that is shorter.
func LimiterBound(configured, timeout time.Duration) time.Duration {
	if configured != 0 {
		return configured
	}
	if timeout > 0 {
		return min(DefaultLimiterTimeout, timeout)
	}
	return DefaultLimiterTimeout
}

// Or returns v, or def if v is 0.
func Or(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// RateConfig is the rate part of a front end's configuration, with the
// meanings the front ends' Config fields of the same names give it.
type RateConfig struct {
	// PolicyName names the client's policy; "" means DefaultPolicy.
	PolicyName string
	// Rate and Burst are each client's limit, MaxKeys the cap on each
	// local limiter's table (DefaultMaxKeys if 0).
	Rate           limits.Limit
	Burst, MaxKeys int
	// Limiter, if set, decides for the address bucket, behind a local
	// limiter of Rate if Rate is set.
	Limiter limits.Limiter
	// LimiterTimeout bounds each call of a limiter that does not decide in
	// process (see LimiterBound).
	LimiterTimeout time.Duration
	// CallerKeyed says a caller key is configured; AddressMultiplier
	// (DefaultAddressMultiplier if 0) then scales the address bucket, and
	// CallerLimiter, if set, decides for caller keys.
	CallerKeyed       bool
	AddressMultiplier int
	CallerLimiter     limits.Limiter
}

// Layers returns the rate layers rc configures for requests of type R, in
// the order they apply: the client address's bucket, if Rate or Limiter is
// set; then, if a caller key is configured, the caller key's bucket (key
// returns a request's caller key) and the keyless bucket that requests
// without one take instead. cost returns a request's cost; nil means 1.
// The error names the field at fault.
func Layers[R any](rc RateConfig, key func(R) string, cost func(R) int) ([]*Layer[R], error) {
	policy := rc.PolicyName
	if policy == "" {
		policy = DefaultPolicy
	}
	if _, ok := SFString(policy); !ok {
		return nil, fmt.Errorf("PolicyName %q must be printable ASCII", rc.PolicyName)
	}
	hasRate := rc.Rate != limits.Limit{}
	if hasRate {
		if err := rc.Rate.Validate(); err != nil {
			return nil, fmt.Errorf("Rate: %w", err)
		}
	}
	var out []*Layer[R]
	scale, addrPolicy := 1, policy
	if rc.CallerKeyed {
		scale, addrPolicy = Or(rc.AddressMultiplier, DefaultAddressMultiplier), AddressPolicy
	}
	if rc.Limiter != nil || hasRate {
		r, err := rc.rate(addrPolicy, rc.Limiter, scale)
		if err != nil {
			return nil, fmt.Errorf("Rate: %w", err)
		}
		out = append(out, &Layer[R]{Rate: r, Kind: ByAddress, Cost: cost})
	}
	if rc.CallerKeyed {
		if rc.CallerLimiter == nil && !hasRate {
			return nil, errors.New("CallerKey needs Rate or CallerLimiter")
		}
		r, err := rc.rate(policy, rc.CallerLimiter, 1)
		if err != nil {
			return nil, fmt.Errorf("Rate: %w", err)
		}
		out = append(out,
			&Layer[R]{Rate: r, Kind: ByCaller, Key: key, Cost: cost},
			&Layer[R]{Rate: r.Named(KeylessPolicy), Kind: Keyless, Cost: cost})
	}
	return out, nil
}

// PolicyLayers returns the layers of one policy named name, as a route
// adds it: a local GCRA of rate (at most maxKeys keys, DefaultMaxKeys if
// 0) in bursts of burst (rate.Events if 0), or limiter l behind such a
// local GCRA if rate is set; keyed by the client address if key is nil,
// otherwise by the caller's key, with the keyless layer after it. cost
// returns a request's cost; nil means 1.
func PolicyLayers[R any](name string, rate limits.Limit, burst, maxKeys int, l limits.Limiter, timeout time.Duration,
	key func(R) string, cost func(R) int) ([]*Layer[R], error) {
	if _, ok := SFString(name); !ok {
		return nil, fmt.Errorf("policy name %q must be printable ASCII", name)
	}
	if rate != (limits.Limit{}) {
		if err := rate.Validate(); err != nil {
			return nil, err
		}
	} else if l == nil {
		return nil, errors.New("needs Rate or Limiter")
	}
	rc := RateConfig{Rate: rate, Burst: burst, MaxKeys: maxKeys, LimiterTimeout: timeout}
	r, err := rc.rate(name, l, 1)
	if err != nil {
		return nil, err
	}
	if key == nil {
		return []*Layer[R]{{Rate: r, Kind: ByAddress, Cost: cost}}, nil
	}
	return []*Layer[R]{
		{Rate: r, Kind: ByCaller, Key: key, Cost: cost},
		{Rate: r.Named(name), Kind: Keyless, Cost: cost},
	}, nil
}

// rate builds a rate policy named name: limiter l, in front of which a
// local GCRA of rc's Rate and Burst is asked first if Rate is set, or, if
// l is nil, that local GCRA alone. Both the rate and the burst are
// multiplied by scale.
func (rc *RateConfig) rate(name string, l limits.Limiter, scale int) (*Rate, error) {
	var local *limits.GCRA
	if rc.Rate != (limits.Limit{}) {
		burst := Or(rc.Burst, rc.Rate.Events)
		if rc.Rate.Events > math.MaxInt/scale || burst > math.MaxInt/scale {
			return nil, fmt.Errorf("%v times %d overflows", rc.Rate, scale)
		}
		var err error
		local, err = limits.NewGCRAFor(limits.Limit{Events: rc.Rate.Events * scale, Period: rc.Rate.Period},
			limits.WithBurst(burst*scale), limits.WithMaxKeys(Or(rc.MaxKeys, DefaultMaxKeys)))
		if err != nil {
			return nil, err
		}
	}
	if l == nil {
		return NewRate(name, local, rc.LimiterTimeout)
	}
	r, err := NewRate(name, l, rc.LimiterTimeout)
	if err != nil {
		return nil, err
	}
	r.Pre = local
	return r, nil
}
