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
)

// Reasons of refusals, as sent in problem bodies, passed to Config.Deny and
// logged.
const (
	ReasonRateLimited        = "rate_limited"        // 429: the client's bucket is empty
	ReasonServerBusy         = "server_busy"         // 503: the gate is full
	ReasonRequestTimeout     = "request_timeout"     // 503: the request ran past Config.Timeout
	ReasonLimiterError       = "limiter_error"       // 503: a limiter failed and the policy is FailClosed
	ReasonTableFull          = "table_full"          // 503: the limiter tracks as many clients as it may
	ReasonConcurrencyLimited = "concurrency_limited" // Config.InFlightStatus: the client has too many requests in progress
)

// Middleware limits the requests that pass through its Handler, in layers
// applied in this order, each optional:
//
//  1. Exemptions: requests picked by Config.Exempt bypass every layer.
//  2. Capacity: a limits.Gate caps the requests in progress in the process
//     (503 server_busy), and a deadline bounds each request (503
//     request_timeout).
//  3. Rate: a limiter per client address, and one per caller key if
//     configured (429 rate_limited).
//  4. Concurrency: a cap on the requests one client address has in
//     progress (429 concurrency_limited by default).
//
// Every refusal is counted (see Stats), may be logged, and carries
// Retry-After; responses on rate-limited routes carry the RateLimit-Policy
// and RateLimit header fields.
//
// A Middleware is safe for concurrent use. Create one with New.
type Middleware struct {
	exempt    func(*http.Request) bool
	gate      *limits.Gate
	queueWait time.Duration
	timeout   time.Duration
	busyRetry time.Duration

	addr      Limiter
	caller    Limiter
	callerKey func(*http.Request) string
	onError   ErrorPolicy

	proxies            []netip.Prefix
	forwarded          string // the canonical name of the forwarding header
	ipv4Bits, ipv6Bits int

	inflight       *limits.Inflight
	maxPerClient   int64
	inflightStatus int

	headers    HeaderMode
	policyName string // as given, "default" if none
	policyItem string // quoted, as the header fields carry it
	deny       func(http.ResponseWriter, *http.Request, Denial)
	logger     *slog.Logger

	n counters
}

// counters are the Middleware's outcome counters.
type counters struct {
	exempt, allowed, rateLimited, serverBusy, requestTimeout,
	limiterError, tableFull, concurrencyLimited atomic.Uint64
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
	// ConcurrencyLimited counts requests refused because their client had
	// too many in progress.
	ConcurrencyLimited uint64 `json:"concurrency_limited"`
	// Gate holds the gate's counters, if Config.MaxInFlight is set.
	Gate limits.GateStats `json:"gate"`
}

// Denial describes a refusal to Config.Deny.
type Denial struct {
	// Status is the HTTP status to send: 429 or 503, or InFlightStatus.
	Status int
	// Reason is one of the Reason* codes, such as "rate_limited".
	Reason string
	// RetryAfter is the wait sent in the Retry-After header, in whole
	// seconds, never shorter than the limiter's answer.
	RetryAfter time.Duration
	// Decision is the limiter's answer, for rate_limited and table_full.
	Decision *limits.Decision
	// Policy names the refusing bucket's policy, as in the RateLimit
	// fields, for rate_limited and table_full.
	Policy string
	// Err is the limiter's error, for limiter_error.
	Err error
}

