package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/admit"
)

// Config configures an Interceptor: the layers, in Limits, and what only a
// function of a call can say. The zero Config limits nothing, and exempts
// the standard health service (see Exempt).
type Config struct {
	// Limits configures the layers: the gate, the rate policies and their
	// routes, per-client concurrency (see admit.Config, where every field
	// is described). The route of a call is its full method
	// ("/package.Service/Method"): a route pattern names a method, or a
	// service ("/package.Service/"); anything else is an error. A caller
	// key or a policy's key names an incoming metadata key
	// ("authorization"), or a function of Keys. A stream is charged once
	// when it opens, and, with LimitMessages, for each message after its
	// first; it holds its place in the gate only while it is set up (see
	// Interceptor.Stream), and MaxStreamsPerClient caps the streams a
	// client has open.
	Limits admit.Config
	// Keys, if set, are functions that read fields of a call under names
	// of their own, for Limits.CallerKey and the policies' Key: a user
	// from a verified token, say. A name here hides the metadata key of
	// that name.
	Keys map[string]func(ctx context.Context) string
	// Exempt, if set, picks the methods whose calls bypass every layer, by
	// full method name, in addition to the routes of Limits.Exempt. nil
	// exempts the standard health service (grpc.health.v1.Health), whose
	// probes, refused under load, would get a busy but healthy process
	// restarted; func(string) bool { return false } exempts nothing.
	Exempt func(fullMethod string) bool
	// Priority, if set, returns the class at the gate of a call of the
	// method named (see MetadataPriority, for a criticality that trusted
	// callers send), as httplimit.Config.Priority does for a request; nil
	// puts every call in limits.PriorityDefault.
	Priority func(ctx context.Context, fullMethod string) limits.Priority
	// Cost, if set, returns what a call of the method named costs in the
	// rate policies, as httplimit.Config.Cost does for a request: a cost
	// above a bucket's burst is refused with reason cost_above_burst
	// (ResourceExhausted, with no retry delay and a pushback that stops
	// gRPC's retries: waiting cannot help), a negative one with
	// invalid_cost (Internal).
	Cost func(ctx context.Context, fullMethod string) int
	// LimitMessages charges each message a stream receives after its
	// first to the rate policies as a call, at the stream's cost: a
	// message refused makes the handler's RecvMsg return the refusal's
	// status error, which the handler should return. The first message
	// is paid for by the stream's own charge, so a server-streaming call
	// costs as much as a unary one.
	LimitMessages bool
}

// Interceptor limits the calls that pass through its unary and stream
// server interceptors, with the layers of an admit.Engine applied in this
// order, each optional:
//
//  1. Exemptions: methods picked by Config.Exempt (the health service by
//     default) and the routes of Limits.Exempt bypass every layer.
//  2. Capacity: a limits.Gate caps the calls in progress in the process
//     (Unavailable server_busy), at a fixed number or one that package
//     adaptive finds from latency, and a deadline bounds each unary call
//     (DeadlineExceeded request_timeout).
//  3. Rate: a bucket per client address, then one per caller key if
//     configured (ResourceExhausted rate_limited), then the policies of
//     the call's method and service.
//  4. Concurrency: caps on the unary calls and on the streams one client
//     address has in progress (ResourceExhausted concurrency_limited).
//
// A call refused by a layer costs nothing in any other (see admit.Engine
// for the whole contract), and its handler is never called. Every refusal
// is counted (Stats), may be logged, and is answered with a status error
// whose details say why (see the package documentation).
//
// An Interceptor is safe for concurrent use. Create one with New; the zero
// value is not usable.
type Interceptor struct {
	e        *admit.Engine
	keys     map[string]func(context.Context) string
	exempt   func(string) bool
	priority func(context.Context, string) limits.Priority
	cost     func(context.Context, string) int
	messages bool
	logger   *slog.Logger
	busy     busyCache
}

