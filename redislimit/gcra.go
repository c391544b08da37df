package redislimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/internal/emission"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the prefix of every Redis key a GCRA writes unless
// WithPrefix says otherwise.
const DefaultPrefix = "limits:"

// DefaultTimeout bounds each call to Redis unless WithTimeout says
// otherwise, or the caller's context ends sooner.
const DefaultTimeout = 100 * time.Millisecond

// ErrUnavailable is wrapped by every error a GCRA returns: Redis gave no
// decision, because it could not be reached, did not answer in time or
// answered with an error. The error also wraps the cause, such as
// context.DeadlineExceeded.
var ErrUnavailable = errors.New("redislimit: no decision from Redis")

// GCRA is the generic cell rate algorithm of limits.GCRA with its state in
// Redis, so that any number of processes share one limit per key. Its
// decisions are those of a limits.GCRA with the same limit, period and
// burst, made on the Redis server's clock.
//
// Each decision is one call of a Lua script, sent by its SHA-1 with EVALSHA
// (and once by its source after the server lost its script cache). The
// script reads the time with the Redis TIME command, never the client's
// clock, so processes whose clocks disagree still share one timeline. TIME
// has microseconds: the arithmetic is in integer nanoseconds, as in
// limits.GCRA, but the clock advances in steps of a microsecond. The key's
// state is its theoretical arrival time, an integer number of nanoseconds
// since the Unix epoch, stored as a decimal string under the key's name
// with the prefix, and set to expire, to the millisecond rounded up, when
// the key is back to its full burst.
//
// When Redis gives no decision (down, unreachable, slow beyond the deadline,
// or answering with an error), the failure policy chosen at construction
// decides: FailClosed (the default), FailOpen or Fallback. Each such call
// is counted in Stats.
//
// A decision costs one round trip to Redis and about 5µs of the server's
// time; with a client that does not bound its I/O by the context (see New)
// it also costs a goroutine.
//
// All methods are safe for concurrent use. The zero value is not usable;
// call New.
type GCRA struct {
	client    redis.UniversalClient
	limit     int
	burst     int
	period    time.Duration
	t         int64 // emission interval T, in nanoseconds
	d         int64 // burst*T
	prefix    string
	timeout   time.Duration
	policy    policy
	fallback  *limits.GCRA
	onError   func(error)
	ctxAware  bool  // the client bounds its socket I/O by the context
	unitArgs  []any // script arguments for a charge of 1
	peekArgs  []any // for a look at a cost of 1
	lookArgs  []any // for a look at a cost of 0
	answered  atomic.Uint64
	errs      atomic.Uint64
	fallbacks atomic.Uint64
}

var _ httplimit.Limiter = (*GCRA)(nil)

type policy uint8

const (
	failClosed policy = iota
	failOpen
	fallback
)

// Option configures a GCRA.
type Option func(*options)

type options struct {
	burst    int
	prefix   string
	hashTag  bool
	timeout  time.Duration
	policy   policy
	fallback *limits.GCRA
	onError  func(error)
}

// WithBurst sets how many unit requests a key may make at once, as
// limits.WithBurst does. The default is the limit.
func WithBurst(n int) Option { return func(o *options) { o.burst = n } }

// WithPrefix sets the prefix of the GCRA's Redis keys: the state of key k
// is stored under prefix+k. The default is DefaultPrefix, "limits:".
// Limiters with different limits must not share keys: give each its own
// prefix, such as "limits:login:".
func WithPrefix(p string) Option { return func(o *options) { o.prefix = p } }

// WithHashTag puts every key of the GCRA in one Redis Cluster hash slot, by
// making the prefix a hash tag: the state of key k is stored under
// "{"+prefix+"}"+k. The prefix must then be non-empty and free of braces.
//
// A hash tag gives up the spreading of keys over the cluster: one node
// holds all of this limiter's keys and serves all its calls, so its load
// does not scale with the cluster, and when that node fails the whole
// limiter does, not a share of its keys. What it buys is locality: every
// key of the limiter can be reached from one node, for multi-key scripts,
// SCAN and bulk deletion, and limiters can be placed on nodes one by one.
// Without it (the default), each key goes to the slot of its own name, as
// Redis Cluster hashes it: a key that itself contains a {tag} goes to that
// tag's slot.
func WithHashTag() Option { return func(o *options) { o.hashTag = true } }

