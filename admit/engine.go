package admit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
)

// Engine runs the layers of admission control, in one order, for requests
// of any protocol: exemptions, the gate (with its classes and its
// deadline), the client address's bucket, the caller key's bucket, the
// policies of the request's route, and per-client concurrency. A front
// end (package httplimit for HTTP, grpclimit for gRPC, or code of one's
// own, in front of a job queue or a WebSocket hub) describes each request
// with a Request and passes it to Admit, which returns a Ticket to finish
// when the request ends, or a Refusal.
//
// The order is part of the contract, and so is this:
//
//   - A refused request costs nothing: when a layer refuses, the buckets
//     earlier layers charged are given back, leaving each key owing no
//     less than before the request and exactly that much when no other
//     request came in between.
//   - A caller key gets a bucket only for a request its address allowed,
//     so the entries one address can create are bounded by its own
//     allowance: rotating keys cannot fill the table that new clients
//     need.
//   - Every wait is bounded: the gate's queue by QueueWait (or an adaptive
//     gate's wait), each call of a limiter by LimiterTimeout, the request
//     from its admission by Timeout. Past the bound the layer's policy
//     applies, and every place taken is given back on every way out.
//   - Per-client rate and concurrency are counted exactly for each
//     client.
//   - A refusal says which layer refused and why, with a retry delay only
//     when waiting helps, never earlier than the truth.
//
// Every outcome is counted (Stats) and every refusal may be logged. An
// Engine is safe for concurrent use; Update replaces its configuration
// while it serves. Make one with New; the zero value is not usable.
type Engine struct {
	st atomic.Pointer[state]
	n  counts // requests by outcome, across updates

	// seq counts the changes of limit an Update applies to limiters it
	// keeps, twice each: odd while one is applied. A request whose rate
	// layers saw it change, or odd, is decided again, so that none is
	// decided by the limits of two configurations.
	seq atomic.Uint64

	mu sync.Mutex // serializes New and Update's bookkeeping below
	// kept is what the limiters keep across updates (their keys' state,
	// their counts), by limiter.
	kept map[string]*kept
	// routes are the counts of each route pattern, kept across updates.
	routes map[string]*counts
	other  counts // the requests of no route, once there are routes
}

// Request describes a request to an Engine: what the layers need to know
// of it, and nothing of its protocol.
type Request struct {
	// Peer is the address of the client's connection, "host:port" or
	// "host"; PeerAddr, if valid, is the same already parsed, and is used
	// in its place.
	Peer     string
	PeerAddr netip.Addr
	// Method, if set, is the request's method, for route patterns that
	// name one and for logs.
	Method string
	// Route is what route patterns match (Policy.Routes, Config.Exempt):
	// a path, such as an HTTP request's as sent (URL.EscapedPath: its
	// segments are unescaped where they are matched, as ServeMux does) or
	// a gRPC call's full method.
	Route string
	// Cost is what the request costs in each rate policy; 0 means 1.
	Cost int
	// Priority is the request's class at the gate.
	Priority limits.Priority
	// Stream says the request opens a stream, counted by
	// Config.MaxStreamsPerClient for its whole life rather than by
	// MaxInFlightPerClient.
	Stream bool
	// Key, if set, is the caller's key: the value of the field
	// Config.CallerKey names, given directly rather than read from
	// Fields. Tier, if set, is the request's tier, the value of the field
	// Config.Tier names, given so.
	Key, Tier string
	// Fields reads the request's named fields: its caller key, a policy's
	// key, and, for a peer that is a trusted proxy, the forwarding field.
	// nil reads none.
	Fields Fields
	// Exempt says the front end exempts the request: it bypasses every
	// layer, as the routes of Config.Exempt do.
	Exempt bool
}

// Fields reads the named fields of a request, such as its header fields,
// its metadata, or values a front end computes under a name of its own.
// Front ends implement it; the engine reads a field only when a layer
// needs it.
type Fields interface {
	// Field returns the named field's value, its first if it has several,
	// or "" if it has none.
	Field(name string) string
	// FieldValues returns every value of the named field, which may be
	// repeated, such as the forwarding field; nil if it has none.
	FieldValues(name string) []string
}