// healthPrefix is the prefix of the health service's full methods.
const healthPrefix = "/grpc.health.v1.Health/"

// New returns an Interceptor configured by cfg, or an error naming the
// first field of cfg that cannot be honoured (see admit.New), or a route
// pattern that is not a method or a service.
func New(cfg Config) (*Interceptor, error) {
	it := &Interceptor{
		keys: cfg.Keys, exempt: cfg.Exempt, priority: cfg.Priority, cost: cfg.Cost,
		messages: cfg.LimitMessages, logger: cfg.Limits.Logger,
	}
	if it.exempt == nil {
		it.exempt = func(m string) bool { return strings.HasPrefix(m, healthPrefix) }
	}
	if err := checkRoutes(&cfg.Limits, cfg.Keys); err != nil {
		return nil, fmt.Errorf("grpclimit: Limits: %w", err)
	}
	var err error
	if it.e, err = admit.New(cfg.Limits); err != nil {
		return nil, fmt.Errorf("grpclimit: Limits: %w", err)
	}
	if l := &cfg.Limits; cfg.LimitMessages && l.Rate == (limits.Limit{}) && l.Limiter == "" && len(l.Policies) == 0 {
		return nil, errors.New("grpclimit: LimitMessages needs a rate policy (Limits.Rate, Limits.Limiter or Limits.Policies)")
	}
	return it, nil
}

// checkRoutes returns an error naming a route pattern of c that no gRPC
// method can match: a pattern must be a full method name
// ("/package.Service/Method") or a service's prefix ("/package.Service/"),
// whose service is dot-separated identifiers and method an identifier;
// or naming a field that keys cannot honour (see admit.Config.CheckKeys).
func checkRoutes(c *admit.Config, keys map[string]func(context.Context) string) error {
	if err := c.CheckKeys(slices.Collect(maps.Keys(keys))); err != nil {
		return err
	}
	check := func(field, s string) error {
		svc, m, ok := strings.Cut(strings.TrimPrefix(s, "/"), "/")
		if !strings.HasPrefix(s, "/") || !ok || !dotted(svc) || m != "" && !ident(m) {
			return fmt.Errorf("%s: %q is neither a method (/package.Service/Method) nor a service (/package.Service/)", field, s)
		}
		return nil
	}
	for i, p := range c.Policies {
		for j, s := range p.Routes {
			if err := check(fmt.Sprintf("Policies[%d] (%q).Routes[%d]", i, p.Name, j), s); err != nil {
				return err
			}
		}
	}
	for i, s := range c.Exempt {
		if err := check(fmt.Sprintf("Exempt[%d]", i), s); err != nil {
			return err
		}
	}
	return nil
}

// dotted reports whether s is identifiers separated by dots.
func dotted(s string) bool {
	for part := range strings.SplitSeq(s, ".") {
		if !ident(part) {
			return false
		}
	}
	return true
}

// ident reports whether s is an identifier: a letter or underscore, then
// letters, digits and underscores.
func ident(s string) bool {
	for i, c := range []byte(s) {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

// ServerOptions returns the options that install both of the
// Interceptor's interceptors in a grpc.Server, chained ahead of any
// installed by later options. Put a recovery interceptor, if any, ahead of
// them, and authentication and logging after them, so that refused calls
// cost as little as possible.
func (it *Interceptor) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(it.Unary), grpc.ChainStreamInterceptor(it.Stream)}
}

// Stats returns a snapshot of the Interceptor's counters (see
// admit.Stats), with Protocol "grpc": a call and a stream's message each
// count as a request, and the routes are the methods and services of the
// policies.
func (it *Interceptor) Stats() admit.Stats {
	s := it.e.Stats()
	s.Protocol = "grpc"
	return s
}

// Engine returns the engine that applies the Interceptor's layers: to
// share its gate (Engine.Gate), say.
func (it *Interceptor) Engine() *admit.Engine { return it.e }

