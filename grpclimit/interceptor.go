package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/internal/front"
)

// Reasons of refusals, as carried in the ErrorInfo detail of refusals
// (upper-cased there, as ReasonOf reads them back), logged and counted.
const (
	ReasonRateLimited          = "rate_limited"           // ResourceExhausted: the client's bucket is empty
	ReasonServerBusy           = "server_busy"            // Unavailable: the gate is full
	ReasonRequestTimeout       = "request_timeout"        // DeadlineExceeded: the unary call ran past Config.Timeout
	ReasonLimiterError         = "limiter_error"          // Unavailable: a limiter failed or did not answer in time, and the policy is FailClosed
	ReasonTableFull            = "table_full"             // Unavailable: the limiter tracks as many clients as it may
	ReasonCostAboveBurst       = "cost_above_burst"       // ResourceExhausted, no retry: the call costs more than the client's whole burst
	ReasonInvalidCost          = "invalid_cost"           // Internal: the call's cost is negative
	ReasonConcurrencyLimited   = "concurrency_limited"    // ResourceExhausted: the client has too many calls or streams in progress
	ReasonConcurrencyTableFull = "concurrency_table_full" // Unavailable: too many clients have calls or streams in progress
)

// Interceptor limits the calls that pass through its unary and stream
// server interceptors, in layers applied in this order, each optional:
//
//  1. Exemptions: methods picked by Config.Exempt (the health service by
//     default) bypass every layer.
//  2. Capacity: a limits.Gate caps the calls in progress in the process
//     (Unavailable server_busy), at a fixed number or one that package
//     adaptive finds from latency (Config.Adaptive), and a deadline bounds
//     each unary call (DeadlineExceeded request_timeout).
//  3. Rate: a bucket per client address, then one per caller key if
//     configured (ResourceExhausted rate_limited).
//  4. Concurrency: caps on the unary calls and on the streams one client
//     address has in progress (ResourceExhausted concurrency_limited).
//
// A call refused by a layer costs nothing in any other: the buckets an
// earlier layer charged are given back, so a client is never charged for
// service it did not get, and the handler is never called. The address
// bucket, which a client cannot choose, is charged before the caller
// key's, so that a caller key gets a bucket only for calls its address
// allowed. Every wait is bounded: the gate's queue by QueueWait, each
// limiter call by LimiterTimeout, the unary handler by Timeout.
//
// Every refusal is counted (see Stats), may be logged, and is answered
// with a status error whose details say why (see the package
// documentation): an ErrorInfo with the reason, a RetryInfo with the exact
// delay when waiting helps, and the grpc-retry-pushback-ms trailer that
// gRPC's retry policy obeys.
//
// An Interceptor is safe for concurrent use. Create one with New; the zero
// value is not usable.
type Interceptor struct {
	exempt    func(string) bool
	capacity  *front.Capacity // nil: no gate
	priority  func(context.Context, string) limits.Priority
	timeout   time.Duration
	busyRetry time.Duration

	id        front.Identity
	forwarded string // the forwarding metadata key, lower case

	rates    []*rateLayer
	hasAddr  bool          // rates starts with an address bucket
	limTime  time.Duration // the bound on each limiter call
	calls    *front.Slots  // unary calls in progress per client
	streams  *front.Slots  // streams open per client
	messages bool

	logger *slog.Logger
	n      front.Counters
	admit  front.Admission

	mu     sync.Mutex             // held by Method
	routes atomic.Pointer[routes] // nil until Method is called
	other  front.Counters         // the calls of names Method did not register

	// busy holds the refusals that depend on nothing but their reason.
	busy map[string]refusal
}

// rateLayer is one rate policy as the interceptors apply it.
type rateLayer = front.Layer[call]

// call is what the rate layers see of a call: its context, for the caller
// key and the cost, and its method.
type call struct {
	ctx    context.Context
	method string
}