// WithTimeout bounds each call to Redis to d, or less if the caller's
// context ends sooner. The default is DefaultTimeout, 100ms.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// FailClosed is the default failure policy: when Redis gives no decision,
// AllowN refuses the request and returns an error wrapping ErrUnavailable
// with a Decision that has Allowed false, Reason limits.ReasonUnavailable,
// the GCRA's Limit, Period and Burst and every other field 0. A request
// whose cost is negative or above the burst is refused with its own reason,
// limits.ReasonInvalidCost or limits.ReasonCostAboveBurst, still with the
// error. Nothing passes unmetered, and the caller sees that Redis failed.
func FailClosed() Option { return func(o *options) { o.policy, o.fallback = failClosed, nil } }

// FailOpen is the failure policy that lets requests through: when Redis
// gives no decision, AllowN returns a nil error and a Decision that has
// Allowed true, limits.ReasonAllowed, the GCRA's Limit, Period and Burst
// and every other field 0, as nothing is known of the key. Requests whose
// cost is negative or above the burst are still refused, with their own
// reason. Errors are only seen in Stats and by the WithErrorHandler
// function. While Redis is down nothing is limited.
func FailOpen() Option { return func(o *options) { o.policy, o.fallback = failOpen, nil } }

// Fallback is the failure policy that decides locally: when Redis gives no
// decision, AllowN returns g's decision, g.AllowN(key, n) (g.Peek for
// Peek), and a nil error. g keeps its own state: what it allowed is not
// charged in Redis, and when Redis comes back the keys' state there is what
// it was before (or empty, if Redis lost it).
//
// g limits each process on its own: while Redis is down, N processes
// together allow up to N times g's rate. Give g the fleet's limit divided
// by the number of processes to keep the total, or the full limit to let no
// single caller notice the outage. Fallback panics if g is nil.
func Fallback(g *limits.GCRA) Option {
	if g == nil {
		panic("redislimit: nil fallback GCRA")
	}
	return func(o *options) { o.policy, o.fallback = fallback, g }
}

// WithErrorHandler sets a function called with each error from Redis,
// before the failure policy decides, for logging. It is called on the
// request's goroutine and must be safe for concurrent use. The errors are
// those AllowN returns under FailClosed.
func WithErrorHandler(f func(error)) Option { return func(o *options) { o.onError = f } }

// New returns a GCRA allowing each key limit events per period, with its
// state in Redis through client: a *redis.Client, a Sentinel failover
// client or a *redis.ClusterClient, as redis.NewUniversalClient returns.
// New does not contact Redis; Redis may be down until the first call, and
// go down and come back at any time.
//
// Every call is bounded by the caller's context and the timeout. A client
// with ContextTimeoutEnabled set stops waiting on the socket itself when the
// time is up; with any other client the GCRA still returns in time, and the
// command runs on in the background until the client's own ReadTimeout.
//
// New panics if client is nil, if limit, period or the burst is not
// positive, if the timeout is not positive, if a hash tag is asked for with
// an empty prefix or one containing braces, or if burst*T, the time to
// recover a full burst, exceeds about 73 years.
func New(client redis.UniversalClient, limit int, period time.Duration, opts ...Option) *GCRA {
	o := options{burst: limit, prefix: DefaultPrefix, timeout: DefaultTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case client == nil:
		panic("redislimit: nil client")
	case limit < 1:
		panic(fmt.Sprintf("redislimit: limit must be >= 1, got %d", limit))
	case period <= 0:
		panic(fmt.Sprintf("redislimit: period must be > 0, got %v", period))
	case o.burst < 1:
		panic(fmt.Sprintf("redislimit: burst must be >= 1, got %d", o.burst))
	case o.timeout <= 0:
		panic(fmt.Sprintf("redislimit: timeout must be > 0, got %v", o.timeout))
	case o.hashTag && (o.prefix == "" || strings.ContainsAny(o.prefix, "{}")):
		panic(fmt.Sprintf("redislimit: a hash tag needs a non-empty prefix without braces, got %q", o.prefix))
	}
	t := emission.Interval(limit, period) // rounded up, as in limits.GCRA
	if !emission.Fits(t, o.burst) {
		panic(fmt.Sprintf("redislimit: a burst of %d at one event per %v takes too long to recover", o.burst, time.Duration(t)))
	}
	if o.hashTag {
		o.prefix = "{" + o.prefix + "}"
	}
	g := &GCRA{
		client:   client,
		limit:    limit,
		burst:    o.burst,
		period:   period,
		t:        t,
		d:        t * int64(o.burst),
		prefix:   o.prefix,
		timeout:  o.timeout,
		policy:   o.policy,
		fallback: o.fallback,
		onError:  o.onError,
		ctxAware: honorsContext(client),
	}
	g.unitArgs = g.args(1, true)
	g.peekArgs = g.args(1, false)
	g.lookArgs = g.args(0, false)
	return g
}

