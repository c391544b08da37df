package redislimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/internal/gcra"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix is the prefix of every Redis key a GCRA writes unless
// WithPrefix says otherwise.
const DefaultPrefix = "limits:"

// DefaultTimeout bounds each call to Redis unless WithTimeout says
// otherwise, or the caller's context ends sooner.
const DefaultTimeout = 100 * time.Millisecond

// ErrUnavailable is wrapped by every error a GCRA returns: Redis gave no
// decision, or applied no refund, because it could not be reached, did not
// answer in time or answered with an error (such as a key holding
// something other than a TAT). The error also wraps the cause, such as
// context.DeadlineExceeded, and, when the time went on connecting, the
// connection's error, such as syscall.ECONNREFUSED.
var ErrUnavailable = errors.New("redislimit: no decision from Redis")

// GCRA is the generic cell rate algorithm of limits.GCRA with its state in
// Redis, so that any number of processes share one limit per key. Its
// decisions are those of a limits.GCRA with the same limit, period and
// burst, made on the Redis server's clock, with the same exact arithmetic:
// the emission interval T = period/limit is kept as a fraction of a
// nanosecond, never rounded, so 7 an hour lets exactly 7 through at once.
//
// Each decision is one call of a Lua script, sent by its SHA-1 with EVALSHA
// (and once by its source after the server lost its script cache). The
// script reads the time with the Redis TIME command, never the client's
// clock, so processes whose clocks disagree still share one timeline; TIME
// has microseconds, so the clock advances in steps of a microsecond. The
// Decision's At is that time.
//
// The state of a key is its theoretical arrival time (TAT), stored as a
// string under the key's name with the prefix: the TAT in whole nanoseconds
// since the Unix epoch, in decimal, followed, when the TAT has a fraction of
// a nanosecond, by a colon and that fraction in units of 1/den ns, where den
// is the least number of units that makes T whole (den = limit/gcd(period,
// limit), at most 2^32). At 7 an hour, T is 514285714285+5/7 ns, and a key
// charged once at 2026-01-01 00:00 UTC holds "1767226114285714285:5"; with
// a fraction of 0, the colon and fraction are left out, always so for
// limits whose T is a whole number of nanoseconds. The key is set to
// expire, at the TAT rounded up to the millisecond, when it is back to its
// full burst.
//
// A key that holds anything else (not a string, not digits, or a malformed
// fraction) gives an error naming it, and the failure policy decides. A TAT
// in the past is a key that owes nothing. A TAT further ahead of now than
// burst*T, which the script never writes, comes from another writer or
// from a server clock that went back: it is taken as now + burst*T, a key
// that has just used its whole burst, and stored so, so that the key
// recovers within burst*T like any other. A fraction not below den (stored
// by a limiter with another limit) rounds the TAT up to the nanosecond.
//
// Refund gives back a charge that a later check refused, as
// limits.GCRA.Refund does, in one more script call: the part of the charge
// the key still owes, never leaving it owing less than had the request
// never been made.
//
// When Redis gives no decision (down, unreachable, slow beyond the deadline,
// or answering with an error), the failure policy chosen at construction
// decides: FailClosed (the default), FailOpen or a fallback to a local
// GCRA (OnError, WithFallback). Each such call
// is counted in Stats.
//
// A decision costs one round trip to Redis and a few microseconds of the
// server's time; with a client that New cannot bound by the context (see
// New) it also costs a goroutine.
//
// All methods are safe for concurrent use. The zero value is not usable;
// call New.
type GCRA struct {
	client     redis.UniversalClient
	p          gcra.Policy
	den        string // p.Den in decimal, the scripts' first argument
	dArgs      []any  // p.D as the scripts take it (timeArgs)
	prefix     string
	timeout    time.Duration
	policy     ErrorPolicy
	fallback   *limits.GCRA
	onError    func(error)
	ctxAware   bool         // the client bounds its socket I/O by the context
	dials      *dialWatch   // the client's failed dials, or nil
	base       time.Time    // the origin of offset, read from the monotonic clock
	offset     atomic.Int64 // the server's clock minus the time since base, in ns, at the latest reply; unknown if math.MinInt64
	unitArgs   []any        // script arguments for a charge of 1
	peekArgs   []any        // for a look at a cost of 1
	lookArgs   []any        // for a look at a cost of 0
	statistics counters     // what Stats reports
	leases     *leaseTable  // the lease mode's table, or nil without WithLeases
}