// Update replaces the Interceptor's layers' configuration while it
// serves, keeping every key's state and every counter, as
// admit.Engine.Update does, or returns an error naming what cannot be
// honoured (a route pattern that is not a method or a service, too) and
// changes nothing. The functions of Config stay as New set them.
func (it *Interceptor) Update(limits admit.Config) error {
	if err := checkRoutes(&limits, it.keys); err != nil {
		return fmt.Errorf("grpclimit: Limits: %w", err)
	}
	if err := it.e.Update(limits); err != nil {
		return fmt.Errorf("grpclimit: Limits: %w", err)
	}
	return nil
}

// ClientKey returns the key of the address bucket of the call of ctx, a
// handler's context (see admit.Engine.ClientKey): "a:" and the client's
// address prefix, such as "a:192.0.2.7/32". Use it to log a client, or to
// Reset it.
func (it *Interceptor) ClientKey(ctx context.Context) string {
	var r admit.Request
	setPeer(ctx, &r)
	r.Fields = &hold{Context: ctx, it: it}
	return it.e.ClientKey(&r)
}

// Reset forgets key's state in every limiter of the Interceptor that can
// forget, so that the client finds its full burst again (see
// admit.Engine.Reset).
func (it *Interceptor) Reset(ctx context.Context, key string) error {
	return it.e.Reset(ctx, key)
}

// hold is what a call holds until its handler returns: its admission. It
// is also the context handed to the handler, so that ReleaseCapacity can
// find it, and the call's fields as the engine reads them.
type hold struct {
	context.Context
	t  admit.Ticket
	it *Interceptor
}

type holdKey struct{}

// Value returns q for holdKey, and otherwise asks the parent context.
func (q *hold) Value(key any) any {
	if key == (holdKey{}) {
		return q
	}
	return q.Context.Value(key)
}

// Field returns the call's field name, for the engine: a function of
// Keys, or the first value of the incoming metadata key.
func (q *hold) Field(name string) string {
	if fn := q.it.keys[name]; fn != nil {
		return fn(q.Context)
	}
	if v := metadata.ValueFromIncomingContext(q.Context, strings.ToLower(name)); len(v) > 0 {
		return v[0]
	}
	return ""
}

// FieldValues returns every value of the incoming metadata key name.
func (q *hold) FieldValues(name string) []string {
	return metadata.ValueFromIncomingContext(q.Context, strings.ToLower(name))
}

// ReleaseCapacity gives back the place in the gate that the call of ctx, a
// handler's context, holds, before the handler returns: a long unary
// call, such as a long poll, or a stream that is done with its costly
// set-up before it first sends, then no longer counts against the gate. It
// is idempotent, safe for concurrent use, and does nothing for calls that
// hold no place. The call's per-client count, if any, is kept until the
// handler returns.
func ReleaseCapacity(ctx context.Context) {
	if q, ok := ctx.Value(holdKey{}).(*hold); ok {
		q.t.Leave(adaptive.Success)
	}
}

// setPeer sets the peer of r from the call of ctx. The address of a TCP
// peer is taken as it is, not formatted and parsed.
func setPeer(ctx context.Context, r *admit.Request) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return
	}
	if a, ok := p.Addr.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			r.PeerAddr = ip
			return
		}
	}
	r.Peer = p.Addr.String()
}

