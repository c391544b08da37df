package httplimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/internal/front"
)

// Reasons of refusals, as sent in problem bodies, passed to Config.Deny and
// logged.
const (
	ReasonRateLimited          = front.ReasonRateLimited          // 429: the client's bucket is empty
	ReasonServerBusy           = front.ReasonServerBusy           // 503: the gate is full
	ReasonRequestTimeout       = front.ReasonRequestTimeout       // 503: the request ran past Config.Timeout
	ReasonLimiterError         = front.ReasonLimiterError         // 503: a limiter failed or did not answer in time, and the policy is FailClosed
	ReasonTableFull            = front.ReasonTableFull            // 503: the limiter tracks as many clients as it may
	ReasonCostAboveBurst       = front.ReasonCostAboveBurst       // 429, no Retry-After: the request costs more than the client's whole burst
	ReasonInvalidCost          = front.ReasonInvalidCost          // 500: the request's cost is negative
	ReasonConcurrencyLimited   = front.ReasonConcurrencyLimited   // Config.InFlightStatus: the client has too many requests in progress
	ReasonConcurrencyTableFull = front.ReasonConcurrencyTableFull // 503: too many clients have requests in progress
)

// Middleware limits the requests that pass through its Handler, in layers
// applied in this order, each optional:
//
//  1. Exemptions: requests picked by Config.Exempt bypass every layer.
//  2. Capacity: a limits.Gate caps the requests in progress in the process
//     (503 server_busy), and a deadline bounds each request (503
//     request_timeout).
//  3. Rate: a bucket per client address, then one per caller key if
//     configured (429 rate_limited).
//  4. Concurrency: a cap on the requests one client address has in
//     progress (429 concurrency_limited by default).
//
// A request refused by a layer costs nothing in any other: the buckets an
// earlier layer charged are given back, so a client is never charged for
// service it did not get. The address bucket, which a client cannot
// choose, is charged before the caller key's, so that a caller key gets a
// bucket only for requests its address allowed: a client sending a new
// session cookie with every request cannot fill the table other clients
// need. Every wait is bounded: the gate's queue by QueueWait, each limiter
// call by LimiterTimeout, the handler by Timeout.
//
// Every refusal is counted (see Stats), may be logged, and is answered
// from the deciding layer's answer: its status and reason, a Retry-After
// that is never earlier than the truth (none when waiting cannot help),
// and the RateLimit-Policy and RateLimit header fields of the policy that
// refused. Allowed requests carry the fields of every policy applied.
//
// A Middleware is safe for concurrent use. Create one with New.
type Middleware struct {
	exempt    func(*http.Request) bool
	gate      *limits.Gate
	queueWait time.Duration
	timeout   time.Duration
	busyRetry time.Duration

	// addr is the client address's bucket; caller the caller key's, and
	// keyless the one that requests without a caller key share per
	// address.
	addr, caller, keyless *front.Rate
	callerKey             func(*http.Request) string
	onError               ErrorPolicy

	proxies            []netip.Prefix
	forwarded          string // the canonical name of the forwarding header
	ipv4Bits, ipv6Bits int

	slots          *front.Slots
	inflightStatus int

	headers HeaderMode
	deny    func(http.ResponseWriter, *http.Request, Denial)
	logger  *slog.Logger

	n counters
}

// counters are the Middleware's outcome counters.
type counters struct {
	exempt, allowed, rateLimited, serverBusy, requestTimeout,
	limiterError, tableFull, costAboveBurst, invalidCost,
	concurrencyLimited, concurrencyTableFull atomic.Uint64
}

