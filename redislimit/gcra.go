package redislimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
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

// reasonAllowed is the Reason of an allowed request: the zero Reason.
const reasonAllowed limits.Reason = 0

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
// recovers within burst*T like any other. After a change to a smaller
// burst*T (SetLimit), a TAT written under the limit before may run up to
// that limit's burst*T ahead: it is kept, and the key refused until it
// owes no more than the new burst allows. A fraction not below den
// (stored by a limiter with another limit) rounds the TAT up to the
// nanosecond; one below it is read in this limit's units, within a
// nanosecond of what its writer meant.
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
	client redis.UniversalClient
	lim    atomic.Pointer[limitState] // the limit in force
	setMu  sync.Mutex                 // serializes SetLimit
	// callMu is held for reading by each call whose arguments bound how
	// far a TAT may run ahead (decisions, leases, refunds), from the
	// loading of lim to the end of the call, and for writing by a SetLimit
	// that raises D: no call with the old bound then runs after one of
	// the new limit, which may write a TAT further ahead.
	callMu     sync.RWMutex
	prefix     string
	timeout    time.Duration
	policy     ErrorPolicy
	fallback   *limits.GCRA
	onError    func(error)
	ctxAware   bool         // the client bounds its socket I/O by the context
	dials      *dialWatch   // the client's failed dials, or nil
	base       time.Time    // the origin of offset and of the local clock, read from the monotonic clock
	offset     atomic.Int64 // the server's clock minus the time since base, in ns, at the latest reply; unknown if math.MinInt64
	statistics counters     // what Stats reports

	// The lease mode's settings and counters, shared by the lease tables
	// of successive limits; leases is false without WithLeases.
	leases                bool
	leaseSlots, leaseKeys int
	leaseStats            *leaseStats
}

// limitState is a GCRA's limit and what its calls need of it: the policy,
// the scripts' arguments, and in lease mode the lease table, whose slots
// are of this limit only. SetLimit replaces it whole.
type limitState struct {
	p gcra.Policy
	// lead is p with the lead that keys charged under an earlier limit of
	// a larger burst may have (gcra.Policy.Lead above D), which applies
	// until the local clock (time since the GCRA's base) reaches until;
	// until is 0 when no such keys may remain.
	lead  gcra.Policy
	until int64
	den   string // p.Den in decimal, the scripts' first argument
	dArgs []any  // p.D as the scripts take it (timeArgs)
	// lArgs is lead.Lead as the scripts take it, nil without a lead.
	lArgs []any
	// Script arguments for a charge of 1, a look at a cost of 1 and one
	// at 0, without the lead and with it.
	unitArgs, peekArgs, lookArgs []any
	unitLead, peekLead, lookLead []any
	leases                       *leaseTable // the lease mode's table, or nil without WithLeases
}

// newLimitState returns the state of policy p; with a lead above p.D,
// keys may run that far ahead until the local clock reaches until.
func newLimitState(p gcra.Policy, lead gcra.Time, until int64) *limitState {
	st := &limitState{p: p, lead: p, den: strconv.FormatUint(p.Den, 10), dArgs: timeArgs(nil, p.D)}
	if gcra.Less(p.D, lead) {
		st.lead.Lead, st.until, st.lArgs = lead, until, timeArgs(nil, lead)
	}
	st.unitArgs, st.peekArgs, st.lookArgs = st.args(1, true, false), st.args(1, false, false), st.args(0, false, false)
	st.unitLead, st.peekLead, st.lookLead = st.args(1, true, true), st.args(1, false, true), st.args(0, false, true)
	return st
}

// at reports whether the lead applies at now, on g's local clock, and
// returns the policy to judge by: st.lead if it does, st.p if not.
func (st *limitState) at(now int64) (*gcra.Policy, bool) {
	if st.until != 0 && now < st.until {
		return &st.lead, true
	}
	return &st.p, false
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
	// Decision that has Allowed true, reasonAllowed, the GCRA's
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
// burst*T, the time to recover a full burst, exceeds about 73 years, if
// the timeout is not positive, or if a
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
		return nil, fmt.Errorf("redislimit: invalid limit: %s", err)
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
	st := newLimitState(p, p.D, 0)
	if o.leases {
		g.leases, g.leaseSlots, g.leaseKeys, g.leaseStats = true, o.leaseSlots, o.leaseKeys, &leaseStats{}
		if g.leaseKeys == 0 {
			g.leaseKeys = DefaultLeaseKeys
		}
		st.leases = g.newLeases(st, nil)
	}
	g.lim.Store(st)
	return g, nil
}

