package httplimit

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/internal/front"
)

// Reasons of refusals, as sent in problem bodies, passed to Config.Deny and
// logged.
const (
	ReasonRateLimited          = "rate_limited"           // 429: the client's bucket is empty
	ReasonServerBusy           = "server_busy"            // 503: the gate is full
	ReasonRequestTimeout       = "request_timeout"        // 503: the request ran past Config.Timeout
	ReasonLimiterError         = "limiter_error"          // 503: a limiter failed or did not answer in time, and the policy is FailClosed
	ReasonTableFull            = "table_full"             // 503: the limiter tracks as many clients as it may
	ReasonCostAboveBurst       = "cost_above_burst"       // 429, no Retry-After: the request costs more than the client's whole burst
	ReasonInvalidCost          = "invalid_cost"           // 500: the request's cost is negative
	ReasonConcurrencyLimited   = "concurrency_limited"    // Config.InFlightStatus: the client has too many requests in progress
	ReasonConcurrencyTableFull = "concurrency_table_full" // 503: too many clients have requests in progress
)

// Middleware limits the requests that pass through its Handler, in layers
// applied in this order, each optional:
//
//  1. Exemptions: requests picked by Config.Exempt bypass every layer.
//  2. Capacity: a limits.Gate caps the requests in progress in the process
//     (503 server_busy), at a fixed number or one that package adaptive
//     finds from latency (Config.Adaptive), and a deadline bounds each
//     request (503 request_timeout).
//  3. Rate: a bucket per client address, then one per caller key if
//     configured (429 rate_limited), then the policies of the route, if
//     the Middleware was made by With.
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
// call by LimiterTimeout, and the request from its admission by Timeout,
// limiter calls and handler together.
//
// Every refusal is counted (see Stats), may be logged, and is answered
// from the deciding layer's answer: its status and reason, a Retry-After
// that is never earlier than the truth (none when waiting cannot help),
// and the RateLimit-Policy and RateLimit header fields of the policy that
// refused. Allowed requests carry the fields of every policy applied.
//
// A Middleware is safe for concurrent use. Create one with New, and one
// for a route with With; the zero value is not usable.
type Middleware struct {
	c *core
	// rates are the rate layers m applies, in order: those of New's Config
	// (the address and caller key buckets), then those of With.
	rates []*rateLayer
	// own is how many of rates are m's own routes' policies, at the end.
	own int
}

// core is what a Middleware shares with those With makes from it: one gate,
// one count of requests per client, one set of counters.
type core struct {
	exempt    func(*http.Request) bool
	capacity  *front.Capacity // nil: no gate
	priority  func(*http.Request) limits.Priority
	timeout   time.Duration
	busyRetry time.Duration
	limTime   time.Duration // bound on each limiter call
	onError   ErrorPolicy

	id        front.Identity
	forwarded string // the canonical name of the forwarding header

	slots          *front.Slots
	inflightStatus int

	headers HeaderMode
	deny    func(http.ResponseWriter, *http.Request, Denial)
	logger  *slog.Logger

	// nested is set once With has made a route Middleware: requests then
	// carry what they were charged, for a route that refuses them.
	nested atomic.Bool
	// hasAddr reports whether Config set an address bucket, which route
	// policies keyed by what the caller chooses need in front of them.
	hasAddr bool

	n        front.Counters
	admit    front.Admission
	mu       sync.Mutex
	policies []*rateLayer // every policy of m and of the routes made with With, for Stats
}

// rateLayer is one rate policy as a Middleware applies it.
type rateLayer = front.Layer[*http.Request]

// Stats is a snapshot of a Middleware's counters, in requests, from 0 when
// the Middleware was made, shared with the route Middlewares made from it
// by With. It marshals to JSON, so it can be
// published with expvar:
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
	// RequestTimeout counts requests that ran past the deadline: allowed
	// requests whose handler was still running, and those whose deadline
	// passed in the rate layers, before their handler started (not counted
	// in Allowed).
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
	// Gate holds the gate's counters, if Config.MaxInFlight or
	// Config.Gate is set.
	Gate *limits.GateStats `json:"gate,omitempty"`
	// SharedGate says the gate is a shared one (Config.Gate or
	// Config.Controller): Gate and Adaptive are then the counters of the
	// whole gate, which other front ends and direct callers use too, not
	// of this Middleware's requests, which the other fields count.
	SharedGate bool `json:"shared_gate,omitempty"`
	// Adaptive holds the adaptive limit's state and recent history, if
	// Config.Adaptive is set.
	Adaptive *adaptive.Stats `json:"adaptive,omitempty"`
	// Policies holds the counts of each rate policy, in the order they
	// apply: Config's, then the routes'.
	Policies []PolicyStats `json:"policies,omitempty"`
}