// New returns an Engine configured by cfg, or an error naming the first
// field of cfg that cannot be honoured.
func New(cfg Config) (*Engine, error) {
	e := &Engine{kept: map[string]*kept{}, routes: map[string]*counts{}}
	e.mu.Lock()
	defer e.mu.Unlock()
	st, err := e.compile(&cfg, nil)
	if err != nil {
		return nil, err
	}
	e.kept = st.kept
	e.st.Store(st)
	return e, nil
}

// Update replaces e's configuration with cfg while e serves, or returns an
// error naming the first field of cfg that cannot be honoured, and changes
// nothing. Any part may change: limits and bursts, tiers and overrides,
// shadow or enforce, exemptions, routes, policies added or removed, the
// gate's size and reserves, per-client caps.
//
// Each request is admitted under one configuration, the old or the new,
// never a mix: one whose rate layers ran while a limit changed is decided
// again, under the new. A key keeps its state: its TAT, so that under a
// stricter limit it waits longer, and no change hands out a fresh burst
// (limits.GCRA.SetLimit; a limiter of Limiters with a SetLimit method,
// such as a redislimit.GCRA, follows the policy's Rate the same way).
// The state is kept per table: a policy's, whatever Config's own are
// named, and each tier's and override's; a key whose tier changes, or
// that an override added names, is counted from then on in that table.
// Counters keep counting, by policy, route and reason. A policy removed
// has its memory freed once the requests admitted under it end. A
// policy's MaxKeys, the size of its table, cannot change while it serves
// (give it another name for a new table), nor can Adaptive; the rest of
// the gate can: MaxInFlight moves its size and Reserve its reserves
// (limits.Gate.SetSize; an adaptive gate keeps the limit its controller
// set), QueueWait and QueueAdapt their waits. A gate added, or a
// shared Gate given, starts empty; requests inside the gate before give
// their places back to it.
func (e *Engine) Update(cfg Config) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	old := e.st.Load()
	st, err := e.compile(&cfg, old)
	if err != nil {
		return err
	}
	if st.cap != nil && st.cap.apply != nil {
		st.cap.apply()
	}
	if len(st.limits) > 0 {
		e.seq.Add(1) // odd: limits are changing
		for _, l := range st.limits {
			if err := l.l.SetLimit(l.events, l.period, l.burst); err != nil && st.logger != nil {
				st.logger.Error("limits: a policy's new limit was refused; the old one stays",
					slog.String("policy", l.policy), slog.String("limiter", l.what), slog.String("error", err.Error()))
			}
		}
		e.st.Store(st)
		e.seq.Add(1)
	} else {
		e.st.Store(st)
	}
	e.kept = st.kept
	return nil
}

// field returns the value of the request's field name: Key for the field
// of the caller key, if set, Tier for that of the tier, or what Fields
// reads.
func (r *Request) field(st *state, name string) string {
	switch {
	case name == st.callerField && r.Key != "":
		return r.Key
	case name == st.tierField && r.Tier != "":
		return r.Tier
	}
	if r.Fields == nil {
		return ""
	}
	return r.Fields.Field(name)
}

// Admit decides r through every layer, in order, charging what it admits,
// and reports how: nil, with t holding the request's admission until its
// Done, or a *Refusal, with every charge given back and nothing held.
// It returns ctx's error, with nothing charged or held, for a request
// whose client left (ctx ended) while a remote limiter decided it. t is
// reset first: give a zero Ticket, or one whose request is done.
//
// Admit waits at most the gate's wait and, for each limiter that does not
// decide in process, the limiter's timeout, and no longer than the
// request's deadline.
func (e *Engine) Admit(ctx context.Context, r *Request, t *Ticket) error {
	for {
		seq := e.seq.Load()
		err := e.admit(ctx, r, t, seq)
		if err != errChanged {
			return err
		}
	}
}

// errChanged is admit's error for a request decided while an update
// changed a limit: it was given back everything, to be decided again.
var errChanged = errors.New("a limit changed")

