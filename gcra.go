package limits

import (
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitsgo/limits/internal/emission"
)

// DefaultMaxKeys is the number of keys a GCRA holds at most unless
// WithMaxKeys says otherwise: 1,048,576 keys, under 64 MiB of table.
const DefaultMaxKeys = 1 << 20

// maxSpan bounds every time a GCRA computes with, in nanoseconds from its
// creation (about 73 years either way), so that sums of two never overflow.
const maxSpan = emission.MaxSpan

// gcraShards is the number of independently locked parts of a GCRA's table.
const gcraShards = 64

// GCRA is an exact per-key rate limiter: the generic cell rate algorithm,
// in integer nanoseconds, with a bounded table of keys that fails closed.
//
// Each key has a theoretical arrival time (TAT). With limit events per
// period, the emission interval is T = period/limit, rounded up to a whole
// nanosecond so that the limit is never exceeded, and a key may run at most
// burst*T ahead of now. A request of cost n at time now is allowed if and
// only if
//
//	max(TAT, now) + n*T - burst*T <= now
//
// (the usual max(TAT, now) + n*T - tau - T <= now with tau = T*(burst-1));
// when allowed, TAT becomes max(TAT, now) + n*T, and a refusal changes
// nothing. There is no window edge to exploit: in any interval of length d,
// at most burst + d/T unit requests pass.
//
// The table holds at most MaxKeys keys (DefaultMaxKeys unless WithMaxKeys
// says otherwise): a key whose TAT is in the future is never dropped, a key
// whose TAT has passed carries no information and is dropped when room is
// needed, and a new key that finds the table full is refused with
// ReasonTableFull. Nobody already limited is ever let off. Finding expired
// keys takes a sweep of part of the table, done at most once per 1/32 of
// the burst's recovery time for each part, so that a table kept full costs
// a bounded amount of sweeping per request; an expired key may therefore
// hold its place for up to that long before it makes room.
//
// Keys are held as 64-bit hashes under a seed drawn for each GCRA, 16 bytes
// of state per key plus the table's overhead. Two keys with the same hash
// share one budget: among a million keys in use the odds that any two do
// are about 1 in 37 million, and such a collision only makes two callers
// share a limit; it never lets either go unlimited.
//
// All methods are safe for concurrent use. The zero value is not usable;
// call NewGCRA.
type GCRA struct {
	limit   int
	burst   int
	period  time.Duration
	t       int64 // emission interval T
	d       int64 // burst*T: how far TAT may run ahead of now
	maxKeys int64
	start   time.Time
	seed    maphash.Seed
	keys    atomic.Int64 // entries in all shards, expired ones not yet dropped included
	sweeps  atomic.Int64 // shard sweeps so far, for tests
	shards  [gcraShards]gcraShard
}

// gcraShard is one part of the table, with its own lock.
type gcraShard struct {
	mu  sync.Mutex
	tat map[uint64]int64
	// next is when a sweep may next be worth its cost: at most the
	// smallest TAT in tat (math.MaxInt64 if tat is empty), so that nothing
	// has expired before it, but no sooner than sweepGap after the last
	// sweep, so that sweeps cost a bounded amount per request. It is
	// written under mu and read without it.
	next      atomic.Int64
	lastSweep int64 // when the shard was last swept
	swept     int   // len(tat) after the last sweep
}

// Decision is the answer of a limiter to one request.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// Reason says why the request was refused, or is ReasonAllowed.
	Reason Reason
	// Limit is the policy's number of events per Period.
	Limit int
	// Period is the policy's period.
	Period time.Duration
	// Burst is the most unit requests a key may make at once.
	Burst int
	// Remaining is how many requests of cost 1 the key could make right
	// now, after this decision.
	Remaining int
	// RetryAfter, for a request refused with ReasonRateLimited, is exactly
	// how long to wait before the same request would be allowed; it is 0
	// for allowed requests and for refusals that waiting cannot cure or
	// whose end cannot be known (the other reasons).
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back to its full burst, if
	// it makes no more requests.
	ResetAfter time.Duration
}

// Reason tells refusals apart.
type Reason uint8

const (
	// ReasonAllowed is the Reason of an allowed request.
	ReasonAllowed Reason = iota
	// ReasonRateLimited: the key has used its burst; see RetryAfter.
	ReasonRateLimited
	// ReasonTableFull: the key is new and the table is full of keys whose
	// state is in use.
	ReasonTableFull
	// ReasonCostAboveBurst: the request costs more than the burst, so it
	// can never be allowed.
	ReasonCostAboveBurst
	// ReasonInvalidCost: the request's cost is negative.
	ReasonInvalidCost
	// ReasonUnavailable: a limiter whose state lives elsewhere (such as the
	// Redis GCRA of package redislimit) could not reach it and refuses
	// rather than let the request through unmetered. It always comes with
	// an error; a GCRA never returns it.
	ReasonUnavailable
)

var reasonNames = [...]string{"allowed", "rate_limited", "table_full", "cost_above_burst", "invalid_cost", "unavailable"}