// clock returns g's local clock: the time since g.base, in ns.
func (g *GCRA) clock() int64 { return int64(time.Since(g.base)) }

// newLeases returns the lease table of the limit st; prev is the table of
// the limit before, or nil.
func (g *GCRA) newLeases(st *limitState, prev *leaseTable) *leaseTable {
	t := newLeaseTable(&st.p, g.leaseSlots, g.leaseKeys, g.clock, redisLeases{g, st})
	t.stats = g.leaseStats
	t.async = func(f func()) { go f() } // a lease taken ahead ends within the timeout
	if prev != nil {
		t.rtt.Store(prev.rtt.Load()) // the calls take as long as before
	}
	return t
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
// 0 <= n <= burst, charged if charge is true and n > 0; with lead, and a
// lead above D, the lead too.
func (st *limitState) args(n int, charge, lead bool) []any {
	flag := "0"
	if charge && n > 0 {
		flag = "1"
	}
	c := st.p.Cost(n)
	args := make([]any, 0, 11)
	args = append(args, flag, strconv.FormatInt(c.NS/1e9, 10), strconv.FormatInt(c.NS%1e9, 10), st.dArgs[0], st.dArgs[1])
	if st.p.Den == 1 && !(lead && st.lArgs != nil) {
		return args
	}
	args = append(args, st.den, strconv.FormatUint(c.Frac, 10), st.dArgs[2])
	if lead && st.lArgs != nil {
		args = append(args, st.lArgs...)
	}
	return args
}

// Limit returns the events allowed per period.
func (g *GCRA) Limit() int { return g.lim.Load().p.Limit }

// Period returns the period of the limit.
func (g *GCRA) Period() time.Duration { return g.lim.Load().p.Period }

// Burst returns the most unit requests a key may make at once.
func (g *GCRA) Burst() int { return g.lim.Load().p.Burst }

// EmissionInterval returns T, the time one unit request costs: the period
// divided by the limit, rounded up to a whole nanosecond. Decisions use T
// exactly, as a fraction of a nanosecond.
func (g *GCRA) EmissionInterval() time.Duration { return time.Duration(gcra.Ceil(g.lim.Load().p.T)) }

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
	for g.leases {
		st := g.lim.Load()
		if n >= 1 && n <= st.p.Burst {
			d, err := st.leases.take(ctx, key, n)
			if err == errRetired {
				continue // SetLimit replaced the table meanwhile
			}
			return d, err
		}
		if d, ok := st.leases.look(key, n, costReason(n, st.p.Burst)); ok {
			return d, nil
		}
		break
	}
	return g.decide(ctx, key, n, true)
}

// costReason returns the refusal a request of cost n gets whatever the
// key's state, or the zero Reason (allowed).
func costReason(n, burst int) limits.Reason {
	switch {
	case n < 0:
		return limits.ReasonInvalidCost
	case n > burst:
		return limits.ReasonCostAboveBurst
	}
	return reasonAllowed
}

// Take is AllowN, for the limits.Limiter interface.
func (g *GCRA) Take(ctx context.Context, key string, n int) (limits.Decision, error) {
	return g.AllowN(ctx, key, n)
}