// PolicyStats counts the outcomes of one rate policy, in requests, from
// 0 when the policy was made. A request allowed by a policy and refused by
// a later layer counts as allowed here.
type PolicyStats struct {
	// Name is the policy's name, as in the RateLimit header fields.
	Name string `json:"name"`
	// Allowed counts the requests the policy allowed and charged.
	Allowed uint64 `json:"allowed"`
	// RateLimited, TableFull, CostAboveBurst and InvalidCost count the
	// requests it refused, by reason.
	RateLimited    uint64 `json:"rate_limited"`
	TableFull      uint64 `json:"table_full"`
	CostAboveBurst uint64 `json:"cost_above_burst"`
	InvalidCost    uint64 `json:"invalid_cost"`
	// LimiterError counts the calls of its limiter that failed.
	LimiterError uint64 `json:"limiter_error"`
	// Keys is the number of clients the policy's local limiter holds, and
	// MaxKeys the most it may (Config.MaxKeys): a table near full is a
	// limit set too low, or an attack. Both are 0 for a policy decided
	// elsewhere alone, and for one that shares the table of a policy
	// before it (KeylessPolicy shares the caller key's), so that a sum
	// counts each table once.
	Keys    int `json:"keys"`
	MaxKeys int `json:"max_keys"`
}

// Denial describes a refusal to Config.Deny, which may read it but must
// not keep it past its return.
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
	c := &core{
		exempt:         cfg.Exempt,
		priority:       cfg.Priority,
		timeout:        cfg.Timeout,
		onError:        cfg.OnLimiterError,
		inflightStatus: front.Or(cfg.InFlightStatus, http.StatusTooManyRequests),
		headers:        cfg.Headers,
		deny:           cfg.Deny,
		logger:         cfg.Logger,
	}
	c.forwarded = http.CanonicalHeaderKey(cfg.ForwardedHeader)
	switch c.forwarded {
	case "":
		c.forwarded = "X-Forwarded-For"
	case "X-Forwarded-For", "Forwarded", "X-Real-Ip":
	default:
		return nil, fmt.Errorf("httplimit: ForwardedHeader must be X-Forwarded-For, Forwarded or X-Real-IP, got %q", cfg.ForwardedHeader)
	}
	switch {
	case c.inflightStatus < 400 || c.inflightStatus > 599:
		return nil, fmt.Errorf("httplimit: InFlightStatus must be a 4xx or 5xx status, got %d", cfg.InFlightStatus)
	case c.onError > FailOpen:
		return nil, fmt.Errorf("httplimit: OnLimiterError must be FailClosed or FailOpen, got %d", cfg.OnLimiterError)
	case c.headers > HeadersNone:
		return nil, fmt.Errorf("httplimit: Headers must be one of the Headers* modes, got %d", cfg.Headers)
	}
	b, err := front.Setup(front.Common{
		MaxInFlight: cfg.MaxInFlight, QueueWait: cfg.QueueWait, QueueAdapt: cfg.QueueAdapt, Adaptive: cfg.Adaptive,
		Gate: cfg.Gate, Controller: cfg.Controller, Timeout: cfg.Timeout, BusyRetryAfter: cfg.BusyRetryAfter,
		Rate: cfg.Rate, Burst: cfg.Burst, MaxKeys: cfg.MaxKeys, Limiter: cfg.Limiter, LimiterTimeout: cfg.LimiterTimeout,
		CallerKeyed: cfg.CallerKey != nil, AddressMultiplier: cfg.AddressMultiplier, CallerLimiter: cfg.CallerLimiter,
		TrustedProxies: cfg.TrustedProxies, Forwarded: c.forwarded == "Forwarded", IPv4Prefix: cfg.IPv4Prefix, IPv6Prefix: cfg.IPv6Prefix,
		MaxInFlightPerClient: cfg.MaxInFlightPerClient, PolicyName: cfg.PolicyName,
	}, cfg.CallerKey, cfg.Cost)
	if err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	c.busyRetry = ceilSecond(cfg.BusyRetryAfter)
	if c.busyRetry == 0 {
		c.busyRetry = time.Second
	}
	c.id, c.capacity, c.slots, c.limTime, c.hasAddr = b.Identity, b.Capacity, b.Slots, b.LimiterTimeout, b.HasAddr
	c.admit = front.Admission{FailOpen: c.onError == FailOpen, Counts: &c.n.Rates, OnError: c.logLimiter}
	c.policies = b.Rates
	return &Middleware{c: c, rates: b.Rates}, nil
}