// Stats is a snapshot of an Interceptor's counters, with the fields, and
// the JSON names, of httplimit.Stats, so that one collector reads both. It
// marshals to JSON, so it can be published with expvar:
//
//	expvar.Publish("grpclimit", expvar.Func(func() any { return l.Stats() }))
type Stats struct {
	// Exempt counts calls that bypassed every layer.
	Exempt uint64 `json:"exempt"`
	// Allowed counts calls handed to their handler, unary or stream.
	Allowed uint64 `json:"allowed"`
	// RateLimited counts calls and messages refused with reason
	// rate_limited.
	RateLimited uint64 `json:"rate_limited"`
	// ServerBusy counts calls refused because the gate was full.
	ServerBusy uint64 `json:"server_busy"`
	// RequestTimeout counts unary calls that ran past the deadline: allowed
	// calls whose handler was still running, and those whose deadline
	// passed in the rate layers, before their handler started (not counted
	// in Allowed).
	RequestTimeout uint64 `json:"request_timeout"`
	// LimiterError counts limiter errors, whether the call was then
	// refused (FailClosed) or served (FailOpen).
	LimiterError uint64 `json:"limiter_error"`
	// TableFull counts calls refused because a limiter's table of clients
	// was full.
	TableFull uint64 `json:"table_full"`
	// CostAboveBurst counts calls refused because they cost more than a
	// bucket holds, and InvalidCost those whose cost was negative.
	CostAboveBurst uint64 `json:"cost_above_burst"`
	InvalidCost    uint64 `json:"invalid_cost"`
	// ConcurrencyLimited counts calls and streams refused because their
	// client had too many in progress.
	ConcurrencyLimited uint64 `json:"concurrency_limited"`
	// ConcurrencyTableFull counts calls and streams refused because too
	// many clients had some in progress.
	ConcurrencyTableFull uint64 `json:"concurrency_table_full"`
	// Gate holds the gate's counters, if Config.MaxInFlight or
	// Config.Gate is set.
	Gate *limits.GateStats `json:"gate,omitempty"`
	// SharedGate says the gate is a shared one (Config.Gate or
	// Config.Controller): Gate and Adaptive are then the counters of the
	// whole gate, which other front ends and direct callers use too, not
	// of this Interceptor's calls, which the other fields count.
	SharedGate bool `json:"shared_gate,omitempty"`
	// Adaptive holds the adaptive limit's state and recent history, if
	// Config.Adaptive is set.
	Adaptive *adaptive.Stats `json:"adaptive,omitempty"`
	// Policies holds the counts of each rate policy, in the order they
	// apply: Config's, then those of Method, in the order registered.
	Policies []PolicyStats `json:"policies,omitempty"`
	// Methods holds the counts of the calls of each name registered with
	// Method, in the order registered, then of all others (OtherMethods);
	// nil if Method was never called. Its LimiterError counts refusals
	// only, not the failures FailOpen served.
	Methods []MethodStats `json:"methods,omitempty"`
}