// Stats is a snapshot of a Middleware's counters. It marshals to JSON, so
// it can be published with expvar:
//
//	expvar.Publish("httplimit", expvar.Func(func() any { return m.Stats() }))
type Stats struct {
	// Exempt counts requests that bypassed every layer.
	Exempt uint64 `json:"exempt"`
	// Allowed counts requests handed to the handler.
	Allowed uint64 `json:"allowed"`
	// RateLimited counts requests refused with reason rate_limited.
	RateLimited uint64 `json:"rate_limited"`
	// ServerBusy counts requests refused because the gate was full.
	ServerBusy uint64 `json:"server_busy"`
	// RequestTimeout counts allowed requests that ran past the deadline.
	RequestTimeout uint64 `json:"request_timeout"`
	// LimiterError counts limiter errors, whether the request was then
	// refused (FailClosed) or served (FailOpen).
	LimiterError uint64 `json:"limiter_error"`
	// TableFull counts requests refused because a limiter's table of
	// clients was full.
	TableFull uint64 `json:"table_full"`
	// CostAboveBurst counts requests refused because they cost more than
	// a bucket holds, and InvalidCost those whose cost was negative.
	CostAboveBurst uint64 `json:"cost_above_burst"`
	InvalidCost    uint64 `json:"invalid_cost"`
	// ConcurrencyLimited counts requests refused because their client had
	// too many in progress.
	ConcurrencyLimited uint64 `json:"concurrency_limited"`
	// ConcurrencyTableFull counts requests refused because too many
	// clients had requests in progress.
	ConcurrencyTableFull uint64 `json:"concurrency_table_full"`
	// Gate holds the gate's counters, if Config.MaxInFlight is set.
	Gate limits.GateStats `json:"gate"`
}

// Denial describes a refusal to Config.Deny.
type Denial struct {
	// Status is the HTTP status to send: 429, 503, 500 or InFlightStatus.
	Status int
	// Reason is one of the Reason* codes, such as "rate_limited".
	Reason string
	// RetryAfter is the wait sent in the Retry-After header, in whole
	// seconds, never shorter than the limiter's answer; 0 when no header
	// is sent, for refusals that waiting cannot cure.
	RetryAfter time.Duration
	// Decision is the limiter's answer, for refusals a limiter decided.
	Decision *limits.Decision
	// Policy names the refusing bucket's policy, as in the RateLimit
	// fields, for refusals a limiter decided.
	Policy string
	// Err is the limiter's error, for limiter_error.
	Err error
}