// admit is Admit, for a request whose decision began when e.seq was seq.
func (e *Engine) admit(ctx context.Context, r *Request, t *Ticket, seq uint64) error {
	st := e.st.Load()
	if t.e != nil {
		*t = Ticket{} // one used before: a ticket new to Admit is zero already
	}
	t.e, t.st = e, st
	if r.Exempt {
		t.exempt = true
		e.count(t, Exempt)
		return nil
	}
	var lbuf [16]*policy
	layers, exempt := t.layers(r, lbuf[:0])
	if exempt {
		t.exempt = true
		e.count(t, Exempt)
		return nil
	}
	if st.cap != nil && !st.cap.enter(ctx, &t.held, r.Priority) {
		if !st.cap.shadow {
			return t.refuse(ctx, r, ServerBusy, nil, limits.Decision{}, nil)
		}
		e.n.shadow[ServerBusy].Add(1)
		e.log(ctx, st, r, "limits: request would be refused (shadow)", ServerBusy, "", "", nil)
	}
	var deadline time.Time
	if st.timeout > 0 {
		deadline = time.Now().Add(st.timeout)
		t.deadline = deadline
	}
	tbl := st.slots
	if r.Stream {
		tbl = st.streams
	}
	addr := ""
	if len(layers) > 0 || tbl != nil {
		addr = t.setClient(st, r)
	}
	var buf [4]charge
	charges, remote, err := t.take(ctx, r, addr, layers, buf[:0], deadline)
	if seq&1 != 0 || e.seq.Load() != seq {
		// An update changed a limit meanwhile, or was changing one: give
		// everything back, and decide the request again.
		if err == nil {
			e.refund(ctx, st, charges)
		}
		t.done = true
		t.held.leave(adaptive.Ignored)
		if seq&1 != 0 {
			runtime.Gosched()
		}
		return errChanged
	}
	if ref, ok := err.(*Refusal); ok {
		t.report(ctx, r, ref)
		return err
	}
	if err != nil {
		t.done = true
		t.held.leave(adaptive.Ignored)
		return err
	}
	if remote || st.timeout > 0 {
		// The deadline passed, or the client left, while the limiters
		// decided: the request would start with no time left.
		if ctx.Err() != nil {
			e.refund(ctx, st, charges)
			t.done = true
			t.held.leave(adaptive.Ignored)
			return ctx.Err()
		}
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			e.refund(ctx, st, charges)
			return t.refuse(ctx, r, RequestTimeout, nil, limits.Decision{}, nil)
		}
	}
	if tbl != nil {
		if reason := tbl.acquire(addr); reason != Allowed {
			e.refund(ctx, st, charges)
			return t.refuse(ctx, r, reason, nil, limits.Decision{}, nil)
		}
		t.slots = tbl
	}
	t.fields.set(charges, st.headers)
	e.count(t, Allowed)
	return nil
}

// Charge charges r to the rate policies of its route alone, as for a
// message of a stream already admitted: it takes no place in the gate and
// no per-client count, and counts only refusals. It returns nil, or a
// *Refusal with every charge given back, or ctx's error.
func (e *Engine) Charge(ctx context.Context, r *Request) error {
	st := e.st.Load()
	t := &Ticket{e: e, st: st, done: true}
	var lbuf [16]*policy
	layers, exempt := t.layers(r, lbuf[:0])
	if exempt {
		return nil
	}
	if len(layers) == 0 {
		return nil
	}
	var buf [4]charge
	_, _, err := t.take(ctx, r, t.setClient(st, r), layers, buf[:0], time.Time{})
	if ref, ok := err.(*Refusal); ok {
		t.report(ctx, r, ref)
	}
	return err
}

// layers appends to buf the policies r takes, in order: the
// configuration's own and those without routes, then those of each route
// r matches, from the least specific route to the most, each policy once;
// and sets t's route, the most specific. It reports whether a route r
// matches is exempt, or r is.
func (t *Ticket) layers(r *Request, buf []*policy) ([]*policy, bool) {
	st := t.st
	if st.router == nil {
		return st.global, false
	}
	var rbuf [maxMatch]*route
	routes := st.router.match(r.Method, r.Route, &rbuf)
	t.routeN = &t.e.other
	if len(routes) == 0 {
		return st.global, false
	}
	t.route = routes[len(routes)-1]
	t.routeN = t.route.counts
	buf = append(buf, st.global...)
	for _, rt := range routes {
		if rt.exempt {
			return nil, true
		}
		for _, p := range rt.own {
			if !slices.Contains(buf[len(st.global):], p) {
				buf = append(buf, p)
			}
		}
	}
	return buf, false
}