// PolicyStats counts the outcomes of one rate policy, calls and messages
// together. A call allowed by a policy and refused by a later layer counts
// as allowed here.
type PolicyStats struct {
	// Name is the policy's name, as in refusals' details.
	Name string `json:"name"`
	// Allowed counts the calls and messages the policy allowed and
	// charged.
	Allowed uint64 `json:"allowed"`
	// RateLimited, TableFull, CostAboveBurst and InvalidCost count the
	// calls and messages it refused, by reason.
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

// New returns an Interceptor configured by cfg, or an error if cfg holds a
// value that cannot be honoured: a negative count or duration, an invalid
// Rate, prefix lengths out of range, an unknown ForwardedHeader, or a
// CallerKey or LimitMessages with no limit to apply. The error names the
// field at fault, and with several such values always the same one.
func New(cfg Config) (*Interceptor, error) {
	it := &Interceptor{
		exempt:    cfg.Exempt,
		timeout:   cfg.Timeout,
		busyRetry: cfg.BusyRetryAfter,
		messages:  cfg.LimitMessages,
		logger:    cfg.Logger,
		priority:  cfg.Priority,
	}
	if it.exempt == nil {
		it.exempt = DefaultExempt
	}
	if it.busyRetry == 0 {
		it.busyRetry = time.Second
	}
	var key func(call) string
	if cfg.CallerKey != nil {
		key = func(c call) string { return cfg.CallerKey(c.ctx) }
	}
	var cost func(call) int
	if cfg.Cost != nil {
		cost = func(c call) int { return cfg.Cost(c.ctx, c.method) }
	}
	it.forwarded = strings.ToLower(cfg.ForwardedHeader)
	b, err := front.Setup(front.Common{
		MaxInFlight: cfg.MaxInFlight, QueueWait: cfg.QueueWait, QueueAdapt: cfg.QueueAdapt, Adaptive: cfg.Adaptive,
		Gate: cfg.Gate, Controller: cfg.Controller, Timeout: cfg.Timeout, BusyRetryAfter: cfg.BusyRetryAfter,
		Rate: cfg.Rate, Burst: cfg.Burst, MaxKeys: cfg.MaxKeys, Limiter: cfg.Limiter, LimiterTimeout: cfg.LimiterTimeout,
		CallerKeyed: cfg.CallerKey != nil, AddressMultiplier: cfg.AddressMultiplier, CallerLimiter: cfg.CallerLimiter,
		TrustedProxies: cfg.TrustedProxies, Forwarded: it.forwarded == "forwarded", IPv4Prefix: cfg.IPv4Prefix, IPv6Prefix: cfg.IPv6Prefix,
		MaxInFlightPerClient: cfg.MaxInFlightPerClient, PolicyName: cfg.PolicyName,
	}, key, cost, front.Field{Name: "MaxStreamsPerClient", Value: int64(cfg.MaxStreamsPerClient)})
	switch {
	case err != nil:
		return nil, fmt.Errorf("grpclimit: %w", err)
	case it.forwarded != "" && !slices.Contains(forwardedKeys, it.forwarded):
		return nil, fmt.Errorf("grpclimit: ForwardedHeader must be x-forwarded-for, forwarded or x-real-ip, got %q", cfg.ForwardedHeader)
	case cfg.OnLimiterError > FailOpen:
		return nil, fmt.Errorf("grpclimit: OnLimiterError must be FailClosed or FailOpen, got %d", cfg.OnLimiterError)
	case cfg.LimitMessages && len(b.Rates) == 0:
		return nil, errors.New("grpclimit: LimitMessages needs Rate or Limiter")
	}
	if it.forwarded == "" {
		it.forwarded = forwardedKeys[0]
	}
	it.id, it.capacity, it.calls, it.rates, it.hasAddr, it.limTime = b.Identity, b.Capacity, b.Slots, b.Rates, b.HasAddr, b.LimiterTimeout
	it.admit = front.Admission{FailOpen: cfg.OnLimiterError == FailOpen, Counts: &it.n.Rates, OnError: it.logLimiter}
	if cfg.MaxStreamsPerClient > 0 {
		it.streams = front.NewSlots(cfg.MaxStreamsPerClient, front.Or(cfg.MaxKeys, DefaultMaxKeys))
	}
	it.busy = make(map[string]refusal)
	for _, r := range []string{ReasonServerBusy, ReasonRequestTimeout, ReasonConcurrencyLimited, ReasonConcurrencyTableFull} {
		it.busy[r] = it.newRefusal(r, nil, limits.Decision{})
	}
	return it, nil
}

// ServerOptions returns the options that install both of the
// Interceptor's interceptors in a grpc.Server, chained ahead of any
// installed by later options. Put a recovery interceptor, if any, ahead of
// them, and authentication and logging after them, so that refused calls
// cost as little as possible.
func (it *Interceptor) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(it.Unary), grpc.ChainStreamInterceptor(it.Stream)}
}

// Stats returns a snapshot of the Interceptor's counters. Each is read
// atomically, but not all at one instant.
func (it *Interceptor) Stats() Stats {
	t := it.n.Load()
	s := Stats{
		Exempt:               t.Exempt,
		Allowed:              t.Allowed,
		RateLimited:          t.RateLimited,
		ServerBusy:           t.ServerBusy,
		RequestTimeout:       t.RequestTimeout,
		LimiterError:         t.LimiterError,
		TableFull:            t.TableFull,
		CostAboveBurst:       t.CostAboveBurst,
		InvalidCost:          t.InvalidCost,
		ConcurrencyLimited:   t.ConcurrencyLimited,
		ConcurrencyTableFull: t.ConcurrencyTableFull,
	}
	s.Gate, s.Adaptive = it.capacity.Stats()
	s.SharedGate = it.capacity != nil && it.capacity.Shared
	for _, p := range front.PolicyTotalsOf(it.policies()) {
		s.Policies = append(s.Policies, PolicyStats(p))
	}
	s.Methods = it.methodStats()
	return s
}