// New returns a Middleware configured by cfg, or an error if cfg holds a
// value that cannot be honoured: a negative count or duration, an invalid
// Rate, prefix lengths out of range, or a CallerKey with no limit to apply
// to it.
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
		maxPerClient:   int64(cfg.MaxInFlightPerClient),
		inflightStatus: cmp0(cfg.InFlightStatus, http.StatusTooManyRequests),
		headers:        cfg.Headers,
		policyName:     cfg.PolicyName,
		deny:           cfg.Deny,
		logger:         cfg.Logger,
	}
	for name, v := range map[string]int64{
		"MaxInFlight": int64(cfg.MaxInFlight), "QueueWait": int64(cfg.QueueWait), "Timeout": int64(cfg.Timeout),
		"BusyRetryAfter": int64(cfg.BusyRetryAfter), "Burst": int64(cfg.Burst), "MaxKeys": int64(cfg.MaxKeys),
		"AddressMultiplier": int64(cfg.AddressMultiplier), "MaxInFlightPerClient": int64(cfg.MaxInFlightPerClient),
	} {
		if v < 0 {
			return nil, fmt.Errorf("httplimit: %s must not be negative, got %d", name, v)
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
	if m.policyName == "" {
		m.policyName = "default"
	}
	var ok bool
	if m.policyItem, ok = sfString(m.policyName); !ok {
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
		m.gate = limits.NewGate(cfg.MaxInFlight)
	}
	if cfg.MaxInFlightPerClient > 0 {
		m.inflight = limits.NewInflight()
	}

	hasRate := cfg.Rate != limits.Limit{}
	if hasRate {
		if err := cfg.Rate.Validate(); err != nil {
			return nil, fmt.Errorf("httplimit: Rate: %w", err)
		}
	}
	local := func(scale int) (Limiter, error) {
		burst := cmp0(cfg.Burst, cfg.Rate.Events)
		if cfg.Rate.Events > math.MaxInt/scale || burst > math.MaxInt/scale {
			return nil, fmt.Errorf("httplimit: Rate %v times %d overflows", cfg.Rate, scale)
		}
		g, err := limits.NewGCRAFor(limits.Limit{Events: cfg.Rate.Events * scale, Period: cfg.Rate.Period},
			limits.WithBurst(burst*scale), limits.WithMaxKeys(cmp0(cfg.MaxKeys, limits.DefaultMaxKeys)))
		if err != nil {
			return nil, fmt.Errorf("httplimit: Rate: %w", err)
		}
		return Local(g), nil
	}
	scale := 1
	if cfg.CallerKey != nil {
		scale = cmp0(cfg.AddressMultiplier, DefaultAddressMultiplier)
		switch {
		case cfg.CallerLimiter != nil:
			m.caller = cfg.CallerLimiter
		case hasRate:
			var err error
			if m.caller, err = local(1); err != nil {
				return nil, err
			}
		default:
			return nil, errors.New("httplimit: CallerKey needs Rate or CallerLimiter")
		}
	}
	switch {
	case cfg.Limiter != nil:
		m.addr = cfg.Limiter
	case hasRate:
		var err error
		if m.addr, err = local(scale); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// sfString returns s as a Structured Field string (RFC 9651): quoted, with
// backslash escapes for quotes and backslashes. It reports false if s holds
// a character such a string cannot: anything but printable ASCII.
func sfString(s string) (string, bool) {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e {
			return "", false
		}
		if c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, c)
	}
	return string(append(b, '"')), true
}

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
		Exempt:             m.n.exempt.Load(),
		Allowed:            m.n.allowed.Load(),
		RateLimited:        m.n.rateLimited.Load(),
		ServerBusy:         m.n.serverBusy.Load(),
		RequestTimeout:     m.n.requestTimeout.Load(),
		LimiterError:       m.n.limiterError.Load(),
		TableFull:          m.n.tableFull.Load(),
		ConcurrencyLimited: m.n.concurrencyLimited.Load(),
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
	guard  limits.Guard
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
	q.guard.Close()
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
	if m.gate != nil || m.inflight != nil || m.timeout > 0 {
		q = &request{Context: r.Context()}
		defer func() {
			if !handedOff {
				q.release()
			}
		}()
	}

	if m.gate != nil {
		var err error
		var ok bool
		if m.queueWait > 0 {
			q.permit, err = m.gate.Enter(r.Context(), m.queueWait)
		} else if q.permit, ok = m.gate.TryEnter(); !ok {
			err = limits.ErrGateFull
		}
		if err != nil {
			m.n.serverBusy.Add(1)
			m.refuse(w, r, "", Denial{Status: http.StatusServiceUnavailable, Reason: ReasonServerBusy, RetryAfter: m.busyRetry})
			return
		}
		r = r.WithContext(q)
	}

	key := ""
	if m.addr != nil || m.inflight != nil {
		key = m.clientKey(r)
	}
	if !m.limit(w, r, key) {
		return
	}

	if m.inflight != nil {
		var n int64
		q.guard, n = m.inflight.Incr(key, 1)
		if n > m.maxPerClient {
			m.n.concurrencyLimited.Add(1)
			m.refuse(w, r, key, Denial{Status: m.inflightStatus, Reason: ReasonConcurrencyLimited, RetryAfter: m.busyRetry})
			return
		}
	}

	m.n.allowed.Add(1)
	if m.timeout > 0 {
		handedOff = true
		m.serveWithTimeout(next, w, r, q)
		return
	}
	next.ServeHTTP(w, r)
}