// request returns the engine's description of a call of method, whose
// fields q reads.
func (it *Interceptor) request(ctx context.Context, method string, q *hold) admit.Request {
	r := admit.Request{Route: method, Fields: q, Exempt: it.exempt(method)}
	if r.Exempt {
		return r
	}
	setPeer(ctx, &r)
	if it.cost != nil {
		r.Cost = it.cost(ctx, method)
	}
	if it.priority != nil {
		r.Priority = it.priority(ctx, method)
	}
	return r
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

// Unary is the unary server interceptor: install it with
// grpc.ChainUnaryInterceptor(it.Unary), or with ServerOptions. It calls
// handler only for calls every layer allows, and returns a refusal's
// status error otherwise.
func (it *Interceptor) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	q := &hold{Context: ctx, it: it}
	r := it.request(ctx, info.FullMethod, q)
	if err := it.e.Admit(ctx, &r, &q.t); err != nil {
		return nil, it.refusal(ctx, unaryTrailer{ctx}, err)
	}
	if q.t.Exempt() {
		return handler(ctx, req)
	}
	if deadline, ok := q.t.Deadline(); ok {
		return it.unaryWithTimeout(q, deadline, req, handler)
	}
	// Until the handler has returned, the call is one the service did not
	// serve: it panicked.
	result := adaptive.Ignored
	defer func() { q.t.Done(result) }()
	resp, err := handler(q, req)
	result = outcome(ctx, err)
	return resp, err
}

// unaryWithTimeout runs handler in its own goroutine under the deadline
// set when the call was admitted. If it returns in time, its answer is the
// call's; if the deadline passes first, or the handler gives up at it
// with a deadline error, the client gets request_timeout and the
// handler's context is cancelled. Either way the call's admission ends
// only when the handler has returned: until then it still uses the
// capacity it stands for. A panic in time is raised again on the caller's
// goroutine; one after the deadline, when nobody is left to raise it to,
// is logged.
func (it *Interceptor) unaryWithTimeout(q *hold, deadline time.Time, req any, handler grpc.UnaryHandler) (any, error) {
	ctx, cancel := context.WithDeadline(q, deadline)
	defer cancel()
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
				q.t.Done(adaptive.Dropped) // past the deadline
			case r.panicked:
				q.t.Done(adaptive.Ignored)
			default:
				q.t.Done(outcome(q.Context, r.err))
			}
			done <- r
		}()
		defer func() {
			if p := recover(); p != nil {
				r.panicked, r.p = true, p
				select {
				case <-abandoned:
					if it.logger != nil {
						it.logger.LogAttrs(q.Context, slog.LevelError, "grpclimit: handler panicked after its deadline",
							slog.String("route", q.t.Route()), slog.Any("panic", p))
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
			return nil, it.timedOut(q)
		}
	}
	if r.panicked {
		panic(r.p)
	}
	if r.err != nil && ctx.Err() != nil && (errors.Is(r.err, context.DeadlineExceeded) || status.Code(r.err) == codes.DeadlineExceeded) {
		return nil, it.timedOut(q) // the handler gave up at the deadline
	}
	return r.resp, r.err
}

// timedOut answers a unary call whose deadline passed: request_timeout,
// counted, or, if the client gave up first, the client's own reason.
func (it *Interceptor) timedOut(q *hold) error {
	if err := q.Context.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	return it.refusal(q.Context, unaryTrailer{q.Context}, q.t.TimedOut())
}

// MetadataPriority returns a Config.Priority function that reads a call's
// class from the first value of the named incoming metadata key, such as
// "x-criticality", in any case: "critical" (or "critical_plus", after
// Google SRE's criticality levels) is limits.PriorityCritical, "sheddable"
// (or "sheddable_plus") limits.PrioritySheddable, and anything else, or no
// value, limits.PriorityDefault. A client can send any metadata: read the
// class only from callers trusted to set it (services of one's own,
// behind a proxy that strips the key from outside calls), or a client
// may take the places kept for critical calls.
func MetadataPriority(name string) func(ctx context.Context, fullMethod string) limits.Priority {
	name = strings.ToLower(name)
	return func(ctx context.Context, _ string) limits.Priority {
		v := metadata.ValueFromIncomingContext(ctx, name)
		if len(v) == 0 {
			return limits.PriorityDefault
		}
		switch strings.ToLower(v[0]) {
		case "critical", "critical_plus":
			return limits.PriorityCritical
		case "sheddable", "sheddable_plus":
			return limits.PrioritySheddable
		}
		return limits.PriorityDefault
	}
}