// take applies layers, in order, to r, whose client address key is addr,
// appending what each charges to charges. It reports whether a limiter
// that does not decide in process was asked. If one refuses, it gives
// back everything charged, latest first, and returns the refusal.
func (t *Ticket) take(ctx context.Context, r *Request, addr string, layers []*policy, charges []charge, deadline time.Time) ([]charge, bool, error) {
	st, e := t.st, t.e
	remote := false
	// A request with a caller key is told of its key's limits, not of its
	// address's, which it shares with others behind the address and which
	// is the larger: the address policy is left out of its fields.
	var rs resolver
	if st.callerField != "" {
		rs.caller = r.field(st, st.callerField)
	}
	caller := rs.caller
	for i, p := range layers {
		p, lim, key, n, ok := rs.resolve(st, r, addr, p)
		if !ok {
			continue // TrustedKeys: a request without the key skips the policy
		}
		remote = remote || lim.outOfProcess()
		ch, err := lim.take(ctx, key, n, deadline)
		ch.pol = p
		ch.hidden = p.shadow || caller != "" && p.name == addressPolicy && st.callerField != "" && p == st.global[0]
		if err != nil && ctx.Err() != nil {
			// The client left while the limiter decided: nobody to answer,
			// nothing to count.
			e.refund(ctx, st, append(charges, ch))
			return nil, remote, ctx.Err()
		}
		if err == nil && !ch.dec.Allowed && ch.dec.Reason == LimiterError {
			// A limiter that reports its failure in its Decision alone.
			err = errLimiterFailed
		}
		if err != nil {
			lim.n.n[LimiterError].Add(1)
			if st.failOpen {
				e.count(t, LimiterError)
				e.log(ctx, st, r, "limits: limiter failed; request served", LimiterError, key, p.name, err)
				if ch.pre.Allowed {
					// The local limiter in front keeps counting: its charge
					// stays, given back only if a later layer refuses.
					charges = append(charges, ch)
				}
				continue
			}
			e.refund(ctx, st, append(charges, ch)) // ch: the local limiter's charge, if any
			return nil, remote, t.refusal(LimiterError, lim, ch.dec, err)
		}
		if ch.dec.Allowed {
			lim.n.n[Allowed].Add(1)
			charges = append(charges, ch)
			continue
		}
		reason := ch.dec.Reason
		if reason == Allowed {
			reason = limits.ReasonRateLimited // a limiter's refusal without a reason
		}
		if p.shadow {
			lim.n.shadow[reason].Add(1)
			e.n.shadow[reason].Add(1)
			e.log(ctx, st, r, "limits: request would be refused (shadow)", reason, key, p.name, nil)
			continue
		}
		lim.n.n[reason].Add(1)
		e.refund(ctx, st, charges)
		t.refKey = key
		ref := t.refusal(reason, lim, ch.dec, nil)
		if reason == limits.ReasonRateLimited {
			// The request may be made again once every layer would allow
			// it: those after this one that decide in process are asked,
			// charging nothing.
			for _, q := range layers[i+1:] {
				if q, lim, key, n, ok := rs.resolve(st, r, addr, q); ok && !q.shadow {
					if d, ok := lim.peek(key, n); ok && !d.Allowed && d.Reason == limits.ReasonRateLimited {
						ref.RetryAfter = max(ref.RetryAfter, d.RetryAfter)
					}
				}
			}
		}
		return nil, remote, ref
	}
	return charges, remote, nil
}

// resolver finds the limiter, the key and the cost with which each policy
// decides a request, keeping what it read of the request: the value of
// its caller key, caller, and its tier.
type resolver struct {
	caller   string
	tier     string
	tierRead bool
}