// String returns the reason as a code for logs and responses, such as
// "rate_limited".
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// GCRAOption configures a GCRA.
type GCRAOption func(*gcraOptions)

type gcraOptions struct {
	burst   int
	maxKeys int
}

// WithBurst sets how many unit requests a key may make at once, after a
// pause long enough to recover. The default is the limit: one full quota at
// once. A burst of 1 spaces every request by T = period/limit.
func WithBurst(n int) GCRAOption { return func(o *gcraOptions) { o.burst = n } }

// WithMaxKeys sets the most keys the GCRA holds at once, DefaultMaxKeys by
// default. The table grows with the keys in use up to this cap, and stays
// under 64 bytes per key of the cap (about 47 measured at the cap).
func WithMaxKeys(n int) GCRAOption { return func(o *gcraOptions) { o.maxKeys = n } }

// NewGCRA returns a GCRA allowing each key limit events per period. It
// panics if limit, period, the burst or the maximum number of keys is not
// positive, or if burst*T, the time to recover a full burst, exceeds about
// 73 years; NewGCRAFor returns these as errors.
func NewGCRA(limit int, period time.Duration, opts ...GCRAOption) *GCRA {
	g, err := newGCRA(limit, period, opts)
	if err != nil {
		panic(err.Error())
	}
	return g
}

// NewGCRAFor returns a GCRA allowing each key l.Events per l.Period, or an
// error wrapping ErrInvalidLimit where NewGCRA would panic: the constructor
// for limits read at run time, as from ParseLimit.
func NewGCRAFor(l Limit, opts ...GCRAOption) (*GCRA, error) {
	g, err := newGCRA(l.Events, l.Period, opts)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidLimit, strings.TrimPrefix(err.Error(), "limits: "))
	}
	return g, nil
}

func newGCRA(limit int, period time.Duration, opts []GCRAOption) (*GCRA, error) {
	o := gcraOptions{burst: limit, maxKeys: DefaultMaxKeys}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case limit < 1:
		return nil, fmt.Errorf("limits: limit must be >= 1, got %d", limit)
	case period <= 0:
		return nil, fmt.Errorf("limits: period must be > 0, got %v", period)
	case o.burst < 1:
		return nil, fmt.Errorf("limits: burst must be >= 1, got %d", o.burst)
	case o.maxKeys < 1:
		return nil, fmt.Errorf("limits: max keys must be >= 1, got %d", o.maxKeys)
	}
	t := emission.Interval(limit, period)
	if !emission.Fits(t, o.burst) {
		return nil, fmt.Errorf("limits: a burst of %d at one event per %v takes too long to recover", o.burst, time.Duration(t))
	}
	g := &GCRA{
		limit:   limit,
		burst:   o.burst,
		period:  period,
		t:       t,
		d:       t * int64(o.burst),
		maxKeys: int64(o.maxKeys),
		seed:    maphash.MakeSeed(),
	}
	for i := range g.shards {
		g.shards[i].tat = make(map[uint64]int64)
		g.shards[i].next.Store(math.MaxInt64)
		g.shards[i].lastSweep = -maxSpan
	}
	g.start = time.Now()
	return g, nil
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

// MaxKeys returns the most keys the GCRA holds at once.
func (g *GCRA) MaxKeys() int { return int(g.maxKeys) }

// Len returns the number of keys held, counting those whose state has
// expired but has not been dropped yet.
func (g *GCRA) Len() int { return int(g.keys.Load()) }

// Allow decides a request of cost 1 for key now. It is AllowN(key, 1).
func (g *GCRA) Allow(key string) Decision {
	return g.decide(g.now(), maphash.String(g.seed, key), 1, true)
}

// AllowN decides a request of cost n for key now, and charges it if
// allowed. A request costing more than the burst is refused with
// ReasonCostAboveBurst, one with a negative cost with ReasonInvalidCost; a
// cost of 0 is always allowed, charges nothing and reports the key's state.
func (g *GCRA) AllowN(key string, n int) Decision {
	return g.decide(g.now(), maphash.String(g.seed, key), n, true)
}

// AllowNAt is AllowN at time t instead of now, in the manner of
// golang.org/x/time/rate. A request dated before the key's latest state is
// judged against that state, which can only make the answer stricter (and
// Remaining is then 0). The table drops expired keys by the real clock,
// never by a time passed here, so that a date in the future cannot clear
// other keys' state; a key charged at such a date stays in the table until
// the real clock reaches it. Times more than about 73 years from the
// GCRA's creation are clamped.
func (g *GCRA) AllowNAt(t time.Time, key string, n int) Decision {
	return g.decide(g.at(t), maphash.String(g.seed, key), n, true)
}

// Peek reports what Allow would decide for key now, without charging
// anything or adding the key to the table.
func (g *GCRA) Peek(key string) Decision {
	return g.decide(g.now(), maphash.String(g.seed, key), 1, false)
}

// PeekAt is Peek at time t.
func (g *GCRA) PeekAt(t time.Time, key string) Decision {
	return g.decide(g.at(t), maphash.String(g.seed, key), 1, false)
}