// ClientKey returns the key of the address bucket of the call of ctx, a
// handler's context: "a:" and the client's address prefix, such as
// "a:192.0.2.7/32" or "a:2001:db8:1:2::/64" (the address a trusted proxy
// forwarded, or the nearest trusted hop where a forwarded entry is no
// address; "a:invalid" if the peer's own address cannot be parsed). Use
// it to log a client, to charge a limiter of one's own by client, or to
// Reset it.
//
// The keys limiters see: "a:"+prefix for the address bucket; "c:" and 32
// hex digits of the SHA-256 of the caller key for the caller key's
// bucket; "n:" and the address key for the bucket calls without a caller
// key share.
func (it *Interceptor) ClientKey(ctx context.Context) string {
	return it.clientKey(ctx)
}

// Reset forgets key's state in every limiter of the Interceptor that can
// forget (a local GCRA; a limiter with a Reset(ctx, key) error method,
// such as the Redis one), so that the client finds its full burst again:
// to unblock an address by hand, say, with the key ClientKey gives. It
// returns the first error of a limiter that failed, after trying them all.
func (it *Interceptor) Reset(ctx context.Context, key string) error {
	if err := front.Reset(ctx, it.policies(), key); err != nil {
		return fmt.Errorf("grpclimit: %w", err)
	}
	return nil
}

// policies returns the layers of every policy: Config's, then Method's.
func (it *Interceptor) policies() []*rateLayer {
	rs := it.routes.Load()
	if rs == nil {
		return it.rates
	}
	out := append([]*rateLayer(nil), it.rates...)
	for _, r := range rs.order {
		out = append(out, r.own...)
	}
	return out
}

// admitCall applies Config's rate layers to a call, then those of its
// route rt, if any, all or nothing, under ctx, appending what they charge
// to buf.
func (it *Interceptor) admitCall(ctx context.Context, c call, addr string, rt *route, buf []front.Charge) ([]front.Charge, *front.Refusal) {
	charges, ref := front.Admit(ctx, &it.admit, c, addr, it.rates, buf)
	if ref != nil || rt == nil || len(rt.layers) == 0 {
		return charges, ref
	}
	return front.Admit(ctx, &it.admit, c, addr, rt.layers, charges)
}

// hold is what a call holds until its handler returns: its place in the
// gate and its count in a per-client table. It is also the context handed
// to the handler, so that ReleaseCapacity can find it.
type hold struct {
	context.Context
	held   front.Held // the call's place in the gate
	slots  *front.Slots
	client string // the address key counted in slots
}

type holdKey struct{}

// Value returns q for holdKey, and otherwise asks the parent context.
func (q *hold) Value(key any) any {
	if key == (holdKey{}) {
		return q
	}
	return q.Context.Value(key)
}

// release gives back everything the call holds, telling an adaptive gate
// how the call went. It is called once, when the handler has returned.
func (q *hold) release(o adaptive.Outcome) {
	q.held.Leave(o)
	if q.slots != nil {
		q.slots.Release(q.client)
		q.slots = nil
	}
}

// ReleaseCapacity gives back the place in the gate that the call of ctx, a
// handler's context, holds, before the handler returns: a long unary
// call, such as a long poll, or a stream that is done with its costly
// set-up before it first sends, then no longer counts against
// MaxInFlight. It is idempotent, safe for concurrent use, and does nothing
// for calls that hold no place. The call's per-client count, if any, is
// kept until the handler returns.
func ReleaseCapacity(ctx context.Context) {
	if q, ok := ctx.Value(holdKey{}).(*hold); ok {
		q.held.Leave(adaptive.Success)
	}
}