// Peek reports what Allow would decide for key now, without charging
// anything. The failure policies apply as for AllowN.
func (g *GCRA) Peek(ctx context.Context, key string) (limits.Decision, error) {
	if g.leases {
		if d, ok := g.lim.Load().leases.look(key, 1, reasonAllowed); ok {
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
// the expiry its new TAT calls for, or deleted if it owes nothing. A
// Decision made before a change of limit (SetLimit) gives back its charge
// at the limit it was made under, which it carries in its Limit, Period
// and Burst.
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
	if !d.Allowed || d.Cost <= 0 || d.Cost > d.Burst || d.At.IsZero() {
		return nil
	}
	if d.At != d.At.Round(0) { // a monotonic reading: made in this process
		if g.fallback != nil {
			return g.fallback.Refund(ctx, key, d)
		}
		return nil
	}
	st := g.lim.Load()
	dp, ok := st.policyOf(d)
	if !ok {
		return nil // none of a GCRA's decisions
	}
	if g.leases {
		if dp == &st.p && st.leases.refund(key, d) {
			return nil
		}
		// Made by Redis, or from the slots of a limit since replaced:
		// given back only if nothing was charged since.
		top := gcra.Time{NS: d.At.UnixNano() + int64(max(d.ResetAfter, 0))}
		_, err := g.giveBack(ctx, key, dp, top, d.Cost, true)
		return err
	}
	if err := g.refund(ctx, key, d, dp); err != nil {
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

// policyOf returns the policy of the limit d was made under: st's, or
// one before it; false if d's limit is not valid.
func (st *limitState) policyOf(d limits.Decision) (*gcra.Policy, bool) {
	if d.Limit == st.p.Limit && d.Period == st.p.Period && d.Burst == st.p.Burst {
		return &st.p, true
	}
	p, err := gcra.New(d.Limit, d.Period, d.Burst)
	return &p, err == nil
}

// refund runs the refund script for d, made under the policy dp, at the
// limit in force.
func (g *GCRA) refund(ctx context.Context, key string, d limits.Decision, dp *gcra.Policy) error {
	g.callMu.RLock()
	defer g.callMu.RUnlock()
	st := g.lim.Load()
	// The key's TAT just after the charge, rounded up to the nanosecond,
	// in seconds and nanoseconds since the Unix epoch.
	reset := max(d.ResetAfter, 0)
	s, ns := d.At.Unix()+int64(reset/time.Second), int64(d.At.Nanosecond())+int64(reset%time.Second)
	if ns >= 1e9 {
		s, ns = s+1, ns-1e9
	}
	// The charge, in the units of the limit in force, rounded down; and
	// how far a key's TAT may run ahead, which the script takes as a
	// decision takes it.
	cost := convertDown(dp.Cost(d.Cost), dp.Den, st.p.Den)
	p, _ := st.at(g.clock())
	args := make([]any, 0, 11)
	args = append(args, st.den, strconv.FormatInt(s, 10), strconv.FormatInt(ns, 10))
	args = timeArgs(args, cost)
	args = timeArgs(args, p.Lead)
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
	r, err := g.call(ctx, returnScript, g.prefix+key, args, p)
	if err == nil && r.flag == 2 {
		err = errLate
	}
	return err
}

// convertDown returns t, a time in units of a nanosecond cut into from, in
// units of a nanosecond cut into to, rounded down.
func convertDown(t gcra.Time, from, to uint64) gcra.Time {
	if from == to || t.Frac == 0 {
		return t
	}
	hi, lo := bits.Mul64(t.Frac, to)
	q, _ := bits.Div64(hi, lo, from) // hi < from, as Frac < from
	return gcra.Time{NS: t.NS, Frac: q}
}

// errLate reports a refund that reached Redis after its deadline, and
// gave nothing back.
var errLate = errors.New("the refund reached Redis after its deadline")

// SetLimit changes g's limit to limit events per period, in bursts of
// burst (0 means limit), for every key at once: the decisions g makes
// after it apply the new limit, those before it the old. Each key keeps
// its TAT in Redis, so that no change hands out a fresh burst: under a
// stricter limit a key that owes more than the new burst allows is
// refused, with the exact RetryAfter, until it owes the new burst less
// the request's cost, and under a looser one it gains only the room the
// new limit adds. For as long as keys charged under the old limit may run
// further ahead than the new burst*T (the old burst*T, and the timeout
// for calls in flight), the scripts are told how far they may, and keep
// such a TAT rather than take it as a foreign write (see GCRA). A change
// to a larger burst*T waits for the calls in flight with the old limit to
// end, within the timeout, and holds new calls meanwhile: such a call
// would take a TAT the new limit wrote as a foreign write, and lower it.
// Refunds of decisions made before the change give back what those
// decisions charged, at the old emission interval.
//
// In lease mode the slots in hand were leased at the old emission
// interval: SetLimit gives them back to Redis, as ReturnLeases does,
// within the timeout, and g leases anew at the new limit; slots leased by
// calls in flight at the change are given back as their replies come.
// Slots Redis does not take back (their key was charged since) are
// dropped; LeaseStats.Returned counts both. No slot of the old limit is
// spent once SetLimit has returned. A decision made from the slots in
// hand before the change and refunded after it is given back in Redis if
// nothing was charged for its key since, as a decision Redis made is,
// and stays charged otherwise. WithLeases says what the fleet's
// admissions conform to across a change.
//
// Under the fallback policy, the fallback GCRA gets the same SetLimit;
// one given a share of the fleet's limit is given its new share by its
// own SetLimit after this one.
//
// The limit is each process's, not Redis's: each process of a fleet calls
// SetLimit itself. While they disagree, each decides by its own limit on
// the one TAT per key that Redis keeps, so that the fleet admits up to
// what the looser limit allows; and a process whose burst*T is the
// smaller takes a TAT running further ahead than it, once keys charged
// before its own change can no longer run that far, as a foreign write: a
// key that has just used its full burst.
//
// It returns an error, and changes nothing, for a limit New would refuse.
// It is safe for concurrent use with every other method.
func (g *GCRA) SetLimit(limit int, period time.Duration, burst int) error {
	if burst == 0 {
		burst = limit
	}
	p, err := gcra.New(limit, period, burst)
	if err != nil {
		return fmt.Errorf("redislimit: invalid limit: %s", err)
	}
	g.setMu.Lock()
	defer g.setMu.Unlock()
	if g.fallback != nil {
		if err := g.fallback.SetLimit(limit, period, burst); err != nil {
			return fmt.Errorf("redislimit: %w", err)
		}
	}
	old := g.lim.Load()
	// Keys charged before may run as far ahead as the old limit let
	// them (its lead, at most, while it lasts): until they can no longer,
	// the new limit keeps their lead rather than take it as its burst.
	now := g.clock()
	op, _ := old.at(now)
	lead := p.Convert(op.Lead, op.Den)
	st := newLimitState(p, lead, now+gcra.Ceil(lead)+int64(g.timeout))
	if g.leases {
		st.leases = g.newLeases(st, old.leases)
	}
	// A call in flight with the old limit's arguments takes a TAT further
	// ahead than the old D (or lead) as a foreign write, and lowers it: a
	// larger D waits for those calls to end, and holds new ones meanwhile.
	raise := gcra.Less(convertDown(old.p.D, old.p.Den, p.Den), p.D)
	if raise {
		g.callMu.Lock()
	}
	g.lim.Store(st)
	var runs []leaseReturn
	if old.leases != nil {
		runs = old.leases.retire()
	}
	if raise {
		g.callMu.Unlock()
	}
	if len(runs) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
		old.leases.giveBackRuns(ctx, runs)
		cancel()
	}
	return nil
}

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
	g.callMu.RLock()
	st := g.lim.Load()
	p, lead := st.at(g.clock())
	var reason limits.Reason // for costs no wait can cure
	switch {
	case n < 0:
		reason = limits.ReasonInvalidCost
	case n > p.Burst:
		reason = limits.ReasonCostAboveBurst
	}
	cost := n
	args := st.lookArgs
	switch {
	case reason != reasonAllowed:
		cost = 0 // report the key's state, as limits.GCRA does
		if lead {
			args = st.lookLead
		}
	case n == 0:
		if lead {
			args = st.lookLead
		}
	case n == 1 && charge:
		args = st.unitArgs
		if lead {
			args = st.unitLead
		}
	case n == 1:
		args = st.peekArgs
		if lead {
			args = st.peekLead
		}
	default:
		args = st.args(n, charge, lead)
	}
	ctx, cancel := g.bound(ctx)
	r, err := g.call(ctx, decideScript, g.prefix+key, args, p)
	cancel()
	g.callMu.RUnlock()
	if err != nil {
		return g.failed(st, key, n, charge, reason, err)
	}
	g.statistics.answered.Add(1)
	res := p.Report(r.flag == 1, r.ahead, cost)
	dec := limits.Decision{
		Allowed:    res.Allowed,
		Limit:      p.Limit,
		Period:     p.Period,
		Burst:      p.Burst,
		Cost:       n,
		Remaining:  res.Remaining,
		ResetAfter: res.ResetAfter,
		At:         r.now,
	}
	switch {
	case reason != reasonAllowed:
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

// call runs script s for the Redis key rkey, within ctx, which bound has
// bounded, and checks its reply: how far the key runs ahead, in p's
// units, at most p.Lead.
func (g *GCRA) call(ctx context.Context, s *redis.Script, rkey string, args []any, p *gcra.Policy) (reply, error) {
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
		if r.ahead.NS < 0 || gcra.Less(p.Lead, r.ahead) || r.ahead.Frac >= p.Den {
			err = fmt.Errorf("%w: the key runs %d+%d/%dns ahead", errReply, r.ahead.NS, r.ahead.Frac, p.Den)
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
func (g *GCRA) failed(st *limitState, key string, n int, charge bool, reason limits.Reason, err error) (limits.Decision, error) {
	g.statistics.errs.Add(1)
	g.statistics.failure(err)
	err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	if g.onError != nil {
		g.onError(err)
	}
	dec := limits.Decision{Limit: st.p.Limit, Period: st.p.Period, Burst: st.p.Burst, Cost: n, Reason: reason}
	switch g.policy {
	case fallback:
		g.statistics.fallbacks.Add(1)
		if !charge {
			return g.fallback.Peek(key), nil
		}
		return g.fallback.AllowN(key, n), nil
	case FailOpen:
		dec.Allowed = reason == reasonAllowed
		return dec, nil
	}
	if reason == reasonAllowed {
		dec.Reason = limits.ReasonUnavailable
	}
	return dec, err
}