// resolve returns the policy that decides r, whose client's address key
// is addr, in p's place (p, or its keyless policy for a request without
// p's key), with its limiter, the key and the cost; or false if p does
// not apply to r (a request without p's key, under TrustedKeys).
func (rs *resolver) resolve(st *state, r *Request, addr string, p *policy) (*policy, *limiter, string, int, bool) {
	key, value := addr, ""
	if p.field == st.callerField && p.field != "" {
		value = rs.caller
	} else if p.field != "" {
		value = r.field(st, p.field)
	}
	if p.field != "" {
		if value != "" {
			key = callerBucket(value)
		} else {
			if p.keyless == nil {
				return nil, nil, "", 0, false
			}
			p, key = p.keyless, "n:"+addr
		}
	}
	lim := p.base
	if p.tiers != nil {
		if !rs.tierRead {
			rs.tier, rs.tierRead = r.field(st, st.tierField), true
		}
		if l := p.tiers[rs.tier]; l != nil {
			lim = l
		}
	}
	if p.overrides != nil {
		v := value
		if p.field == "" {
			v = addr[len("a:"):]
		}
		if l := p.overrides[v]; l != nil && v != "" {
			lim = l
		}
	}
	n := max(r.Cost, 1)
	if r.Cost < 0 {
		n = r.Cost
	}
	if p.cost > 0 {
		n = p.cost
	}
	return p, lim, key, n, true
}

// callerBucket returns the bucket's key for a key the caller chose: a hash
// of it, so that session tokens and API keys never reach a limiter (or a
// shared store) in clear, and their length is fixed.
func callerBucket(callerKey string) string {
	sum := sha256.Sum256([]byte(callerKey))
	var buf [2 + 2*16]byte
	copy(buf[:], "c:")
	hex.Encode(buf[2:], sum[:16])
	return string(buf[:])
}

// refund gives back what charges charged, latest first, even if ctx has
// ended, within each limiter's timeout; a refund that fails leaves its
// charge in place, and is logged.
func (e *Engine) refund(ctx context.Context, st *state, charges []charge) {
	ctx = context.WithoutCancel(ctx)
	for i := len(charges) - 1; i >= 0; i-- {
		if err := charges[i].refund(ctx); err != nil && st.logger != nil {
			st.logger.LogAttrs(ctx, slog.LevelError, "limits: refund failed; the charge stays",
				slog.String("policy", charges[i].pol.name), slog.String("key_hash", keyHash(charges[i].key)),
				slog.String("error", err.Error()))
		}
	}
}

// count counts an outcome of t's request, in the engine's counts and its
// route's.
func (e *Engine) count(t *Ticket, reason limits.Reason) {
	e.n.n[reason].Add(1)
	if t.routeN != nil {
		t.routeN.n[reason].Add(1)
	}
}

// log records a refusal or a limiter error, if a Logger is set. The key is
// logged only as a short hash, enough to tell clients apart without
// revealing addresses, session tokens or API keys.
func (e *Engine) log(ctx context.Context, st *state, r *Request, msg string, reason limits.Reason, key, policy string, err error) {
	if st.logger == nil {
		return
	}
	attrs := make([]slog.Attr, 0, 6)
	attrs = append(attrs, slog.String("reason", reason.String()))
	if r.Method != "" {
		attrs = append(attrs, slog.String("method", r.Method))
	}
	if r.Route != "" {
		attrs = append(attrs, slog.String("route", r.Route))
	}
	if policy != "" {
		attrs = append(attrs, slog.String("policy", policy))
	}
	if key != "" {
		attrs = append(attrs, slog.String("key_hash", keyHash(key)))
	}
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelError
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	st.logger.LogAttrs(ctx, level, msg, attrs...)
}

// keyHash returns a short hash of a bucket's key, enough to tell clients
// apart in logs without revealing addresses, session tokens or API keys.
func keyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:6])
}