// DefaultMaxKeys is the number of clients a local limiter, and the
// per-client concurrency table, track at most unless Config.MaxKeys says
// otherwise.
const DefaultMaxKeys = front.DefaultMaxKeys

// KeylessPolicy names, in responses, the bucket that requests without a
// caller key share per client address when Config.CallerKey is set.
const KeylessPolicy = front.KeylessPolicy

// Handler returns next wrapped in m's layers. Its type makes m.Handler a
// middleware for net/http's ServeMux and for routers such as chi.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return &handler{m, next}
}

// handler is next wrapped in m's layers. Its type lets an enclosing
// Middleware find a route's policies behind a router (routeOf).
type handler struct {
	m    *Middleware
	next http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.m.serve(h.next, w, r) }

// routeOf returns the route Middleware of c that next will hand r to, if
// next is a router that can say which handler serves r (such as
// http.ServeMux) and that handler is a route's, or nil.
func (c *core) routeOf(next http.Handler, r *http.Request) *Middleware {
	rt, ok := next.(interface {
		Handler(*http.Request) (http.Handler, string)
	})
	if !ok {
		return nil
	}
	h, _ := rt.Handler(r)
	if rh, ok := h.(*handler); ok && rh.m.c == c && rh.m.own > 0 {
		return rh.m
	}
	return nil
}

// Stats returns a snapshot of m's counters, shared with the Middlewares
// made from it by With. Each is read atomically, but not all at one
// instant.
func (m *Middleware) Stats() Stats {
	c := m.c
	t := c.n.Load()
	s := Stats{
		Exempt: t.Exempt, Allowed: t.Allowed, RateLimited: t.RateLimited, ServerBusy: t.ServerBusy,
		RequestTimeout: t.RequestTimeout, LimiterError: t.LimiterError, TableFull: t.TableFull,
		CostAboveBurst: t.CostAboveBurst, InvalidCost: t.InvalidCost,
		ConcurrencyLimited: t.ConcurrencyLimited, ConcurrencyTableFull: t.ConcurrencyTableFull,
	}
	s.Gate, s.Adaptive = c.capacity.Stats()
	s.SharedGate = c.capacity != nil && c.capacity.Shared
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range front.PolicyTotalsOf(c.policies) {
		s.Policies = append(s.Policies, PolicyStats(p))
	}
	return s
}

// request is what a Middleware holds for one request until its handler
// returns. It is also the request's context, so that ReleaseCapacity and
// the route Middlewares made by With can find it, and, with a gate and no
// Timeout, the ResponseWriter its handler writes through (see writer.go).
//
// It holds in one allocation everything the request needs: the copy of
// the request the handler gets, whose context it is, and the bytes of the
// client's key and of the rate limit header fields' values.
type request struct {
	context.Context
	c       *core
	req     http.Request        // the request the handler gets, with q as its context
	held    front.Held          // the request's place in the gate
	rw      http.ResponseWriter // the ResponseWriter q wraps for the handler
	status  int32               // the final status the handler wrote through q, or 101; 0 before any
	keyLen  uint8               // the length of client, when clientKeyIn wrote it in mem
	slot    bool                // client is counted in c.slots
	counted bool                // counted as allowed
	// refused is set when a route Middleware refused the request after
	// the gate let it in: its latency says nothing of the service's.
	refused bool
	charges []front.Charge // what the rate layers charged, for a route's later refusal
	vals    [2]string      // the rate limit header fields' values, in the IETF modes
	// mem holds the bytes of the client's address key, then those of the
	// header values if they fit, each written once and never again, as a
	// string's must be.
	mem [reqMem]byte
}

// reqMem is the room a request has for the bytes of its key and of its
// rate limit header values: enough for an address key and one policy's
// RateLimit field, which is all most requests need, with room to spare
// but for the longest IPv6 keys. It makes a request 512 bytes, a size
// class of the allocator.
const reqMem = 64

// client returns the client's address key, once clientKeyIn has written
// it, and "" before.
func (q *request) client() string { return unsafe.String(&q.mem[0], q.keyLen) }

type requestKey struct{}

// Value returns q for requestKey, and otherwise asks the parent context.
func (q *request) Value(key any) any {
	if key == (requestKey{}) {
		return q
	}
	return q.Context.Value(key)
}

// release gives back everything the request holds, telling an adaptive
// gate how the request went.
func (q *request) release(o adaptive.Outcome) {
	if q.refused || (o == adaptive.Success && q.held.Reports() && q.Context.Err() != nil) {
		o = adaptive.Ignored // refused by a route, or the client left
	}
	q.held.Leave(o)
	if q.slot {
		q.c.slots.Release(q.client())
		q.slot = false
	}
}