var _ limits.Limiter = (*GCRA)(nil)

// ErrorPolicy says what a GCRA does when Redis gives no decision: down,
// unreachable, too slow for the deadline, or answering with an error; its
// zero value is FailClosed. The
// words are those of httplimit's and grpclimit's ErrorPolicy, which say
// what a front end does with a limiter's error; a third policy, the
// fallback to a local GCRA, is set with WithFallback.
type ErrorPolicy uint8

const (
	// FailClosed, the default, refuses: AllowN returns an error wrapping
	// ErrUnavailable with a Decision that has Allowed false, Reason
	// limits.ReasonUnavailable, the GCRA's Limit, Period and Burst, the
	// Cost asked, and every other field 0, At included, as no clock was
	// read. A request whose cost is negative or above the burst is refused
	// with its own reason, limits.ReasonInvalidCost or
	// limits.ReasonCostAboveBurst, still with the error. Nothing passes
	// unmetered, and the caller sees that Redis failed.
	FailClosed ErrorPolicy = iota
	// FailOpen lets requests through: AllowN returns a nil error and a
	// Decision that has Allowed true, limits.ReasonAllowed, the GCRA's
	// Limit, Period and Burst, the Cost asked, and every other field 0, as
	// nothing is known of the key: At is zero, and Refund knows from it
	// that nothing was charged. Requests whose cost is negative or above
	// the burst are still refused, with their own reason. Errors are only
	// seen in Stats and by the WithErrorHandler function. While Redis is
	// down nothing is limited.
	FailOpen
	// fallback decides with the GCRA given to WithFallback.
	fallback
)

// Option configures a GCRA; see New for the defaults. A nil Option is not
// valid.
type Option func(*options)