// clientKey returns the key of the client's address bucket: "a:" and its
// prefix, or "a:invalid" for a call whose peer address cannot be parsed.
// The address of a TCP peer is taken as it is, not formatted and parsed.
func (it *Interceptor) clientKey(ctx context.Context) string {
	fwd := func() []string { return metadata.ValueFromIncomingContext(ctx, it.forwarded) }
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return it.id.Key("", fwd)
	}
	if a, ok := p.Addr.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(a.IP) // the zero Addr if invalid: "a:invalid"
		return it.id.KeyOf(ip, fwd)
	}
	return it.id.Key(p.Addr.String(), fwd)
}

// enter takes a place in the gate for the call of ctx, of method, into h,
// in the class Config.Priority gives it.
func (it *Interceptor) enter(ctx context.Context, method string, h *front.Held) bool {
	p := limits.PriorityDefault
	if it.priority != nil {
		p = it.priority(ctx, method)
	}
	ok := it.capacity.Enter(ctx, h, p)
	if !ok {
		it.n.ServerBusy.Add(1)
	}
	return ok
}

// outcome is how a call whose handler returned err went, for an adaptive
// gate, ctx being the call's context: a call that outlived the client's
// deadline, or ended with Unavailable or DeadlineExceeded, signals
// overload; one the client cancelled says nothing of the service's
// capacity.
func outcome(ctx context.Context, err error) adaptive.Outcome {
	switch ctx.Err() {
	case nil:
	case context.DeadlineExceeded:
		return adaptive.Dropped
	default:
		return adaptive.Ignored
	}
	code := status.Code(err)
	if code == codes.Unknown {
		code = status.FromContextError(err).Code() // a bare context error
	}
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded:
		return adaptive.Dropped
	case codes.Canceled:
		return adaptive.Ignored
	}
	return adaptive.Success
}

// count counts an outcome of a call of route rt ("" for allowed,
// "exempt", or a refusal's reason) in the Interceptor's counters and, once
// Method has been called, in those of its route.
func (it *Interceptor) count(rt *route, outcome string) {
	it.n.Count(outcome)
	if n := it.counters(rt); n != nil {
		n.Count(outcome)
	}
}

// acquire counts the client addr in slots, or counts and returns the
// refusal's reason.
func (it *Interceptor) acquire(slots *front.Slots, addr string) string {
	reason := slots.Acquire(addr)
	switch reason {
	case ReasonConcurrencyLimited:
		it.n.ConcurrencyLimited.Add(1)
	case ReasonConcurrencyTableFull:
		it.n.ConcurrencyTableFull.Add(1)
	}
	return reason
}

// Unary is the unary server interceptor: install it with
// grpc.ChainUnaryInterceptor(it.Unary), or with ServerOptions. It calls
// handler only for calls every layer allows, and returns a refusal's
// status error otherwise.
func (it *Interceptor) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	rt := it.route(info.FullMethod)
	if it.exempt(info.FullMethod) {
		it.count(rt, "exempt")
		return handler(ctx, req)
	}
	var q *hold // what the call holds, if any layer makes it hold anything
	handedOff := false
	// Until the handler has returned, the call is one the service did not
	// serve: a later layer refused it, or the handler panicked.
	result := adaptive.Ignored
	if it.capacity != nil || it.calls != nil || it.timeout > 0 {
		q = &hold{Context: ctx}
		defer func() {
			if !handedOff {
				q.release(result)
			}
		}()
		ctx = q
	}
	tr := unaryTrailer{ctx}
	if it.capacity != nil && !it.enter(ctx, info.FullMethod, &q.held) {
		return nil, it.refuse(ctx, tr, info.FullMethod, "", it.busy[ReasonServerBusy])
	}
	// The deadline bounds the whole call from its admission: the rate
	// layers' limiter calls as well as the handler.
	dctx := ctx
	if it.timeout > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(q, it.timeout)
		defer cancel()
	}
	addr := ""
	if len(it.rates) > 0 || it.calls != nil || rt != nil && len(rt.layers) > 0 {
		addr = it.clientKey(ctx)
	}
	var buf [3]front.Charge
	charges, ref := it.admitCall(dctx, call{ctx, info.FullMethod}, addr, rt, buf[:0])
	if ref != nil {
		return nil, it.refuseRate(ctx, tr, info.FullMethod, ref)
	}
	if it.timeout > 0 && dctx.Err() != nil {
		// The deadline passed, or the client left, while the rate layers
		// ran (limiters slow to answer, or failing under FailOpen): the
		// handler would start with no time left.
		it.admit.Refund(ctx, charges)
		return nil, it.timedOut(q, info)
	}
	if it.calls != nil {
		if reason := it.acquire(it.calls, addr); reason != "" {
			it.admit.Refund(ctx, charges)
			return nil, it.refuse(ctx, tr, info.FullMethod, addr, it.busy[reason])
		}
		q.slots, q.client = it.calls, addr
	}
	it.count(rt, "")
	if it.timeout > 0 {
		handedOff = true
		return it.unaryWithTimeout(q, dctx, req, info, handler)
	}
	resp, err := handler(ctx, req)
	if q != nil && q.held.Reports() {
		result = outcome(q.Context, err)
	}
	return resp, err
}