// New returns a Middleware configured by cfg, or an error if cfg holds a
// value that cannot be honoured: a negative count or duration, an invalid
// Rate, prefix lengths out of range, or a CallerKey with no limit to apply
// to it. With several such values, the error names the first in the order
// of Config's fields.
func New(cfg Config) (*Middleware, error) {
	m := &Middleware{
		exempt:         cfg.Exempt,
		queueWait:      cfg.QueueWait,
		timeout:        cfg.Timeout,
		busyRetry:      cfg.BusyRetryAfter,
		callerKey:      cfg.CallerKey,
		onError:        cfg.OnLimiterError,
		proxies:        make([]netip.Prefix, len(cfg.TrustedProxies)),
		ipv4Bits:       cmp0(cfg.IPv4Prefix, 32),
		ipv6Bits:       cmp0(cfg.IPv6Prefix, 64),
		inflightStatus: cmp0(cfg.InFlightStatus, http.StatusTooManyRequests),
		headers:        cfg.Headers,
		deny:           cfg.Deny,
		logger:         cfg.Logger,
	}
	for _, f := range []struct {
		name string
		v    int64
	}{
		{"MaxInFlight", int64(cfg.MaxInFlight)}, {"QueueWait", int64(cfg.QueueWait)}, {"Timeout", int64(cfg.Timeout)},
		{"BusyRetryAfter", int64(cfg.BusyRetryAfter)}, {"Burst", int64(cfg.Burst)}, {"MaxKeys", int64(cfg.MaxKeys)},
		{"AddressMultiplier", int64(cfg.AddressMultiplier)}, {"MaxInFlightPerClient", int64(cfg.MaxInFlightPerClient)},
		{"LimiterTimeout", int64(cfg.LimiterTimeout)},
	} {
		if f.v < 0 {
			return nil, fmt.Errorf("httplimit: %s must not be negative, got %d", f.name, f.v)
		}
	}
	if m.ipv4Bits > 32 || m.ipv4Bits < 0 || m.ipv6Bits > 128 || m.ipv6Bits < 0 {
		return nil, fmt.Errorf("httplimit: prefix lengths must be within 0-32 (IPv4) and 0-128 (IPv6), got %d and %d", cfg.IPv4Prefix, cfg.IPv6Prefix)
	}
	if m.inflightStatus < 400 || m.inflightStatus > 599 {
		return nil, fmt.Errorf("httplimit: InFlightStatus must be a 4xx or 5xx status, got %d", cfg.InFlightStatus)
	}
	m.busyRetry = ceilSecond(m.busyRetry)
	if m.busyRetry == 0 {
		m.busyRetry = time.Second
	}
	policy := cfg.PolicyName
	if policy == "" {
		policy = "default"
	}
	if _, ok := front.SFString(policy); !ok {
		return nil, fmt.Errorf("httplimit: PolicyName %q must be printable ASCII", cfg.PolicyName)
	}
	for i, p := range cfg.TrustedProxies {
		m.proxies[i] = p.Masked()
	}
	m.forwarded = http.CanonicalHeaderKey(cfg.ForwardedHeader)
	switch m.forwarded {
	case "":
		m.forwarded = "X-Forwarded-For"
	case "X-Forwarded-For", "Forwarded", "X-Real-Ip":
	default:
		return nil, fmt.Errorf("httplimit: ForwardedHeader must be X-Forwarded-For, Forwarded or X-Real-IP, got %q", cfg.ForwardedHeader)
	}
	if cfg.MaxInFlight > 0 {
		m.gate, _ = limits.NewGate(cfg.MaxInFlight) // cannot fail: MaxInFlight > 0
	}
	if cfg.MaxInFlightPerClient > 0 {
		m.slots = front.NewSlots(cfg.MaxInFlightPerClient, cmp0(cfg.MaxKeys, DefaultMaxKeys))
	}

	hasRate := cfg.Rate != limits.Limit{}
	if hasRate {
		if err := cfg.Rate.Validate(); err != nil {
			return nil, fmt.Errorf("httplimit: Rate: %w", err)
		}
	}
	timeout := cfg.LimiterTimeout
	if timeout == 0 {
		timeout = front.DefaultLimiterTimeout
		if cfg.Timeout > 0 {
			timeout = min(timeout, cfg.Timeout)
		}
	}
	local := func(scale int) (limits.Limiter, error) {
		burst := cmp0(cfg.Burst, cfg.Rate.Events)
		if cfg.Rate.Events > math.MaxInt/scale || burst > math.MaxInt/scale {
			return nil, fmt.Errorf("httplimit: Rate %v times %d overflows", cfg.Rate, scale)
		}
		g, err := limits.NewGCRAFor(limits.Limit{Events: cfg.Rate.Events * scale, Period: cfg.Rate.Period},
			limits.WithBurst(burst*scale), limits.WithMaxKeys(cmp0(cfg.MaxKeys, DefaultMaxKeys)))
		if err != nil {
			return nil, fmt.Errorf("httplimit: Rate: %w", err)
		}
		return g, nil
	}
	rate := func(name string, l limits.Limiter) *front.Rate {
		r, err := front.NewRate(name, l, timeout)
		if err != nil {
			panic(err) // names are checked above
		}
		return r
	}
	scale := 1
	addrPolicy := policy
	if cfg.CallerKey != nil {
		scale = cmp0(cfg.AddressMultiplier, DefaultAddressMultiplier)
		addrPolicy = "address"
		var l limits.Limiter
		switch {
		case cfg.CallerLimiter != nil:
			l = cfg.CallerLimiter
		case hasRate:
			var err error
			if l, err = local(1); err != nil {
				return nil, err
			}
		default:
			return nil, errors.New("httplimit: CallerKey needs Rate or CallerLimiter")
		}
		m.caller = rate(policy, l)
		m.keyless = rate(KeylessPolicy, l)
	}
	switch {
	case cfg.Limiter != nil:
		m.addr = rate(addrPolicy, cfg.Limiter)
	case hasRate:
		l, err := local(scale)
		if err != nil {
			return nil, err
		}
		m.addr = rate(addrPolicy, l)
	}
	return m, nil
}

// DefaultMaxKeys is the number of clients a local limiter, and the
// per-client concurrency table, track at most unless Config.MaxKeys says
// otherwise.
const DefaultMaxKeys = 1 << 20

// KeylessPolicy names, in responses, the bucket that requests without a
// caller key share per client address when Config.CallerKey is set.
const KeylessPolicy = "keyless"

// cmp0 returns v, or def if v is 0.
func cmp0(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// Handler returns next wrapped in m's layers. Its type makes m.Handler a
// middleware for net/http's ServeMux and for routers such as chi.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(next, w, r)
	})
}