// now returns the time since g's creation in nanoseconds.
func (g *GCRA) now() int64 {
	return min(int64(time.Since(g.start)), maxSpan)
}

// at returns t as nanoseconds since g's creation, within ±maxSpan.
func (g *GCRA) at(t time.Time) int64 {
	return min(max(int64(t.Sub(g.start)), -maxSpan), maxSpan)
}

// decide applies the algorithm to key hash h at time now for a request of
// cost n. With charge false it only reports.
func (g *GCRA) decide(now int64, h uint64, n int, charge bool) Decision {
	if n < 0 || n > g.burst {
		dec := g.decide(now, h, 0, false)
		dec.Allowed, dec.Reason = false, ReasonCostAboveBurst
		if n < 0 {
			dec.Reason = ReasonInvalidCost
		}
		return dec
	}
	s := &g.shards[h>>58]
	for retried := false; ; retried = true {
		s.mu.Lock()
		tat, found := s.tat[h]
		base := now
		if found {
			base = max(tat, now)
		}
		next := base + int64(n)*g.t
		switch {
		case next-now > g.d:
			s.mu.Unlock()
			return g.decision(now, base, ReasonRateLimited, next-g.d-now)
		case !charge || n == 0:
			s.mu.Unlock()
			return g.decision(now, base, ReasonAllowed, 0)
		case found:
			s.tat[h] = next
			s.mu.Unlock()
			return g.decision(now, next, ReasonAllowed, 0)
		case g.reserve():
			s.insert(g, h, next, min(now, g.now()))
			s.mu.Unlock()
			return g.decision(now, next, ReasonAllowed, 0)
		}
		s.mu.Unlock()
		if retried || !g.reclaim(min(now, g.now())) {
			return Decision{Reason: ReasonTableFull, Limit: g.limit, Period: g.period, Burst: g.burst}
		}
	}
}

// decision builds the Decision for a key whose TAT, after the request, is
// tat. retry is the wait for a request refused with ReasonRateLimited.
func (g *GCRA) decision(now, tat int64, reason Reason, retry int64) Decision {
	return Decision{
		Allowed:    reason == ReasonAllowed,
		Reason:     reason,
		Limit:      g.limit,
		Period:     g.period,
		Burst:      g.burst,
		Remaining:  int(max(0, (now+g.d-tat)/g.t)),
		RetryAfter: time.Duration(retry),
		ResetAfter: time.Duration(tat - now),
	}
}

// reserve counts in a new entry, unless the table is at its cap.
func (g *GCRA) reserve() bool {
	for {
		k := g.keys.Load()
		if k >= g.maxKeys {
			return false
		}
		if g.keys.CompareAndSwap(k, k+1) {
			return true
		}
	}
}

// reclaim drops the expired entries of every shard that may hold some and
// has not been swept within sweepGap, and reports whether it dropped any.
// It is called, with no lock held, only when the table is at its cap; now
// is the real clock, never a time a caller passed, so that no date in the
// future can drop entries still in use.
func (g *GCRA) reclaim(now int64) bool {
	freed := false
	for i := range g.shards {
		s := &g.shards[i]
		if s.next.Load() > now {
			continue
		}
		s.mu.Lock()
		if s.sweep(g, now) > 0 {
			freed = true
		}
		s.mu.Unlock()
	}
	return freed
}

// sweepGap is the least time between two sweeps of a shard: 1/32 of the
// time a key takes to recover its full burst, at least 1ns. Every key
// expires within that recovery time of its last charge, so a table kept at
// its cap sees at least MaxKeys new keys per recovery time, and each new
// key costs at most about 32 entries swept. In exchange, an expired entry
// may keep its place up to sweepGap longer, and a new key meanwhile be
// refused with ReasonTableFull.
func (g *GCRA) sweepGap() int64 { return max(g.d/32, 1) }

// insert adds an entry reserved by g.reserve. Once the shard has doubled
// since its last sweep it sweeps again, so that expired entries do not pile
// up to the cap when the table has room; the cost is amortised over the
// inserts. now is the real clock. s.mu is held.
func (s *gcraShard) insert(g *GCRA, h uint64, tat, now int64) {
	s.tat[h] = tat
	if tat < s.next.Load() {
		s.next.Store(max(tat, s.lastSweep+g.sweepGap()))
	}
	if len(s.tat) >= 2*s.swept+64 && s.next.Load() <= now {
		s.sweep(g, now)
	}
}

// sweep drops the entries whose TAT is not after now, and returns how many
// it dropped. s.mu is held.
func (s *gcraShard) sweep(g *GCRA, now int64) int {
	low := int64(math.MaxInt64)
	n := 0
	for h, tat := range s.tat {
		if tat <= now {
			delete(s.tat, h)
			n++
		} else {
			low = min(low, tat)
		}
	}
	s.lastSweep = now
	s.next.Store(max(low, now+g.sweepGap()))
	s.swept = len(s.tat)
	g.keys.Add(int64(-n))
	g.sweeps.Add(1)
	return n
}