// unaryWithTimeout runs handler in its own goroutine under ctx, q with the
// deadline set when the call was admitted.
// If it returns in time, its answer is the call's; if the deadline passes
// first, or the handler gives up at it with a deadline error, the client
// gets request_timeout and the handler's context is cancelled. Either way q, the call's place in the gate and its
// per-client count, is released only when the handler has returned: until
// then it still uses the capacity they stand for. A panic in time is
// raised again on the caller's goroutine; one after the deadline, when
// nobody is left to raise it to, is logged.
func (it *Interceptor) unaryWithTimeout(q *hold, ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	type result struct {
		resp     any
		err      error
		panicked bool
		p        any
	}
	done := make(chan result, 1)
	abandoned := make(chan struct{})
	go func() {
		var r result
		defer func() {
			switch {
			case ctx.Err() != nil && q.Context.Err() == nil:
				q.release(adaptive.Dropped) // past the deadline
			case r.panicked:
				q.release(adaptive.Ignored)
			default:
				q.release(outcome(q.Context, r.err))
			}
			done <- r
		}()
		defer func() {
			if p := recover(); p != nil {
				r.panicked, r.p = true, p
				select {
				case <-abandoned:
					if it.logger != nil {
						it.logger.LogAttrs(q, slog.LevelError, "grpclimit: handler panicked after its deadline",
							slog.String("method", info.FullMethod), slog.Any("panic", p))
					}
				default:
				}
			}
		}()
		r.resp, r.err = handler(ctx, req)
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		close(abandoned)
		// The answer may have come at the same time: prefer it.
		select {
		case r = <-done:
		default:
			return nil, it.timedOut(q, info)
		}
	}
	if r.panicked {
		panic(r.p)
	}
	if r.err != nil && ctx.Err() != nil && (errors.Is(r.err, context.DeadlineExceeded) || status.Code(r.err) == codes.DeadlineExceeded) {
		return nil, it.timedOut(q, info) // the handler gave up at the deadline
	}
	return r.resp, r.err
}

// timedOut answers a unary call whose deadline passed: request_timeout,
// counted, or, if the client gave up first, the client's own reason.
func (it *Interceptor) timedOut(q *hold, info *grpc.UnaryServerInfo) error {
	if err := q.Context.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	it.n.RequestTimeout.Add(1)
	return it.refuse(q, unaryTrailer{q}, info.FullMethod, "", it.busy[ReasonRequestTimeout])
}

// logLimiter logs a limiter's failure or a failed refund, for Admission.
func (it *Interceptor) logLimiter(ctx context.Context, req any, what, key string, err error) {
	method := ""
	if c, ok := req.(call); ok {
		method = c.method
	}
	it.log(ctx, "grpclimit: "+what, ReasonLimiterError, method, key, err)
}

// log records a refusal or a limiter error, if a Logger is set. The key is
// logged only as a short hash.
func (it *Interceptor) log(ctx context.Context, msg, reason, method, key string, err error) {
	if it.logger == nil {
		return
	}
	attrs := make([]slog.Attr, 0, 4)
	attrs = append(attrs, slog.String("reason", reason))
	if method != "" {
		attrs = append(attrs, slog.String("method", method))
	}
	if key != "" {
		attrs = append(attrs, slog.String("key_hash", front.KeyHash(key)))
	}
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelError
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	it.logger.LogAttrs(ctx, level, msg, attrs...)
}