// honorsContext reports whether c bounds its socket reads and writes by the
// context's deadline, as go-redis clients do with ContextTimeoutEnabled.
func honorsContext(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// args returns the script's arguments for a request of cost n, 0 <= n <=
// burst, charged if charge is true and n > 0.
func (g *GCRA) args(n int, charge bool) []any {
	cs, cns := splitNanos(int64(n) * g.t)
	ds, dns := splitNanos(g.d)
	flag := "0"
	if charge && n > 0 {
		flag = "1"
	}
	return []any{cs, cns, ds, dns, flag}
}

// Limit returns the events allowed per period.
func (g *GCRA) Limit() int { return g.limit }

// Period returns the period of the limit.
func (g *GCRA) Period() time.Duration { return g.period }

// Burst returns the most unit requests a key may make at once.
func (g *GCRA) Burst() int { return g.burst }

// EmissionInterval returns T, the time one unit request costs: the period
// divided by the limit, rounded up to a whole nanosecond.
func (g *GCRA) EmissionInterval() time.Duration { return time.Duration(g.t) }

// Key returns the name of the Redis key that holds key's state.
func (g *GCRA) Key(key string) string { return g.prefix + key }

// Allow decides a request of cost 1 for key. It is AllowN(ctx, key, 1).
func (g *GCRA) Allow(ctx context.Context, key string) (limits.Decision, error) {
	return g.AllowN(ctx, key, 1)
}

// AllowN decides a request of cost n for key now, on the Redis server's
// clock, and charges it if allowed, in one round trip. As with
// limits.GCRA, a request costing more than the burst is refused with
// limits.ReasonCostAboveBurst and one with a negative cost with
// limits.ReasonInvalidCost, both reporting the key's state; a cost of 0 is
// allowed, charges nothing and reports the key's state.
//
// When Redis answers, the Decision is the one limits.GCRA would make at
// the server's time, and the error is nil. When it does not, the failure
// policy decides (see FailClosed, FailOpen and Fallback): only FailClosed
// returns an error, wrapping ErrUnavailable and the cause.
func (g *GCRA) AllowN(ctx context.Context, key string, n int) (limits.Decision, error) {
	dec, _, err := g.decide(ctx, key, n, true)
	return dec, err
}

// Peek reports what Allow would decide for key now, without charging
// anything. The failure policies apply as for AllowN.
func (g *GCRA) Peek(ctx context.Context, key string) (limits.Decision, error) {
	dec, _, err := g.decide(ctx, key, 1, false)
	return dec, err
}

// Stats is a snapshot of a GCRA's counters.
type Stats struct {
	// Answered counts the calls Redis decided.
	Answered uint64
	// Errors counts the calls Redis gave no decision for: unreachable,
	// too slow for the deadline, or answering with an error. The failure
	// policy decided each of them.
	Errors uint64
	// Fallbacks counts the decisions made by the fallback GCRA; it is 0
	// unless the policy is Fallback, and then equals Errors.
	Fallbacks uint64
}

// Stats returns a snapshot of g's counters. Each counter is read
// atomically, but not all at the same instant.
func (g *GCRA) Stats() Stats {
	return Stats{Answered: g.answered.Load(), Errors: g.errs.Load(), Fallbacks: g.fallbacks.Load()}
}

// decide makes the decision for a request of cost n, charged if charge is
// true, and also returns the server's time of the decision in nanoseconds
// since the Unix epoch, or 0 if Redis did not decide.
func (g *GCRA) decide(ctx context.Context, key string, n int, charge bool) (limits.Decision, int64, error) {
	var reason limits.Reason // for costs no wait can cure
	switch {
	case n < 0:
		reason = limits.ReasonInvalidCost
	case n > g.burst:
		reason = limits.ReasonCostAboveBurst
	}
	cost := int64(n)
	args := g.lookArgs
	switch {
	case reason != limits.ReasonAllowed:
		cost = 0 // report the key's state, as limits.GCRA does
	case n == 0:
	case n == 1 && charge:
		args = g.unitArgs
	case n == 1:
		args = g.peekArgs
	default:
		args = g.args(n, charge)
	}
	r, err := g.call(ctx, g.prefix+key, args)
	if err != nil {
		return g.failed(key, n, charge, reason, err)
	}
	g.answered.Add(1)
	dec := g.decision(r.allowed, r.ahead, cost)
	if reason != limits.ReasonAllowed {
		dec.Allowed, dec.Reason, dec.RetryAfter = false, reason, 0
	}
	return dec, r.now, nil
}

// decision builds the Decision for a script's reply: allowed or not, and
// the TAT after the decision minus now.
func (g *GCRA) decision(allowed bool, ahead, n int64) limits.Decision {
	dec := limits.Decision{
		Allowed:    allowed,
		Limit:      g.limit,
		Period:     g.period,
		Burst:      g.burst,
		Remaining:  int(max(g.d-ahead, 0) / g.t),
		ResetAfter: time.Duration(ahead),
	}
	if !allowed {
		dec.Reason = limits.ReasonRateLimited
		dec.RetryAfter = time.Duration(ahead + n*g.t - g.d)
	}
	return dec
}

// call runs the script for the Redis key rkey, within the caller's context
// and the timeout.
func (g *GCRA) call(ctx context.Context, rkey string, args []any) (reply, error) {
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > g.timeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.timeout)
		defer cancel()
	}
	var r reply
	var err error
	if g.ctxAware {
		r, err = eval(ctx, g.client, []string{rkey}, args)
	} else {
		r, err = g.callAsync(ctx, rkey, args)
	}
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		// A socket deadline set from the context reports an i/o timeout:
		// say which deadline it was.
		err = fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return r, err
}