// Stats returns a snapshot of m's counters. Each is read atomically, but
// not all at one instant.
func (m *Middleware) Stats() Stats {
	s := Stats{
		Exempt:               m.n.exempt.Load(),
		Allowed:              m.n.allowed.Load(),
		RateLimited:          m.n.rateLimited.Load(),
		ServerBusy:           m.n.serverBusy.Load(),
		RequestTimeout:       m.n.requestTimeout.Load(),
		LimiterError:         m.n.limiterError.Load(),
		TableFull:            m.n.tableFull.Load(),
		CostAboveBurst:       m.n.costAboveBurst.Load(),
		InvalidCost:          m.n.invalidCost.Load(),
		ConcurrencyLimited:   m.n.concurrencyLimited.Load(),
		ConcurrencyTableFull: m.n.concurrencyTableFull.Load(),
	}
	if m.gate != nil {
		s.Gate = m.gate.Stats()
	}
	return s
}

// request is what the Middleware holds for one request until its handler
// returns. It is also the request's context, so that ReleaseCapacity can
// find it without a context of its own.
type request struct {
	context.Context
	permit limits.Permit
	slots  *front.Slots
	client string // counted in slots, if slots is set
}

type requestKey struct{}

// Value returns q for requestKey, and otherwise asks the parent context.
func (q *request) Value(key any) any {
	if key == (requestKey{}) {
		return q
	}
	return q.Context.Value(key)
}

// release gives back everything the request holds.
func (q *request) release() {
	q.permit.Release()
	if q.slots != nil {
		q.slots.Release(q.client)
		q.slots = nil
	}
}

// ReleaseCapacity gives back the place r holds in the Middleware's gate
// before its handler returns, so that a long-lived request, such as a
// WebSocket after its upgrade or a stream, no longer counts against
// MaxInFlight once its costly part is done. It is idempotent, safe for
// concurrent use, and does nothing for requests that hold no place. The
// request's per-client count, if any, is kept until the handler returns.
func ReleaseCapacity(r *http.Request) {
	if q, ok := r.Context().Value(requestKey{}).(*request); ok {
		q.permit.Release()
	}
}

func (m *Middleware) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	if m.exempt != nil && m.exempt(r) {
		m.n.exempt.Add(1)
		next.ServeHTTP(w, r)
		return
	}
	var q *request // what the request holds, if any layer makes it hold anything
	handedOff := false
	if m.gate != nil || m.slots != nil || m.timeout > 0 {
		q = &request{Context: r.Context()}
		defer func() {
			if !handedOff {
				q.release()
			}
		}()
	}

	if m.gate != nil {
		var ok bool
		if m.queueWait > 0 {
			q.permit, ok = m.gate.Enter(r.Context(), m.queueWait)
		} else {
			q.permit, ok = m.gate.TryEnter()
		}
		if !ok {
			m.n.serverBusy.Add(1)
			m.refuse(w, r, "", Denial{Status: http.StatusServiceUnavailable, Reason: ReasonServerBusy, RetryAfter: m.busyRetry})
			return
		}
		r = r.WithContext(q)
	}

	key := ""
	if m.addr != nil || m.slots != nil || m.caller != nil {
		key = m.clientKey(r)
	}
	var charges [2]front.Charge
	n, ok := m.limit(w, r, key, &charges)
	if !ok {
		return
	}
	if m.slots != nil {
		if reason := m.slots.Acquire(key); reason != "" {
			m.refund(r, charges[:n])
			status := m.inflightStatus
			if reason == ReasonConcurrencyTableFull {
				m.n.concurrencyTableFull.Add(1)
				status = http.StatusServiceUnavailable
			} else {
				m.n.concurrencyLimited.Add(1)
			}
			m.refuse(w, r, key, Denial{Status: status, Reason: reason, RetryAfter: m.busyRetry})
			return
		}
		q.slots, q.client = m.slots, key
	}

	m.setRateHeaders(w.Header(), charges[:n])
	m.n.allowed.Add(1)
	if m.timeout > 0 {
		handedOff = true
		m.serveWithTimeout(next, w, r, q)
		return
	}
	next.ServeHTTP(w, r)
}