// ReleaseCapacity gives back the place r holds in the Middleware's gate
// before its handler returns, so that a long-lived request, such as a
// stream, no longer counts against MaxInFlight once its costly part is
// done. A request whose connection is hijacked (a WebSocket upgrade)
// needs no call: its place is given back at the hijack, when it goes
// through the ResponseWriter the Middleware passed (w.(http.Hijacker) or
// http.ResponseController, as WebSocket libraries do). It is idempotent,
// safe for concurrent use, and does nothing for requests that hold no
// place. The request's per-client count, if any, is kept until the
// handler returns, hijacked or not: MaxInFlightPerClient then caps the
// sockets a client has open at once.
func ReleaseCapacity(r *http.Request) {
	if q, ok := r.Context().Value(requestKey{}).(*request); ok {
		q.held.Leave(adaptive.Success)
	}
}

func (m *Middleware) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	c := m.c
	if q, ok := r.Context().Value(requestKey{}).(*request); ok && q.c == c {
		// An enclosing Middleware of the same core has applied the global
		// layers: apply this route's own policies.
		m.serveRoute(next, w, r, q)
		return
	}
	if c.exempt != nil && c.exempt(r) {
		c.n.Exempt.Add(1)
		next.ServeHTTP(w, r)
		return
	}
	var q *request // what the request holds, if any layer makes it hold anything
	handedOff := false
	// Until the handler has returned, the request is one the service did
	// not serve: a later layer refused it, or the handler panicked.
	outcome := adaptive.Ignored
	nested := c.nested.Load()
	if c.capacity != nil || c.slots != nil || c.timeout > 0 || nested {
		q = &request{Context: r.Context(), c: c}
		defer func() {
			if !handedOff {
				q.release(outcome)
			}
		}()
		// The copy WithContext makes stays on this goroutine's stack: the
		// handler's request lives in q.
		q.req = *r.WithContext(q)
		r = &q.req
	}

	if c.capacity != nil && !c.capacity.Enter(r.Context(), &q.held, c.priorityOf(r)) {
		c.n.ServerBusy.Add(1)
		c.refuse(w, r, "", Denial{Status: http.StatusServiceUnavailable, Reason: ReasonServerBusy, RetryAfter: c.busyRetry})
		return
	}

	if c.timeout > 0 {
		// The deadline bounds the whole request from its admission: the
		// rate layers' limiter calls as well as the handler.
		ctx, cancel := context.WithTimeout(q, c.timeout)
		defer cancel()
		r = r.WithContext(ctx)
	}

	addr := ""
	if len(m.rates) > 0 || c.slots != nil || nested {
		// A route's policy keyed by address needs it, even where m has no
		// rate layer of its own.
		if q != nil {
			addr = c.clientKeyIn(r, q)
		} else {
			addr = c.clientKey(r)
		}
	}
	if q == nil {
		// Nothing to hold: the charges live on this goroutine's stack.
		if m.admit(w, r, addr) {
			c.n.Allowed.Add(1)
			next.ServeHTTP(w, r)
		}
		return
	}
	// The charges stay on this goroutine's stack unless a route may refuse
	// the request later and have to give them back.
	var buf [4]front.Charge
	charges, ok := m.limit(w, r, addr, m.rates, buf[:0])
	if !ok {
		return
	}
	if c.timeout > 0 && r.Context().Err() != nil {
		// The deadline passed, or the client left, while the rate layers
		// ran (limiters slow to answer, or failing under FailOpen): the
		// handler would start with no time left.
		c.admit.Refund(r.Context(), charges)
		if q.Err() == nil {
			c.n.RequestTimeout.Add(1)
			c.refuse(w, r, "", Denial{Status: http.StatusServiceUnavailable, Reason: ReasonRequestTimeout, RetryAfter: c.busyRetry})
		}
		return
	}
	if c.slots != nil {
		if reason := c.slots.Acquire(addr); reason != "" {
			if nested {
				// A route's policies come before per-client concurrency,
				// as they do where the route is served alone.
				if rt := c.routeOf(next, r); rt != nil {
					if charges, ok = m.limit(w, r, addr, rt.rates[len(rt.rates)-rt.own:], charges); !ok {
						return
					}
				}
			}
			c.admit.Refund(r.Context(), charges)
			status := c.inflightStatus
			if reason == ReasonConcurrencyTableFull {
				c.n.ConcurrencyTableFull.Add(1)
				status = http.StatusServiceUnavailable
			} else {
				c.n.ConcurrencyLimited.Add(1)
			}
			c.refuse(w, r, addr, Denial{Status: status, Reason: reason, RetryAfter: c.busyRetry})
			return
		}
		q.slot = true
	}
	q.counted = true
	if nested {
		q.charges = append(make([]front.Charge, 0, len(charges)+2), charges...)
	}

	c.setRateHeaders(w.Header(), charges, q.vals[:0], q.mem[q.keyLen:])
	c.n.Allowed.Add(1)
	if c.timeout > 0 {
		handedOff = true
		c.serveWithTimeout(next, w, r, q)
		return
	}
	if c.capacity == nil {
		next.ServeHTTP(w, r)
		outcome = adaptive.Success
		return
	}
	// The handler writes through q, which sees its status and gives the
	// place back if it hijacks the connection.
	q.rw = w
	next.ServeHTTP(q, r)
	outcome = q.outcome()
}