// ClientKey returns the key of r's client address, as the address bucket
// and per-client concurrency see it: "a:" and the client's address
// prefix, such as "a:192.0.2.7/32" or "a:2001:db8:1:2::/64" (the peer, or
// the address trusted proxies forwarded, or the nearest trusted hop where
// a forwarded entry is no address; "a:invalid" if the peer's own address
// cannot be parsed). Use it to log a client, to charge a limiter of one's
// own by client, or to Reset it.
//
// The keys limiters see: "a:" and the prefix for buckets by address; "c:"
// and 32 hex digits of the SHA-256 of the key for buckets by a key the
// caller chooses (Config.CallerKey, Policy.Key); "n:" and the address key
// for the bucket that requests without such a key share.
func (e *Engine) ClientKey(r *Request) string {
	st := e.st.Load()
	var buf [keyBytes]byte
	return string(st.id.appendKey(buf[:0], r.Peer, r.PeerAddr, r.Fields))
}

// Gate returns the engine's gate, nil if it has none: give it to another
// Engine (Config.Gate), or use it directly, for one capacity in the
// process.
func (e *Engine) Gate() *limits.Gate {
	if c := e.st.Load().cap; c != nil {
		return c.gate
	}
	return nil
}

// Reset forgets key's state in every limiter of the engine that can
// forget (a local GCRA; a limiter with a Reset(ctx, key) error method,
// such as the Redis one), so that the client finds its full burst again:
// to unblock an address by hand, say, with the key ClientKey gives. It
// returns the first error of a limiter that failed, after trying them
// all.
func (e *Engine) Reset(ctx context.Context, key string) error {
	st := e.st.Load()
	var first error
	seen := map[any]bool{}
	for _, p := range st.policies {
		for _, lim := range p.all() {
			for _, l := range []any{lim.local, lim.remote} {
				if l == nil || l == (*limits.GCRA)(nil) || seen[l] {
					continue
				}
				seen[l] = true
				var err error
				switch v := l.(type) {
				case *limits.GCRA:
					v.Reset(key)
				case interface {
					Reset(context.Context, string) error
				}:
					err = v.Reset(ctx, key)
				}
				if err != nil && first == nil {
					first = fmt.Errorf("resetting %q in policy %q: %w", key, p.name, err)
				}
			}
		}
	}
	return first
}

// Ticket is one request's admission by an Engine, from Admit until Done:
// its place in the gate and its count in a per-client table, with the
// rate limit fields of the policies that charged it; or, refused, its
// Refusal. The zero Ticket holds nothing. Leave is safe for concurrent
// use; the other methods are for the goroutine that admitted the request.
type Ticket struct {
	e      *Engine
	st     *state
	held   held
	route  *route
	routeN *counts
	slots  *slots // the table counting the client, if any
	exempt bool
	done   bool
	keyLen uint8
	// mem holds the client's address key, written once and never again,
	// as a string's bytes must be.
	mem      [keyBytes]byte
	deadline time.Time
	refKey   string // the refused bucket's key
	fields
}

// setClient writes the client's address key into t and returns it.
func (t *Ticket) setClient(st *state, r *Request) string {
	b := st.id.appendKey(t.mem[:0], r.Peer, r.PeerAddr, r.Fields)
	t.keyLen = uint8(len(b))
	return t.Client()
}

// Client returns the key of the client's address (see Engine.ClientKey),
// once a layer that needs it has read it, or "".
func (t *Ticket) Client() string { return unsafe.String(&t.mem[0], t.keyLen) }

// Exempt reports whether the request bypassed every layer.
func (t *Ticket) Exempt() bool { return t.exempt }

// Deadline returns the request's deadline (Config.Timeout from its
// admission), and false if it has none.
func (t *Ticket) Deadline() (time.Time, bool) { return t.deadline, !t.deadline.IsZero() }

// Route returns the route pattern the request matched, or "" for none.
func (t *Ticket) Route() string {
	if t.route == nil {
		return ""
	}
	return t.route.pattern
}

// Leave gives the request's place in the gate back before the request is
// done, telling an adaptive gate how it went so far (adaptive.Success, or
// adaptive.Dropped for a stream not set up in time): a long-lived
// request, such as a stream or a WebSocket, then no longer counts against
// the gate once its costly part is over. Its per-client count stays until
// Done. Leave is idempotent and safe for concurrent use.
func (t *Ticket) Leave(o adaptive.Outcome) { t.held.leave(o) }