// limit applies the rate layer: the caller key's bucket first, so that a
// caller refused there does not also drain its address, then the address
// bucket, always. It writes the refusal and returns false if either
// refuses; otherwise it sets the rate limit headers.
func (m *Middleware) limit(w http.ResponseWriter, r *http.Request, addrKey string) bool {
	var decs [2]limits.Decision
	var names [2]string
	n := 0
	if m.caller != nil {
		names[n] = m.policyItem
		ok, decided := m.decide(w, r, m.caller, callerBucket(m.callerKey(r), addrKey), m.policyName, names[n], &decs[n])
		if decided {
			n++
		}
		if !ok {
			return false
		}
	}
	if m.addr != nil {
		policy, item := m.policyName, m.policyItem
		if m.caller != nil {
			policy, item = "address", `"address"`
		}
		names[n] = item
		ok, decided := m.decide(w, r, m.addr, addrKey, policy, item, &decs[n])
		if decided {
			n++
		}
		if !ok {
			return false
		}
	}
	m.setRateHeaders(w.Header(), decs[:n], names[:n])
	return true
}

// callerBucket returns the caller bucket's key for a request: a hash of its
// caller key, so that session tokens and API keys never reach a limiter (or
// a shared store) in clear, and their length is fixed; or, for a request
// without one, its address key, so that leaving the key out does not earn
// the address bucket's larger limit.
func callerBucket(callerKey, addrKey string) string {
	if callerKey == "" {
		return "n:" + addrKey
	}
	sum := sha256.Sum256([]byte(callerKey))
	var buf [2 + 2*16]byte
	copy(buf[:], "c:")
	hex.Encode(buf[2:], sum[:16])
	return string(buf[:])
}

// decide asks l about a request for key, stores its Decision in *d and
// reports whether the request may go on and whether l decided (rather than
// failed). It writes the refusal, with the headers of the bucket's policy,
// named plainly (policy) and as a header item (item).
func (m *Middleware) decide(w http.ResponseWriter, r *http.Request, l Limiter, key, policy, item string, d *limits.Decision) (ok, decided bool) {
	dec, err := l.AllowN(r.Context(), key, 1)
	if err != nil {
		m.n.limiterError.Add(1)
		if m.onError == FailOpen {
			m.log(r, "httplimit: limiter failed; request served", ReasonLimiterError, key, err)
			return true, false
		}
		m.refuse(w, r, key, Denial{Status: http.StatusServiceUnavailable, Reason: ReasonLimiterError, RetryAfter: m.busyRetry, Err: err})
		return false, false
	}
	*d = dec
	if dec.Allowed {
		return true, true
	}
	refused := dec // a copy for the Denial, made only on this path
	den := Denial{Status: http.StatusTooManyRequests, Reason: ReasonRateLimited, RetryAfter: ceilSecond(dec.RetryAfter), Decision: &refused, Policy: policy}
	if dec.Reason == limits.ReasonTableFull {
		m.n.tableFull.Add(1)
		den.Status, den.Reason = http.StatusServiceUnavailable, ReasonTableFull
	} else {
		m.n.rateLimited.Add(1)
	}
	if den.RetryAfter == 0 {
		den.RetryAfter = m.busyRetry
	}
	m.setRateHeaders(w.Header(), []limits.Decision{dec}, []string{item})
	m.refuse(w, r, key, den)
	return false, true
}

// ceilSecond rounds d up to a whole second; a negative d is 0.
func ceilSecond(d time.Duration) time.Duration {
	return time.Duration(seconds(d)) * time.Second
}