// priorityOf returns the class of r at the gate: Config.Priority's, or
// limits.PriorityDefault without one.
func (c *core) priorityOf(r *http.Request) limits.Priority {
	if c.priority == nil {
		return limits.PriorityDefault
	}
	return c.priority(r)
}

// admit applies the rate layers to a request that holds nothing else, and
// sets its rate limit headers if they allow it.
func (m *Middleware) admit(w http.ResponseWriter, r *http.Request, addr string) bool {
	var buf [4]front.Charge
	charges, ok := m.limit(w, r, addr, m.rates, buf[:0])
	if ok {
		m.c.setRateHeaders(w.Header(), charges, nil, nil)
	}
	return ok
}

// serveRoute applies a route Middleware's own policies to a request that
// an enclosing Middleware of the same core let through, and refuses it,
// giving back everything it was charged, if one of them refuses.
func (m *Middleware) serveRoute(next http.Handler, w http.ResponseWriter, r *http.Request, q *request) {
	c := m.c
	charges, ok := m.limit(w, r, q.client(), m.rates[len(m.rates)-m.own:], q.charges)
	if !ok {
		q.refused = true
		q.charges = q.charges[:0] // given back
		if q.counted {
			c.n.Allowed.Add(^uint64(0)) // refused after all
			q.counted = false
		}
		return
	}
	q.charges = charges
	c.setRateHeaders(w.Header(), charges, nil, nil)
	next.ServeHTTP(w, r)
}

// limit applies rate layers to a request from the client address key addr,
// appending what each charges to charges, which holds what earlier layers
// charged. If one refuses, it gives back everything charges holds, writes
// the refusal and returns false.
func (m *Middleware) limit(w http.ResponseWriter, r *http.Request, addr string, layers []*rateLayer, charges []front.Charge) ([]front.Charge, bool) {
	c := m.c
	charges, ref := front.Admit(r.Context(), &c.admit, r, addr, layers, charges)
	if ref == nil {
		return charges, true
	}
	den := Denial{Reason: ref.Reason, Policy: ref.Rate.Name, Err: ref.Err}
	switch ref.Reason {
	case ReasonLimiterError:
		den.Status, den.RetryAfter = http.StatusServiceUnavailable, c.busyRetry
	case ReasonRateLimited:
		den.Status, den.RetryAfter = http.StatusTooManyRequests, max(ceilSecond(ref.Dec.RetryAfter), time.Second)
	case ReasonTableFull:
		den.Status, den.RetryAfter = http.StatusServiceUnavailable, c.busyRetry
	case ReasonCostAboveBurst:
		den.Status = http.StatusTooManyRequests
	case ReasonInvalidCost:
		den.Status = http.StatusInternalServerError
	}
	if ref.Reason != ReasonLimiterError { // no limiter decided
		refused := ref.Dec // a copy for the Denial, made only on this path
		den.Decision = &refused
	}
	c.setRefusalHeaders(w.Header(), ref.Rate, ref.Dec, ref.Reason)
	c.refuse(w, r, ref.Key, den)
	return nil, false
}

// logLimiter logs a limiter's failure or a failed refund, for Admission.
func (c *core) logLimiter(ctx context.Context, req any, what, key string, err error) {
	if r, ok := req.(*http.Request); ok {
		c.log(r, "httplimit: "+what, ReasonLimiterError, key, err)
		return
	}
	if c.logger != nil {
		c.logger.LogAttrs(ctx, slog.LevelError, "httplimit: "+what, slog.String("reason", ReasonLimiterError),
			slog.String("key_hash", front.KeyHash(key)), slog.String("error", err.Error()))
	}
}

// ceilSecond rounds d up to a whole second; a negative d is 0.
func ceilSecond(d time.Duration) time.Duration {
	return time.Duration(seconds(d)) * time.Second
}