// Done ends the request: it gives back its place in the gate, if Leave
// has not, telling an adaptive gate how the request went (o), and its
// per-client count. Calls after the first do nothing.
func (t *Ticket) Done(o adaptive.Outcome) {
	if t.done {
		return
	}
	t.done = true
	t.held.leave(o)
	t.release()
}

// release gives back the request's per-client count.
func (t *Ticket) release() {
	if t.slots != nil {
		t.slots.release(t.Client())
		t.slots = nil
	}
}

// TimedOut counts the request as request_timeout, for a request admitted
// whose handler ran past its deadline, and returns the refusal to answer
// it with. The request stays admitted until Done.
func (t *Ticket) TimedOut() *Refusal {
	t.e.count(t, RequestTimeout)
	return &Refusal{Reason: RequestTimeout, RetryAfter: t.st.busyRetry}
}

// refuse makes t's Refusal for reason, by limiter lim (with Decision d, or
// error err) or by another layer, counts and logs it, gives back t's place
// in the gate, and returns the Refusal.
func (t *Ticket) refuse(ctx context.Context, r *Request, reason limits.Reason, lim *limiter, d limits.Decision, err error) *Refusal {
	ref := t.refusal(reason, lim, d, err)
	t.report(ctx, r, ref)
	return ref
}

// refusal makes t's Refusal, as refuse does, without counting or logging
// it.
func (t *Ticket) refusal(reason limits.Reason, lim *limiter, d limits.Decision, err error) *Refusal {
	st := t.st
	t.done = true
	t.held.leave(adaptive.Ignored)
	t.release()
	ref := &Refusal{Reason: reason, Decision: d, Err: err}
	switch reason {
	case limits.ReasonRateLimited:
		ref.RetryAfter = max(d.RetryAfter, 0)
	case limits.ReasonCostAboveBurst, limits.ReasonInvalidCost:
	default:
		ref.RetryAfter = st.busyRetry
	}
	if lim != nil {
		ref.Policy = lim.name
		ref.fields.refused(lim, reason, d, st.headers)
	}
	return ref
}

// report counts and logs t's refusal ref.
func (t *Ticket) report(ctx context.Context, r *Request, ref *Refusal) {
	t.e.count(t, ref.Reason)
	key := t.refKey
	if key == "" && (ref.Reason == ConcurrencyLimited || ref.Reason == ConcurrencyTableFull) {
		key = t.Client()
	}
	t.e.log(ctx, t.st, r, "limits: request refused", ref.Reason, key, ref.Policy, ref.Err)
}

// Refusal is why an Engine refused a request, in terms every protocol can
// answer in. It is an error; its text is the reason's code and the
// policy that refused, if one did.
type Refusal struct {
	// Reason says which layer refused, and why.
	Reason limits.Reason
	// Policy names the rate policy that refused, as the rate limit fields
	// do, for refusals a rate policy made.
	Policy string
	// RetryAfter is how long to wait before the same request may succeed:
	// exact for rate_limited (the time after which the refusing limiter,
	// and every limiter of this process that the request would meet after
	// it, would allow it; a limiter out of process after the refusing one
	// is not asked), Config's
	// BusyRetryAfter for refusals that waiting helps but no limiter
	// times, and 0 for those waiting cannot cure (cost_above_burst,
	// invalid_cost).
	RetryAfter time.Duration
	// Decision is the refusing limiter's answer, for refusals a limiter
	// decided.
	Decision limits.Decision
	// Err is the limiter's error, for limiter_error.
	Err error
	fields
}

// Class returns the refusal's class: Busy, Limited or Failed.
func (r *Refusal) Class() Class { return classOf(r.Reason) }

// Error returns the reason's code, with the refusing policy's name.
func (r *Refusal) Error() string {
	s := "limits: request refused: " + r.Reason.String()
	if r.Policy != "" {
		s += " (policy " + r.Policy + ")"
	}
	if r.Err != nil {
		s += ": " + r.Err.Error()
	}
	return s
}

// Unwrap returns the limiter's error, for limiter_error.
func (r *Refusal) Unwrap() error { return r.Err }