// callAsync runs the script on its own goroutine and waits for it no longer
// than ctx allows, for clients that do not bound their socket I/O by the
// context. The goroutine ends when the client gives up.
func (g *GCRA) callAsync(ctx context.Context, rkey string, args []any) (reply, error) {
	type result struct {
		r   reply
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := eval(ctx, g.client, []string{rkey}, args)
		done <- result{r, err}
	}()
	select {
	case res := <-done:
		return res.r, res.err
	case <-ctx.Done():
		return reply{}, ctx.Err()
	}
}

// failed applies the failure policy to a request Redis did not decide.
// reason is the refusal a negative cost or one above the burst gets
// whatever Redis says.
func (g *GCRA) failed(key string, n int, charge bool, reason limits.Reason, err error) (limits.Decision, int64, error) {
	g.errs.Add(1)
	err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	if g.onError != nil {
		g.onError(err)
	}
	dec := limits.Decision{Limit: g.limit, Period: g.period, Burst: g.burst, Reason: reason}
	switch g.policy {
	case fallback:
		g.fallbacks.Add(1)
		if !charge {
			return g.fallback.Peek(key), 0, nil
		}
		return g.fallback.AllowN(key, n), 0, nil
	case failOpen:
		dec.Allowed = reason == limits.ReasonAllowed
		return dec, 0, nil
	}
	if reason == limits.ReasonAllowed {
		dec.Reason = limits.ReasonUnavailable
	}
	return dec, 0, err
}