// limit applies the rate layer: the address bucket first, as the client
// cannot choose it, then the caller key's bucket (or, for a request
// without one, the bucket keyless requests share per address). It records
// what each charged in charges and returns how many did. If either
// refuses, it gives back what the other charged, writes the refusal and
// returns false.
func (m *Middleware) limit(w http.ResponseWriter, r *http.Request, addrKey string, charges *[2]front.Charge) (int, bool) {
	n := 0
	if m.addr != nil {
		c, ok := m.take(w, r, m.addr, addrKey, charges[:n])
		if !ok {
			return 0, false
		}
		if c.Rate != nil {
			charges[n] = c
			n++
		}
	}
	if m.caller != nil {
		rate, key := m.caller, ""
		if ck := m.callerKey(r); ck != "" {
			key = callerBucket(ck)
		} else {
			rate, key = m.keyless, "n:"+addrKey
		}
		c, ok := m.take(w, r, rate, key, charges[:n])
		if !ok {
			return 0, false
		}
		if c.Rate != nil {
			charges[n] = c
			n++
		}
	}
	return n, true
}

// callerBucket returns the caller bucket's key for a caller key: a hash of
// it, so that session tokens and API keys never reach a limiter (or a
// shared store) in clear, and their length is fixed.
func callerBucket(callerKey string) string {
	sum := sha256.Sum256([]byte(callerKey))
	var buf [2 + 2*16]byte
	copy(buf[:], "c:")
	hex.Encode(buf[2:], sum[:16])
	return string(buf[:])
}

// take asks rate's limiter about the request for key. If it allows, take
// returns what it charged (nothing, with a nil Rate, when the limiter
// failed and the policy is FailOpen) and true. If it refuses or fails and
// the policy is FailClosed, take gives back the earlier charges, writes
// the refusal and returns false.
func (m *Middleware) take(w http.ResponseWriter, r *http.Request, rate *front.Rate, key string, earlier []front.Charge) (front.Charge, bool) {
	d, err := rate.Take(r.Context(), key, 1)
	if err != nil {
		m.n.limiterError.Add(1)
		if m.onError == FailOpen {
			m.log(r, "httplimit: limiter failed; request served", ReasonLimiterError, key, err)
			return front.Charge{}, true
		}
		m.refund(r, earlier)
		m.refuse(w, r, key, Denial{Status: http.StatusServiceUnavailable, Reason: ReasonLimiterError, RetryAfter: m.busyRetry, Err: err})
		return front.Charge{}, false
	}
	if d.Allowed {
		return front.Charge{Rate: rate, Key: key, Dec: d}, true
	}
	m.refund(r, earlier)
	refused := d // a copy for the Denial, made only on this path
	den := Denial{Reason: front.ReasonOf(d), Decision: &refused, Policy: rate.Name}
	switch den.Reason {
	case ReasonRateLimited:
		m.n.rateLimited.Add(1)
		den.Status, den.RetryAfter = http.StatusTooManyRequests, ceilSecond(d.RetryAfter)
		if den.RetryAfter == 0 {
			den.RetryAfter = time.Second // a limiter's refusal with no wait: never 0
		}
	case ReasonTableFull:
		m.n.tableFull.Add(1)
		den.Status, den.RetryAfter = http.StatusServiceUnavailable, m.busyRetry
	case ReasonCostAboveBurst:
		m.n.costAboveBurst.Add(1)
		den.Status = http.StatusTooManyRequests
	case ReasonInvalidCost:
		m.n.invalidCost.Add(1)
		den.Status = http.StatusInternalServerError
	default: // unavailable, from a limiter that said so without an error
		m.n.limiterError.Add(1)
		den.Status, den.RetryAfter = http.StatusServiceUnavailable, m.busyRetry
	}
	m.setRefusalHeaders(w.Header(), rate, d, den.Reason)
	m.refuse(w, r, key, den)
	return front.Charge{}, false
}

// refund gives back what charges charged, latest first. It runs even if
// the client has gone, within each limiter's timeout; a refund that fails
// leaves the charge in place.
func (m *Middleware) refund(r *http.Request, charges []front.Charge) {
	ctx := context.WithoutCancel(r.Context())
	for i := len(charges) - 1; i >= 0; i-- {
		c := charges[i]
		if err := c.Rate.Refund(ctx, c.Key, c.Dec); err != nil {
			m.log(r, "httplimit: refund failed; the charge stays", ReasonLimiterError, c.Key, err)
		}
	}
}

// ceilSecond rounds d up to a whole second; a negative d is 0.
func ceilSecond(d time.Duration) time.Duration {
	return time.Duration(seconds(d)) * time.Second
}