type options struct {
	burst    int
	prefix   string
	hashTag  bool
	timeout  time.Duration
	policy   ErrorPolicy
	fallback *limits.GCRA
	onError  func(error)

	leases                bool
	leaseSlots, leaseKeys int
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

// OnError sets the failure policy: FailClosed (the default) or FailOpen.
func OnError(p ErrorPolicy) Option { return func(o *options) { o.policy, o.fallback = p, nil } }

// WithFallback sets the failure policy that decides locally: when Redis
// gives no decision, AllowN returns g's decision, g.AllowN(key, n) (g.Peek
// for Peek), and a nil error. g keeps its own state: what it allowed is
// not charged in Redis, and when Redis comes back the keys' state there is
// what it was before (or empty, if Redis lost it). Refund gives g's
// decisions back to g.
//
// g limits each process on its own: while Redis is down, N processes
// together allow up to N times g's rate. Give g the fleet's limit divided
// by the number of processes to keep the total, or the full limit to let no
// single caller notice the outage. WithFallback panics if g is nil.
func WithFallback(g *limits.GCRA) Option {
	if g == nil {
		panic("redislimit: nil fallback GCRA")
	}
	return func(o *options) { o.policy, o.fallback = fallback, g }
}

// WithErrorHandler sets a function called with each error from Redis,
// before the failure policy decides, for logging. It is called on the
// request's goroutine, or for a lease taken ahead (WithLeases), whose
// failure no request's policy decides, on that lease's own goroutine; it
// must be safe for concurrent use. The errors are those AllowN returns
// under FailClosed, and those of leases taken ahead.
func WithErrorHandler(f func(error)) Option { return func(o *options) { o.onError = f } }

// New returns a GCRA allowing each key limit events per period, with its
// state in Redis through client: a *redis.Client, a Sentinel failover
// client or a *redis.ClusterClient, as redis.NewUniversalClient returns.
// New does not contact Redis; Redis may be down until the first call, and
// go down and come back at any time.
//
// Every call is bounded by the caller's context and the timeout. A client
// with ContextTimeoutEnabled set stops waiting on the socket itself when the
// time is up. So does a *redis.Client without it: its hook (below) sends
// the GCRA's commands, once the hooks added to the client before have seen
// them, with a client made from it by Client.WithTimeout, which shares its
// connections and timeouts but bounds its reads and writes by the context;
// hooks added to the client after the first New for it do not see them.
// With any other client (a ClusterClient without ContextTimeoutEnabled, a
// Ring, or a client whose timeouts turn socket deadlines off), each call
// runs on a goroutine of its own: the GCRA still returns in time, and the
// command runs on in the background until the client's own ReadTimeout.
//
// So that an error can say why Redis could not be reached (connection
// refused, no such host) rather than only that the deadline passed, New
// adds a hook (redis.Hook) that notes failed dials to a *redis.Client, or
// to the node clients a *redis.ClusterClient makes from then on; the hook
// changes nothing else but what is said above, and a client gets one
// however many GCRAs use it.
//
// New returns an error if limit, period or the burst is not positive, or
// burst*T, the time to recover a full burst, exceeds about 73 years (these
// wrap limits.ErrInvalidLimit), if the timeout is not positive, or if a
// hash tag is asked for with an empty prefix or one containing braces. It
// panics if client is nil, a programming error.
func New(client redis.UniversalClient, limit int, period time.Duration, opts ...Option) (*GCRA, error) {
	o := options{burst: limit, prefix: DefaultPrefix, timeout: DefaultTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	if client == nil {
		panic("redislimit: nil client")
	}
	p, err := gcra.New(limit, period, o.burst)
	switch {
	case err != nil:
		return nil, fmt.Errorf("redislimit: %w: %s", limits.ErrInvalidLimit, err)
	case o.timeout <= 0:
		return nil, fmt.Errorf("redislimit: timeout must be > 0, got %v", o.timeout)
	case o.hashTag && (o.prefix == "" || strings.ContainsAny(o.prefix, "{}")):
		return nil, fmt.Errorf("redislimit: a hash tag needs a non-empty prefix without braces, got %q", o.prefix)
	case o.policy > fallback:
		return nil, fmt.Errorf("redislimit: unknown failure policy %d", o.policy)
	case o.leases && (o.leaseSlots < 2 || o.leaseSlots > MaxLeaseSlots):
		return nil, fmt.Errorf("redislimit: a lease must be of 2 to %d slots, got %d", MaxLeaseSlots, o.leaseSlots)
	case o.leases && o.leaseKeys < 0:
		return nil, fmt.Errorf("redislimit: the lease table must hold >= 0 keys, got %d", o.leaseKeys)
	}
	if o.hashTag {
		o.prefix = "{" + o.prefix + "}"
	}
	g := &GCRA{
		client:   client,
		p:        p,
		den:      strconv.FormatUint(p.Den, 10),
		dArgs:    timeArgs(nil, p.D),
		prefix:   o.prefix,
		timeout:  o.timeout,
		policy:   o.policy,
		fallback: o.fallback,
		onError:  o.onError,
		dials:    watchDials(client),
		base:     time.Now(),
	}
	g.ctxAware = honorsContext(client) || g.dials.diverts()
	g.offset.Store(math.MinInt64)
	g.unitArgs = g.args(1, true)
	g.peekArgs = g.args(1, false)
	g.lookArgs = g.args(0, false)
	if o.leases {
		keys := o.leaseKeys
		if keys == 0 {
			keys = DefaultLeaseKeys
		}
		g.leases = newLeaseTable(&g.p, o.leaseSlots, keys, func() int64 { return int64(time.Since(g.base)) }, redisLeases{g})
		g.leases.async = func(f func()) { go f() } // a lease taken ahead ends within the timeout
	}
	return g, nil
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

// args returns the decision script's arguments for a request of cost n,
// 0 <= n <= burst, charged if charge is true and n > 0.
func (g *GCRA) args(n int, charge bool) []any {
	flag := "0"
	if charge && n > 0 {
		flag = "1"
	}
	c := g.p.Cost(n)
	args := make([]any, 0, 8)
	args = append(args, flag, strconv.FormatInt(c.NS/1e9, 10), strconv.FormatInt(c.NS%1e9, 10), g.dArgs[0], g.dArgs[1])
	if g.p.Den == 1 {
		return args
	}
	return append(args, g.den, strconv.FormatUint(c.Frac, 10), g.dArgs[2])
}

// Limit returns the events allowed per period.
func (g *GCRA) Limit() int { return g.p.Limit }

// Period returns the period of the limit.
func (g *GCRA) Period() time.Duration { return g.p.Period }

// Burst returns the most unit requests a key may make at once.
func (g *GCRA) Burst() int { return g.p.Burst }

// EmissionInterval returns T, the time one unit request costs: the period
// divided by the limit, rounded up to a whole nanosecond. Decisions use T
// exactly, as a fraction of a nanosecond.
func (g *GCRA) EmissionInterval() time.Duration { return time.Duration(gcra.Ceil(g.p.T)) }

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
// the server's time, which is its At, and the error is nil. When it does
// not, the failure policy decides (see FailClosed, FailOpen and WithFallback):
// only FailClosed returns an error, wrapping ErrUnavailable and the cause.
//
// In lease mode (WithLeases), a request for a key that is hot in this
// process is decided from the slots in hand, without a call, as
// WithLeases describes.
func (g *GCRA) AllowN(ctx context.Context, key string, n int) (limits.Decision, error) {
	if g.leases != nil {
		if n >= 1 && n <= g.p.Burst {
			return g.leases.take(ctx, key, n)
		}
		if d, ok := g.leases.look(key, n, costReason(n, g.p.Burst)); ok {
			return d, nil
		}
	}
	return g.decide(ctx, key, n, true)
}

// costReason returns the refusal a request of cost n gets whatever the
// key's state, or ReasonAllowed.
func costReason(n, burst int) limits.Reason {
	switch {
	case n < 0:
		return limits.ReasonInvalidCost
	case n > burst:
		return limits.ReasonCostAboveBurst
	}
	return limits.ReasonAllowed
}

// Take is AllowN, for the limits.Limiter interface.
func (g *GCRA) Take(ctx context.Context, key string, n int) (limits.Decision, error) {
	return g.AllowN(ctx, key, n)
}

// Peek reports what Allow would decide for key now, without charging
// anything. The failure policies apply as for AllowN.
func (g *GCRA) Peek(ctx context.Context, key string) (limits.Decision, error) {
	if g.leases != nil {
		if d, ok := g.leases.look(key, 1, limits.ReasonAllowed); ok {
			return d, nil
		}
	}
	return g.decide(ctx, key, 1, false)
}

// Refund gives back the charge of d, an allowed Decision that AllowN, Take
// or Allow returned for key, in one call of a script that reads and writes
// the key atomically: the part of the charge the key still owes at the
// server's time, and never so much that the key owes less than had the
// request never been made. When no other request for key came in between,
// the key is left as it was before the charge, to within a nanosecond
// towards owing more: the key's TAT after the charge is known to the
// nanosecond above, as d.At + d.ResetAfter, not to the fraction. Once the
// charge's time has passed, nothing is owed and nothing is given back. A
// charge must be refunded once: a second refund gives back nothing more if
// nothing came in between, but may otherwise. The key is stored again with
// the expiry its new TAT calls for, or deleted if it owes nothing.
//
// Refund does nothing and returns nil for a refused Decision, one of cost
// 0, one that charged nothing anywhere (the FailOpen answer, whose At is
// zero) or a key Redis does not hold (it expired, or Redis lost it). A
// Decision the fallback policy's limits.GCRA made is refunded to that GCRA:
// such a Decision is told apart by its At, which carries a monotonic clock
// reading, as times from time.Now do, while times from the Redis server's
// clock carry none. Without a fallback, such a Decision is none of this
// GCRA's, and Refund does nothing.
//
// When Redis does not answer in time, or answers with an error, Refund
// returns an error wrapping ErrUnavailable and the cause, calls the
// WithErrorHandler function and counts the failure in Stats, whatever the
// failure policy, and the charge stays in place: a key never owes less for
// a failed refund. A refund that reached Redis but ran after its caller's
// deadline (the server was stalled, say) gives nothing back: the script
// checks the deadline against the server's clock, placed from the times of
// its earlier replies so as to err early. What no client can rule out is a
// refund run in time whose reply came late: Refund then returns an error,
// and Redis has applied it.
func (g *GCRA) Refund(ctx context.Context, key string, d limits.Decision) error {
	if !d.Allowed || d.Cost <= 0 || d.Cost > g.p.Burst || d.At.IsZero() {
		return nil
	}
	if d.At != d.At.Round(0) { // a monotonic reading: made in this process
		if g.fallback != nil {
			return g.fallback.Refund(ctx, key, d)
		}
		return nil
	}
	if g.leases != nil {
		if g.leases.refund(key, d) {
			return nil
		}
		// Made by Redis: given back only if nothing was charged since.
		top := gcra.Time{NS: d.At.UnixNano() + int64(max(d.ResetAfter, 0))}
		_, err := redisLeases{g}.giveBack(ctx, key, top, d.Cost, true)
		return err
	}
	// The key's TAT just after the charge, rounded up to the nanosecond,
	// in seconds and nanoseconds since the Unix epoch.
	reset := max(d.ResetAfter, 0)
	s, ns := d.At.Unix()+int64(reset/time.Second), int64(d.At.Nanosecond())+int64(reset%time.Second)
	if ns >= 1e9 {
		s, ns = s+1, ns-1e9
	}
	args := make([]any, 0, 11)
	args = append(args, g.den, strconv.FormatInt(s, 10), strconv.FormatInt(ns, 10))
	args = timeArgs(args, g.p.Cost(d.Cost))
	args = append(args, g.dArgs...)
	ctx, cancel := g.bound(ctx)
	defer cancel()
	// The deadline on the server's clock, a little early, so that a
	// script run after its caller gave up gives nothing back.
	deadline, off := "", ""
	if end, ok := ctx.Deadline(); ok && g.offset.Load() != math.MinInt64 {
		at := g.offset.Load() + int64(end.Sub(g.base)) // offset is never unknown again
		deadline, off = strconv.FormatInt(at/1e9, 10), strconv.FormatInt(at%1e9/1e3, 10)
	}
	args = append(args, deadline, off)
	r, err := g.call(ctx, returnScript, g.prefix+key, args)
	if err == nil && r.flag == 2 {
		err = errLate
	}
	if err != nil {
		g.statistics.refundErrs.Add(1)
		g.statistics.failure(err)
		err = fmt.Errorf("%w: refund not applied: %w", ErrUnavailable, err)
		if g.onError != nil {
			g.onError(err)
		}
		return err
	}
	g.statistics.refunds.Add(1)
	return nil
}

// errLate reports a refund that reached Redis after its deadline, and
// gave nothing back.
var errLate = errors.New("the refund reached Redis after its deadline")

// Reset forgets key's state in Redis, so that its next request finds its
// full burst: to unblock a client by hand, say. It deletes the key's Redis
// key, within the caller's context and the timeout. Under the fallback
// policy it forgets key in the fallback GCRA too. An error wraps
// ErrUnavailable.
func (g *GCRA) Reset(ctx context.Context, key string) error {
	if g.fallback != nil {
		g.fallback.Reset(key)
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	if err := g.client.Del(g.dials.boundContext(ctx), g.prefix+key).Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// decide makes the decision for a request of cost n, charged if charge is
// true.
func (g *GCRA) decide(ctx context.Context, key string, n int, charge bool) (limits.Decision, error) {
	var reason limits.Reason // for costs no wait can cure
	switch {
	case n < 0:
		reason = limits.ReasonInvalidCost
	case n > g.p.Burst:
		reason = limits.ReasonCostAboveBurst
	}
	cost := n
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
	ctx, cancel := g.bound(ctx)
	r, err := g.call(ctx, decideScript, g.prefix+key, args)
	cancel()
	if err != nil {
		return g.failed(key, n, charge, reason, err)
	}
	g.statistics.answered.Add(1)
	res := g.p.Report(r.flag == 1, r.ahead, cost)
	dec := limits.Decision{
		Allowed:    res.Allowed,
		Limit:      g.p.Limit,
		Period:     g.p.Period,
		Burst:      g.p.Burst,
		Cost:       n,
		Remaining:  res.Remaining,
		ResetAfter: res.ResetAfter,
		At:         r.now,
	}
	switch {
	case reason != limits.ReasonAllowed:
		dec.Allowed, dec.Reason = false, reason
	case !res.Allowed:
		dec.Reason, dec.RetryAfter = limits.ReasonRateLimited, res.RetryAfter
	}
	return dec, nil
}

// bound returns ctx, ending no later than the timeout from now.
func (g *GCRA) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > g.timeout {
		return context.WithTimeout(ctx, g.timeout)
	}
	return ctx, func() {}
}

// call runs script s for the Redis key rkey, within
// ctx, which bound has bounded, and checks its reply.
func (g *GCRA) call(ctx context.Context, s *redis.Script, rkey string, args []any) (reply, error) {
	start := time.Now()
	var r reply
	var err error
	if g.ctxAware {
		r, err = eval(g.dials.boundContext(ctx), g.client, s, []string{rkey}, args)
	} else {
		r, err = g.callAsync(ctx, s, rkey, args)
	}
	g.statistics.observe(time.Since(start))
	if err == nil {
		if r.ahead.NS < 0 || gcra.Less(g.p.D, r.ahead) || r.ahead.Frac >= g.p.Den {
			err = fmt.Errorf("%w: the key runs %d+%d/%dns ahead", errReply, r.ahead.NS, r.ahead.Frac, g.p.Den)
			return r, err
		}
		// The server read its clock before the reply came: this offset
		// puts the server's clock behind the truth by at most a round
		// trip.
		g.offset.Store(r.now.UnixNano() - int64(time.Since(g.base)))
		return r, nil
	}
	if cause := ended(ctx, err); cause != nil {
		if !errors.Is(err, cause) {
			// A socket deadline set from the context reports an i/o
			// timeout: say which deadline it was.
			err = fmt.Errorf("%w: %w", cause, err)
		}
		if dial := g.dials.since(start); dial != nil {
			// The time went on connecting: say why that failed.
			return r, &connectFailed{fmt.Errorf("%w, connecting failed: %w", err, dial)}
		}
	}
	return r, err
}

// ended returns why ctx ended, if the call that failed with err ran out of
// ctx's time: ctx.Err(), or context.DeadlineExceeded for a timeout at or
// past ctx's deadline while ctx.Err() is still nil, as when the socket's
// deadline, taken from ctx's, fires before ctx's own timer. It returns nil
// for a call that failed for another reason before its time was up.
func ended(ctx context.Context, err error) error {
	if e := ctx.Err(); e != nil {
		return e
	}
	var ne net.Error
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
			return context.DeadlineExceeded
		}
	}
	return nil
}

// callAsync runs a script on its own goroutine and waits for it no longer
// than ctx allows, for clients that do not bound their socket I/O by the
// context. The goroutine ends when the client gives up.
func (g *GCRA) callAsync(ctx context.Context, s *redis.Script, rkey string, args []any) (reply, error) {
	type result struct {
		r   reply
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := eval(ctx, g.client, s, []string{rkey}, args)
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
func (g *GCRA) failed(key string, n int, charge bool, reason limits.Reason, err error) (limits.Decision, error) {
	g.statistics.errs.Add(1)
	g.statistics.failure(err)
	err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	if g.onError != nil {
		g.onError(err)
	}
	dec := limits.Decision{Limit: g.p.Limit, Period: g.p.Period, Burst: g.p.Burst, Cost: n, Reason: reason}
	switch g.policy {
	case fallback:
		g.statistics.fallbacks.Add(1)
		if !charge {
			return g.fallback.Peek(key), nil
		}
		return g.fallback.AllowN(key, n), nil
	case FailOpen:
		dec.Allowed = reason == limits.ReasonAllowed
		return dec, nil
	}
	if reason == limits.ReasonAllowed {
		dec.Reason = limits.ReasonUnavailable
	}
	return dec, err
}
