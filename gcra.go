package limits

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/limitsgo/limits/internal/gcra"
)

// defaultMaxKeys is the number of keys a GCRA holds at most unless
// WithMaxKeys says otherwise: 1,048,576 keys, in at most 23 MB of table.
const defaultMaxKeys = 1 << 20

// maxKeysLimit is the most keys WithMaxKeys may ask for: 268,435,456, about
// 6 GB of table once full.
const maxKeysLimit = 1 << 28

// maxSpan bounds every time a GCRA computes with, in nanoseconds from its
// creation (about 73 years either way), so that sums of two never overflow.
const maxSpan = gcra.MaxSpan

// GCRA is an exact per-key rate limiter: the generic cell rate algorithm,
// with a bounded table of keys that fails closed.
//
// Each key has a theoretical arrival time (TAT). With limit events per
// period, the emission interval is T = period/limit and a key may run at
// most burst*T ahead of now. A request of cost n at time now is allowed if
// and only if
//
//	max(TAT, now) + n*T - burst*T <= now
//
// (the usual max(TAT, now) + n*T - tau - T <= now with tau = T*(burst-1));
// when allowed, TAT becomes max(TAT, now) + n*T, and a refusal changes
// nothing. The arithmetic is exact: T is kept as a fraction of a
// nanosecond, not rounded, so 7 a minute lets exactly 7 through at the
// start of each minute, and RetryAfter and ResetAfter are rounded up only
// once, to the nanosecond. There is no window edge to exploit: in any
// interval of length d, at most burst + d/T unit requests pass.
//
// Every decision is made at a time no older than the key's latest change,
// read under the key's lock: a cost of 0 is always allowed, and
// RetryAfter is exact for the decision's At.
//
// # Time
//
// A GCRA's clock never runs back: it is the real clock once a request has
// been decided by it (Allow, AllowN, Take, Peek, Wait), and until then the
// latest date passed to AllowNAt or PeekAt, a date ahead of the real clock
// counting as the real clock. A request dated before the clock is judged
// at the clock, and a key is dropped only once its TAT is at or before the
// clock, so no state is dropped while a decision could still be made
// before its TAT: dated decisions obey the same bound as current ones, in
// any interval of length d of the times they are made at (Decision.At).
// So a log replayed from the past, dates moving forward, is limited as it
// was; a date out of order is judged at the latest date before it; and
// once current requests are decided, a date in the past is judged now. A
// date in the future is judged then, without moving the clock past the
// real one, so that it cannot make the table drop other keys' state; a key
// charged at such a date owes until its TAT, and a current request for it
// is judged at the earliest time consistent with its state.
//
// # The table
//
// The table holds at most MaxKeys keys (1,048,576 unless WithMaxKeys says
// otherwise): a key whose TAT is ahead of the clock is never dropped, a
// key whose TAT the clock has reached carries no information and makes
// room for a new one when needed, and a new key that finds the table full
// of keys in use is refused with ReasonTableFull. Nobody already limited
// is ever let off, and filling the table never switches limiting off.
//
// The table is open addressing in shards of at most 1,024 slots of 16
// bytes, each shard under its own lock: a key's state is its 64-bit hash
// (under a seed drawn for each GCRA) and its TAT, stored inline, so a
// decision costs one hash, one lock, one clock read and, for a key not
// recently used, one cache miss. Shards grow by doubling, up to the size
// that keeps them three-quarters full at MaxKeys: about 23 bytes per key
// at the cap. No goroutine runs in the background.
//
// ReasonTableFull is exact: a new key is refused only when every key held
// owes something by the GCRA's clock (or, at a table's first fill, in the
// rare case below). A call that frees places for its key keeps one of
// them, so that calls racing with it cannot take them all; a racing call
// may find that place held for the moment the first takes to use it, or
// to give it back if the key was stored meanwhile. Each shard records the
// soonest expiry of its keys, and of each chunk of 32 of its slots,
// exactly, or a time no later while the chunk holds a key already
// expired; a tree of the shards' records shows the shard holding an
// expired key, if any does. Shards start keeping these records as the
// table nears its cap: each new key held from twice the number of shards
// below the cap sweeps one shard, so that all are swept by the time the
// table is full (calls racing with each other may leave a few to the
// first refusals at the cap, each of which sweeps one). Until then,
// charging a key costs nothing more than storing its TAT.
//
// No call does work proportional to the table: a call scans at most one
// shard's probe sequence and, if the key it charges expired soonest in its
// chunk or had expired, the rest of that chunk, stopping at an expired key,
// and then at most the shard's chunk records; making room for a new key at
// the cap (marking expired entries free) sweeps at most four shards, its
// own, one not swept yet and the one the tree shows, and a second one
// only if calls racing with it changed the first, and its own again on
// each of at most four more tries only while its shard has no free slot;
// so does growing a shard.
//
// Two keys whose hashes agree in the bits kept share one budget: among a
// million keys in use, the odds that any two do are about 1 in 5 million
// for limits whose T is a whole number of nanoseconds, fewer bits being
// kept when a fraction of T needs them (1 in 600,000 for 7 a minute). Such
// a collision only makes two callers share a limit; it never lets either
// go unlimited, and nobody can aim for one without the seed.
//
// All methods are safe for concurrent use. The zero value is not usable;
// call NewGCRA.
type GCRA struct {
	pol      atomic.Pointer[gcraPolicy]
	setMu    sync.Mutex // serializes SetLimit
	maxKeys  int64
	start    time.Time
	seed     maphash.Seed
	fracBits uint   // low bits of a slot's tag that hold its TAT's fraction
	fracMask uint64 // 1<<fracBits - 1
	shardMax int    // slots a shard grows to, at most
	shards   []gcraShard
	// chunks holds each shard's chunks' soonest expiries, shardChunks a
	// shard (see gcraShard.chunk), out of the shards' cache line.
	chunks []int64
	// soon is a tree of the shards' soonest expiries, soonFan children to
	// a node, read without a lock to find the shard whose keys expire
	// soonest: soon[0][i] is shard i's next, each node of soon[l] the least
	// of its children in soon[l-1], and the one node of the last level the
	// least of all.
	soon [][]atomic.Int64
	// swept is the number of shards, from the first, whose chunks' and
	// own soonest expiries are kept exactly (see sweep); the others keep
	// only a time no later than their soonest expiry, as next.
	swept     atomic.Int64
	sweepFrom int64         // the number of keys held from which new keys sweep
	live      atomic.Bool   // a request has been decided by the real clock
	dated     atomic.Int64  // the latest date given, as far as the real clock
	keys      atomic.Int64  // slots holding a key, expired or not, in all shards
	full      atomic.Uint64 // requests refused with ReasonTableFull
}

// gcraPolicy is a GCRA's limit: the policy decisions apply, and, while
// keys charged under an earlier policy of a larger burst may remain (until
// the GCRA's clock reaches until), the same with the larger lead those
// keys may have.
type gcraPolicy struct {
	p, lead gcra.Policy
	until   int64
	// gen counts the policies g has had, from 0; dens[k] is the units a
	// nanosecond is cut into under the k-th.
	gen  uint32
	dens []uint64
}

// at returns the policy to judge by at clock, g's clock.
func (pol *gcraPolicy) at(clock int64) *gcra.Policy {
	if clock < pol.until {
		return &pol.lead
	}
	return &pol.p
}

// soonFan is the number of children of a node of soon: two cache lines.
const soonFan = 16

// shardSlots is the most slots a shard holds: 16 KiB, the most one call
// scans.
const shardSlots = 1024

// tombstone is the tag of a slot whose key was dropped. Keys' tags have
// the top bit set; an empty slot's tag is 0.
const tombstone = 1

// chunkShift sets the slots of a chunk, 1<<chunkShift: a shard keeps the
// soonest expiry of each chunk of its slots, so that when the key expiring
// soonest is charged again the shard's soonest expiry is found again from
// one chunk (512 bytes) and the chunks' soonest expiries.
const chunkShift = 5

// gcraShard is one part of the table: a power-of-two ring of slots probed
// linearly from a key's home slot, under its own lock.
type gcraShard struct {
	mu    sync.Mutex
	slots []gcraSlot
	next  int64 // no key held expires before this (see expiry, changed)
	used  int16 // slots not empty: holding a key, or a tombstone
	held  int16 // slots holding a key, expired or not
	// gen is the generation of the policy (see gcraPolicy) in whose units
	// the fractions of the TATs the shard holds are: the policy's, or an
	// earlier one's until the shard is next locked (see sync).
	gen uint32
	// base and mask locate slots without the lock, for prefetching only:
	// the address of slots[0], and len(slots)-1.
	base atomic.Uintptr
	mask atomic.Int32
	id   int32 // the shard's index in the table, its leaf in soon
}

// shardChunks is the most chunks a shard has.
const shardChunks = shardSlots >> chunkShift

// gcraSlot is one key's state: its tag (hash bits) with, in the low
// fracBits bits, the fraction of its TAT; and the TAT's whole nanoseconds
// since the GCRA's creation.
type gcraSlot struct {
	tag uint64
	tat int64
}

// NewGCRA returns a GCRA allowing each key limit events per period. It
// panics if limit, period, the burst or the maximum number of keys is not
// positive, or if burst*T, the time to recover a full burst, exceeds about
// 73 years. An engine (package admit) checks a limit read at run time
// before it makes a GCRA of it.
func NewGCRA(limit int, period time.Duration, opts ...Option) *GCRA {
	g, err := newGCRA(limit, period, opts)
	if err != nil {
		panic("limits: " + err.Error())
	}
	return g
}

func newGCRA(limit int, period time.Duration, opts []Option) (*GCRA, error) {
	o := options{burst: limit, maxKeys: defaultMaxKeys}
	if err := collect(&o, opts, optBurst|optMaxKeys, "a GCRA"); err != nil {
		return nil, err
	}
	p, err := gcra.New(limit, period, o.burst)
	if err != nil {
		return nil, err
	}
	if o.maxKeys < 1 || o.maxKeys > maxKeysLimit {
		return nil, fmt.Errorf("max keys must be within 1-%d, got %d", maxKeysLimit, o.maxKeys)
	}
	g := &GCRA{maxKeys: int64(o.maxKeys), seed: maphash.MakeSeed()}
	g.pol.Store(&gcraPolicy{p: p, lead: p, dens: []uint64{p.Den}})
	g.fracBits = uint(bits.Len64(p.Den - 1))
	g.fracMask = 1<<g.fracBits - 1
	// Enough shards of at most shardSlots for the cap at three-quarters
	// load, each growing to the power of two that holds its share.
	total := (o.maxKeys*4 + 2) / 3
	n := (total + shardSlots - 1) / shardSlots
	g.shardMax = 4
	for g.shardMax*n < total {
		g.shardMax *= 2
	}
	g.shards = make([]gcraShard, n) // slots are made on first use
	g.chunks = make([]int64, n*shardChunks)
	for i := range g.chunks {
		g.chunks[i] = math.MaxInt64
	}
	for i := range g.shards {
		g.shards[i].next = math.MaxInt64
		g.shards[i].id = int32(i)
	}
	// Each level holds whole groups of soonFan children; the last, one node.
	for width := n; ; width = (width + soonFan - 1) / soonFan {
		size := width
		if width > 1 {
			size = (width + soonFan - 1) / soonFan * soonFan
		}
		level := make([]atomic.Int64, size)
		for i := range level {
			level[i].Store(math.MaxInt64)
		}
		g.soon = append(g.soon, level)
		if width == 1 {
			break
		}
	}
	// Each new key held from 2n below the cap sweeps a shard: by the cap,
	// every shard is swept, even if half the sweeps race with others.
	g.sweepFrom = g.maxKeys - 2*int64(n)
	g.dated.Store(math.MinInt64)
	g.start = time.Now()
	return g, nil
}

// Limit returns the events allowed per period.
func (g *GCRA) Limit() int { return g.pol.Load().p.Limit }

// Period returns the period of the limit.
func (g *GCRA) Period() time.Duration { return g.pol.Load().p.Period }

// Burst returns the most unit requests a key may make at once.
func (g *GCRA) Burst() int { return g.pol.Load().p.Burst }

// MaxKeys returns the most keys the GCRA holds at once.
func (g *GCRA) MaxKeys() int { return int(g.maxKeys) }

// Len returns the number of keys held, counting those whose state has
// expired but whose place has not been taken or freed yet.
func (g *GCRA) Len() int { return int(g.keys.Load()) }

// TableFull returns how many requests g has refused with ReasonTableFull
// since it was made: new keys that found the table full of keys in use.
// A table kept full is a limit set too low for the clients it serves, or
// an attack; metrics should show it.
func (g *GCRA) TableFull() uint64 { return g.full.Load() }

// Allow decides a request of cost 1 for key now. It is AllowN(key, 1).
func (g *GCRA) Allow(key string) Decision {
	return g.decide(0, false, maphash.String(g.seed, key), 1, true)
}

// AllowN decides a request of cost n for key now, and charges it if
// allowed. A request costing more than the burst is refused with
// ReasonCostAboveBurst, one with a negative cost with ReasonInvalidCost,
// both with RetryAfter 0 and the key's state; a cost of 0 is always
// allowed, charges nothing and reports the key's state.
func (g *GCRA) AllowN(key string, n int) Decision {
	return g.decide(0, false, maphash.String(g.seed, key), n, true)
}

// AllowNAt is AllowN at time t instead of now, in the manner of
// golang.org/x/time/rate, judged by the rules of the GCRA's clock (see
// Time): at t, or at the clock if t is before it, or at the earliest time
// consistent with the key's state after a charge dated further ahead; the
// Decision's At says when. Times more than about 73 years from the GCRA's
// creation are clamped.
func (g *GCRA) AllowNAt(t time.Time, key string, n int) Decision {
	return g.decide(g.at(t), true, maphash.String(g.seed, key), n, true)
}

// Peek reports what Allow would decide for key now, ReasonTableFull
// included, without charging anything or adding the key to the table. To
// tell whether a new key would find room, it may free the places of
// expired keys, as Allow does.
func (g *GCRA) Peek(key string) Decision {
	return g.decide(0, false, maphash.String(g.seed, key), 1, false)
}

// PeekN is Peek for a request of cost n: what AllowN(key, n) would decide
// now, charging nothing.
func (g *GCRA) PeekN(key string, n int) Decision {
	return g.decide(0, false, maphash.String(g.seed, key), n, false)
}

// PeekAt is Peek at time t, judged as AllowNAt judges it.
func (g *GCRA) PeekAt(t time.Time, key string) Decision {
	return g.decide(g.at(t), true, maphash.String(g.seed, key), 1, false)
}

// Take is AllowN(key, n), for the Limiter interface: it never returns an
// error, and ctx is not used, as a local decision does not block.
func (g *GCRA) Take(_ context.Context, key string, n int) (Decision, error) {
	return g.decide(0, false, maphash.String(g.seed, key), n, true), nil
}

// Wait is WaitN(ctx, key, 1).
func (g *GCRA) Wait(ctx context.Context, key string) error {
	return g.WaitN(ctx, key, 1)
}

// WaitN blocks until a request of cost n for key is allowed, charges it
// and returns nil: to pace outbound calls per key, such as a crawler's per
// host, without a limiter per key. It returns at the first instant the
// request is allowed (RetryAfter after each refusal), and never lets more
// through than AllowN would.
//
// It charges nothing unless it returns nil. It returns an error at once,
// wrapping context.DeadlineExceeded, if the request could not be allowed
// before ctx's deadline, and ctx's error if ctx ends while it waits. A
// cost above the burst, a negative cost, or a new key finding the table
// full is an error too, at once.
//
// Callers waiting on one key are not queued: each waits for the instant
// the key allows its own request and tries again then, so a caller may be
// overtaken by one that came later, and many callers on one key each wake
// for every request let through. WaitN allocates one timer if it waits.
func (g *GCRA) WaitN(ctx context.Context, key string, n int) error {
	h := maphash.String(g.seed, key)
	var t *time.Timer // made on the first wait, reset on the next ones
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		d := g.decide(0, false, h, n, true)
		switch d.Reason {
		case reasonAllowed:
			return nil
		case ReasonRateLimited:
		default:
			return fmt.Errorf("limits: Wait(n=%d): %v", n, d.Reason)
		}
		at := d.At.Add(d.RetryAfter)
		if deadline, ok := ctx.Deadline(); ok && !at.Before(deadline) {
			return fmt.Errorf("limits: Wait(n=%d) would pass the context's deadline: %w", n, context.DeadlineExceeded)
		}
		if t == nil {
			t = time.NewTimer(time.Until(at))
			defer t.Stop()
		} else {
			t.Reset(time.Until(at))
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Refund gives back the charge of d, an allowed Decision that AllowN, Take,
// Allow or AllowNAt returned for key: it takes off the part of the charge
// still ahead of the GCRA's clock (all of it, n*T, unless the charge's own
// TAT is near or past), never taking the key's TAT below the clock.
//
// Refunds are exact in any order: once every charge allowed for the key
// since some instant has been refunded, the key is as it was then,
// whatever the order of the refunds and however they interleaved with the
// charges (two overlapping requests given back first in, first out leave
// the key as it was, as last in, first out does). A request allowed before
// the refunds began and kept stays charged: the key owes no less than had
// the refunded requests never been made. A request allowed between two
// refunds and kept may gain from the later ones up to what the earlier
// ones gave back, no more. Each charge must be refunded at most once, and
// not after the key was Reset: a second refund gives back more.
//
// It does nothing for a refused Decision, one of cost 0, or a key the
// table no longer holds, and never returns an error. A front end calls it
// when a later layer refuses a request an earlier one charged, so that a
// refused request costs nothing.
func (g *GCRA) Refund(_ context.Context, key string, d Decision) error {
	if !d.Allowed || d.Cost <= 0 || d.Cost > d.Burst {
		return nil
	}
	h := maphash.String(g.seed, key)
	s, tag := g.shardOf(h), g.tagOf(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	pol := s.sync(g)
	clock := g.clock(g.now())
	i, _ := s.lookup(g, tag, clock)
	if i < 0 {
		return nil
	}
	p := pol.at(clock)
	// The key's TAT just after the charge, and the charge: known exactly
	// for a Decision of g's, in the units of the policy it was made under,
	// otherwise At + ResetAfter, rounded up to the nanosecond.
	charged, rounded := d.mark, false
	cost := p.Cost(d.Cost)
	if d.src != g {
		charged, rounded = gcra.Time{NS: g.at(d.At) + int64(d.ResetAfter)}, true
	} else if d.Limit != p.Limit || d.Period != p.Period || d.Burst != p.Burst {
		// Made under an earlier policy: its charge, in today's units,
		// rounded down so as never to give back more than was taken.
		op, err := gcra.Within(d.Limit, d.Period, d.Burst, 1<<g.fracBits)
		if err != nil {
			return nil
		}
		charged, cost = p.ConvertDown(charged, op.Den), p.ConvertDown(op.Cost(d.Cost), op.Den)
	}
	s.store(g, i, p.RefundCost(s.load(g, i), charged, gcra.Time{NS: clock}, cost, rounded), clock)
	return nil
}

// SetLimit changes g's limit to limit events per period, in bursts of
// burst (0 means limit), for every key, at once: the decisions made after
// it apply the new limit, those before it the old. Each key keeps its TAT,
// its state, so that a change never hands out a fresh burst: under a
// stricter limit a key that owes more than the new burst allows waits
// until it owes no more, and under a looser one it gains only the room the
// new limit gives. A limit whose emission interval needs a finer cut of
// the nanosecond than g keeps (set when g was made) is rounded up to it,
// by less than a nanosecond per event. Refunds of decisions made before
// the change give back what those decisions charged.
//
// It returns an error, and changes nothing, for a limit NewGCRA would
// refuse. It is safe for concurrent use with every other method; the
// table's keys are converted to the new limit shard by shard as calls
// reach them, each conversion bounded by a shard's size.
func (g *GCRA) SetLimit(limit int, period time.Duration, burst int) error {
	if burst == 0 {
		burst = limit
	}
	p, err := gcra.Within(limit, period, burst, 1<<g.fracBits)
	if err != nil {
		return fmt.Errorf("limits: %w", err)
	}
	g.setMu.Lock()
	defer g.setMu.Unlock()
	old := g.pol.Load()
	if old.gen == math.MaxUint32 {
		return errors.New("limits: SetLimit: too many changes")
	}
	next := &gcraPolicy{p: p, lead: p, gen: old.gen + 1, dens: append(old.dens, p.Den)}
	// Keys charged before may run as far ahead as the old policy allowed
	// (its lead, at most, until it runs out): while they may, the new
	// policy keeps their lead rather than take it as its own burst.
	clock := g.clock(g.now())
	lead := p.Convert(old.at(clock).Lead, old.p.Den)
	if gcra.Less(p.D, lead) {
		next.lead.Lead = lead
		next.until = clock + gcra.Ceil(lead)
	}
	g.pol.Store(next)
	return nil
}

// sync brings the shard's fractions to the units of g's policy, if a
// SetLimit changed them, and returns the policy. Each TAT is rounded up
// to the new units, so that no key is left owing less; its expiry, the
// whole nanosecond it reaches, does not change. s.mu is held.
func (s *gcraShard) sync(g *GCRA) *gcraPolicy {
	pol := g.pol.Load()
	if s.gen == pol.gen {
		return pol
	}
	if den := pol.dens[s.gen]; den != pol.p.Den {
		for i := range s.slots {
			e := &s.slots[i]
			if e.tag <= tombstone {
				continue
			}
			t := pol.p.Convert(gcra.Time{NS: e.tat, Frac: e.tag & g.fracMask}, den)
			e.tag, e.tat = e.tag&^g.fracMask|t.Frac, t.NS
		}
	}
	s.gen = pol.gen
	return pol
}

// Reset forgets key's state, so that its next request finds its full
// burst: to unblock a client by hand, say. Requests for key that race with
// it may be decided before or after.
func (g *GCRA) Reset(key string) {
	h := maphash.String(g.seed, key)
	s, tag := g.shardOf(h), g.tagOf(h)
	s.mu.Lock()
	defer s.mu.Unlock()
	clock := g.clock(g.now())
	if i, _ := s.lookup(g, tag, clock); i >= 0 {
		old := g.expiry(&s.slots[i])
		s.slots[i].tag = tombstone
		s.changed(g, i, old, math.MaxInt64, clock)
		s.held--
		g.keys.Add(-1)
	}
}

// now returns the time since g's creation in nanoseconds.
func (g *GCRA) now() int64 {
	return min(int64(time.Since(g.start)), maxSpan)
}

// at returns t as nanoseconds since g's creation, within ±maxSpan.
func (g *GCRA) at(t time.Time) int64 {
	return min(max(int64(t.Sub(g.start)), -maxSpan), maxSpan)
}

func (g *GCRA) shardOf(h uint64) *gcraShard {
	i, _ := bits.Mul64(h, uint64(len(g.shards)))
	return &g.shards[i]
}

// tagOf returns the tag of the key whose hash is h: its low 63-fracBits
// bits, above the fraction's bits, with the top bit set. The shard is
// chosen by the hash's high bits, a key's home slot in its shard by the
// tag's low bits.
func (g *GCRA) tagOf(h uint64) uint64 { return h<<g.fracBits | 1<<63 }

// decide applies the algorithm to key hash h for a request of cost n, at
// the time at if dated, otherwise now. With charge false it only reports:
// for a cost of 1 (Peek) whether a new key would find room, too.
func (g *GCRA) decide(at int64, dated bool, h uint64, n int, charge bool) Decision {
	if !dated {
		if !g.live.Load() {
			g.live.Store(true)
		}
	} else if !g.live.Load() {
		g.raiseDated(min(at, g.now()))
	}
	s, tag := g.shardOf(h), g.tagOf(h)
	s.prefetchHome(g, tag)
	// token is a place in the table counted in for this call: one of the
	// places it freed, kept from calls racing with it.
	token := false
	for attempt := 0; ; attempt++ {
		s.mu.Lock()
		pol := s.sync(g)
		reason, cost, charge := reasonAllowed, n, charge
		switch {
		case n < 0:
			reason, cost, charge = ReasonInvalidCost, 0, false
		case n > pol.p.Burst:
			reason, cost, charge = ReasonCostAboveBurst, 0, false
		case n == 0:
			charge = false
		}
		// A Peek of a new key needs a place for it as Allow would.
		place := charge || cost > 0
		real := g.now()
		// clock is g's clock: no later decision is made before it, so a key
		// whose TAT it has reached may be dropped.
		clock := g.clock(real)
		p := pol.at(clock)
		now := real
		if dated {
			now = max(at, clock)
		}
		if s.slots == nil && place {
			s.setSlots(make([]gcraSlot, 4))
		}
		i, free := s.lookup(g, tag, clock)
		var ahead gcra.Time
		if i >= 0 {
			ahead = p.Sub(s.load(g, i), gcra.Time{NS: now})
			if gcra.Less(p.Lead, ahead) {
				// After a charge dated in the future: judge it at the
				// earliest whole nanosecond consistent with the key's state.
				late := gcra.Ceil(p.Sub(ahead, p.Lead))
				now += late
				ahead = p.Sub(ahead, gcra.Time{NS: late})
			}
		}
		allowed, after := p.Judge(ahead, cost, charge)
		if token && (!allowed || i >= 0 || free >= 0 && s.slots[free].tag > tombstone) {
			// A racing call stored the key meanwhile, or a place of an
			// expired key is on its way: the place kept is not needed.
			g.keys.Add(-1)
			token = false
		}
		if !allowed || !charge && (i >= 0 || !place) {
			s.mu.Unlock()
			return g.decision(p, p.Report(allowed, after, cost), reason, n, now, gcra.Time{})
		}
		tat := p.Add(gcra.Time{NS: now}, after)
		switch {
		case i >= 0:
			s.store(g, i, tat, clock)
		case free >= 0 && s.slots[free].tag > tombstone:
			// An expired key's place: the count of keys is unchanged.
			if charge {
				s.put(g, free, tag, tat, clock)
			}
		case free >= 0 && !charge && g.keys.Load() < g.maxKeys:
			// A Peek that would find room.
		case free >= 0 && charge && (token || g.reserve()):
			token = false
			if s.slots[free].tag == 0 {
				s.used++
			}
			s.held++
			s.put(g, free, tag, tat, clock)
			if 4*int(s.used) > 3*len(s.slots) {
				s.maintain(g, clock)
			}
			if g.swept.Load() < int64(len(g.shards)) && g.keys.Load() >= g.sweepFrom {
				s.mu.Unlock()
				g.sweep()
				return g.decision(p, p.Report(true, after, cost), reason, n, now, tat)
			}
		default:
			// The table is at its cap, or this shard is full: free the
			// places of expired keys, here and then in the shards whose
			// keys expire soonest, keep one of them for this key, so that
			// calls racing with it cannot take them all, and try again.
			// A place freed elsewhere serves only if this shard has a free
			// slot; if not, only its own purge can make one.
			keep := 0
			if charge && !token && free >= 0 {
				keep = 1
			}
			own := 0
			if s.next <= clock {
				own = s.purge(g, clock, keep)
			}
			s.mu.Unlock()
			freed := own
			if freed == 0 && attempt == 0 {
				g.sweep()
				freed = g.reclaim(clock, keep)
			}
			if freed > 0 && testHookFreed != nil {
				testHookFreed()
			}
			if !charge {
				// A Peek: Allow would find room now, or after its own
				// shard's purge.
				switch {
				case free >= 0 && (freed > 0 || g.keys.Load() < g.maxKeys):
					return g.decision(p, p.Report(true, after, cost), reason, n, now, gcra.Time{})
				case own > 0 && attempt < 2:
					continue
				}
				return g.decision(p, gcra.Result{}, ReasonTableFull, n, now, gcra.Time{})
			}
			token = token || freed > 0 && keep > 0
			if !token && freed == 0 && attempt < 2 && free >= 0 && g.reserve() {
				// Racing calls freed places this one did not see.
				token = true
			}
			if !token && (freed == 0 || attempt > 1) || attempt > 3 {
				if token {
					g.keys.Add(-1)
				}
				if charge {
					g.full.Add(1)
				}
				return g.decision(p, gcra.Result{}, ReasonTableFull, n, now, gcra.Time{})
			}
			continue
		}
		s.mu.Unlock()
		if !charge {
			return g.decision(p, p.Report(true, after, cost), reason, n, now, gcra.Time{})
		}
		return g.decision(p, p.Report(true, after, cost), reason, n, now, tat)
	}
}

// raiseDated moves g's clock for dated requests forward to t.
func (g *GCRA) raiseDated(t int64) {
	for {
		c := g.dated.Load()
		if t <= c || g.dated.CompareAndSwap(c, t) {
			return
		}
	}
}

// clock returns g's clock, given the real clock: no decision is made before
// it. s.mu of some shard is held.
func (g *GCRA) clock(real int64) int64 {
	if g.live.Load() {
		return real
	}
	return g.dated.Load()
}

// decision builds the Decision for r, made at now; tat is the key's TAT
// after a charge.
func (g *GCRA) decision(p *gcra.Policy, r gcra.Result, reason Reason, n int, now int64, tat gcra.Time) Decision {
	d := Decision{
		Allowed:    r.Allowed && reason == reasonAllowed,
		Reason:     reason,
		Limit:      p.Limit,
		Period:     p.Period,
		Burst:      p.Burst,
		Cost:       n,
		Remaining:  r.Remaining,
		ResetAfter: r.ResetAfter,
		At:         g.start.Add(time.Duration(now)),
		src:        g,
		mark:       tat,
	}
	if !r.Allowed && reason == reasonAllowed {
		d.Reason, d.RetryAfter = ReasonRateLimited, r.RetryAfter
	}
	return d
}

// reserve counts in a new key, unless the table is at its cap.
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

// sweep computes again the chunks' and own soonest expiries of the first
// shard not swept, if any, and from then on its soonest expiries are kept
// exactly: one pass over one shard. New keys sweep once the table is near
// its cap, so that each shard is swept once in the GCRA's life, by the
// time the table is full; until then, charging a key again costs nothing
// more than recording its TAT. It is called with no lock held.
func (g *GCRA) sweep() {
	for range 2 {
		i := g.swept.Load()
		if i >= int64(len(g.shards)) {
			return
		}
		s := &g.shards[i]
		s.mu.Lock()
		done := g.swept.Load() == i
		if done {
			if testHookScan != nil {
				testHookScan(len(s.slots))
			}
			ch := s.chunk(g)
			for c := range s.chunks() {
				lo := c << chunkShift
				ch[c] = s.soonestIn(g, lo, min(lo+1<<chunkShift, len(s.slots)), math.MinInt64)
			}
			s.setNext(g, s.soonestChunk(g), g.clock(g.now()))
			g.swept.Store(i + 1)
		}
		s.mu.Unlock()
		if done {
			return
		}
	}
}

// reclaimPurges is how many shards reclaim may purge for one new key at
// the cap: one, and a second only when calls racing with it changed the
// shard the tree pointed to.
const reclaimPurges = 2

// reclaim frees the places of expired keys in the shard whose keys expire
// soonest, as soon tells, so that a table at its cap makes room wherever a
// key has expired, at a bounded cost per call: each shard's soonest expiry
// is recorded exactly, so the shard soon points to holds an expired key
// if any shard does, unless a racing call changed it meanwhile, and then
// the next one is looked at, up to reclaimPurges. It returns how many
// places it freed, 0 if no key has expired at clock, g's clock. It is
// called with no lock held.
func (g *GCRA) reclaim(clock int64, keep int) int {
	top := &g.soon[len(g.soon)-1][0]
	for range reclaimPurges {
		// Shards' states may be newer than clock: judge them by the clock
		// as it is now.
		clock = max(clock, g.clock(g.now()))
		if top.Load() > clock {
			return 0 // no key held has expired
		}
		s := &g.shards[g.soonest()]
		s.mu.Lock()
		clock = max(clock, g.clock(g.now()))
		freed := 0
		if s.next <= clock {
			freed = s.purge(g, clock, keep)
		}
		s.mu.Unlock()
		if freed > 0 {
			return freed
		}
	}
	return 0
}

// soonest returns the index of a shard whose next is least, as soon tells
// without a lock: a hint, which the caller checks under the shard's lock.
func (g *GCRA) soonest() int {
	i := 0
	for l := len(g.soon) - 1; l > 0; l-- {
		kids := g.soon[l-1][i*soonFan : i*soonFan+soonFan]
		best, v := 0, kids[0].Load()
		for j := 1; j < soonFan; j++ {
			if w := kids[j].Load(); w < v {
				best, v = j, w
			}
		}
		i = i*soonFan + best
	}
	return min(i, len(g.shards)-1)
}

// lower records in soon that shard i's next is v, earlier than recorded.
// Lowering needs no lock: each node only ever moves down to v. s.mu of
// shard i is held.
func (g *GCRA) lower(i int, v int64) {
	for l := range g.soon {
		node := &g.soon[l][i]
		for {
			c := node.Load()
			if c <= v {
				return
			}
			if node.CompareAndSwap(c, v) {
				break
			}
		}
		i /= soonFan
	}
}

// raise records in soon that shard i's next is v, later than recorded,
// and recomputes the nodes above it, without a lock. A node is set to the
// least of its children, read after the node, only if unchanged since,
// and read again until the two agree: a raise or lower racing with it is
// never lost, as whichever writes a node last checks it against children
// it read after writing. s.mu of shard i is held.
func (g *GCRA) raise(i int, v int64) {
	g.soon[0][i].Store(v)
	for l := 1; l < len(g.soon); l++ {
		i /= soonFan
		node := &g.soon[l][i]
		kids := g.soon[l-1][i*soonFan : i*soonFan+soonFan]
		changed := false
		for {
			c := node.Load()
			m := kids[0].Load()
			for j := 1; j < soonFan; j++ {
				m = min(m, kids[j].Load())
			}
			if c == m {
				break
			}
			if testHookRaise != nil {
				testHookRaise()
			}
			if node.CompareAndSwap(c, m) {
				changed = true
			}
		}
		if !changed {
			return // the nodes above are as they were
		}
	}
}

// setNext sets the shard's next, computed exactly, and records it in soon:
// exactly, unless the shard holds a key expired at clock, g's clock, when
// soon may hold an earlier time, raised only once no key held has expired.
// So the shard soon points to holds a key expired by g's clock if any
// shard does. s.mu is held.
func (s *gcraShard) setNext(g *GCRA, next, clock int64) {
	s.next = next
	leaf := g.soon[0][s.id].Load()
	switch {
	case next < leaf:
		g.lower(int(s.id), next)
	case next > leaf && next > clock:
		g.raise(int(s.id), next)
	}
}

// changed records that slot i's expiry went from old to x, either
// math.MaxInt64 for no key; clock is g's clock. In a swept shard, each
// chunk's recorded soonest expiry is no later than any key's there, and is
// exact unless the chunk holds a key expired by the clock; the shard's
// next is the least of them, and soon holds it, or an earlier time while
// next is not ahead of the clock. So a key charged again rescans its chunk
// only if it expired soonest there or had expired, and stops at a key
// expiring as soon or expired; the chunks' soonest expiries are read again
// only if the chunk's was the shard's. s.mu is held.
func (s *gcraShard) changed(g *GCRA, i int, old, x, clock int64) {
	if int64(s.id) >= g.swept.Load() {
		// Not swept yet: next is kept no later than any key's expiry.
		if x < s.next {
			s.next = x
			g.lower(int(s.id), x)
		}
		return
	}
	ch := s.chunk(g)
	c := i >> chunkShift
	if x <= ch[c] {
		if x < ch[c] {
			ch[c] = x
			if x < s.next {
				s.setNext(g, x, clock)
			}
		}
		return
	}
	if old > clock && old != ch[c] {
		return // a key in use, not the chunk's soonest: nothing recorded moves
	}
	// From slot i on, the slots the key's probe sequence just read.
	floor := max(ch[c], clock)
	lo, hi := c<<chunkShift, min((c+1)<<chunkShift, len(s.slots))
	m := s.soonestIn(g, i+1, hi, floor)
	if m > floor {
		m = min(m, s.soonestIn(g, lo, i+1, floor))
	}
	if m <= floor {
		return // a key expires as soon, or has expired
	}
	was := ch[c]
	ch[c] = m
	if was == s.next {
		s.setNext(g, s.soonestChunk(g), clock)
	}
}

// soonestIn returns the soonest expiry of a key in slots lo to hi-1,
// math.MaxInt64 if none, or the first found at or before floor.
func (s *gcraShard) soonestIn(g *GCRA, lo, hi int, floor int64) int64 {
	m := int64(math.MaxInt64)
	for i := lo; i < hi; i++ {
		if e := &s.slots[i]; e.tag > tombstone {
			if m = min(m, g.expiry(e)); m <= floor {
				return m
			}
		}
	}
	return m
}

// chunks returns the number of chunks of the shard's slots.
func (s *gcraShard) chunks() int {
	return (len(s.slots) + 1<<chunkShift - 1) >> chunkShift
}

// soonestChunk returns the least of the chunks' soonest expiries.
func (s *gcraShard) soonestChunk(g *GCRA) int64 {
	m := int64(math.MaxInt64)
	for _, x := range s.chunk(g)[:s.chunks()] {
		m = min(m, x)
	}
	return m
}

// chunk returns the shard's chunks' soonest expiries: chunk(g)[c] is the
// soonest expiry of a key held in slots c<<chunkShift to
// (c+1)<<chunkShift - 1, exactly, math.MaxInt64 if none. s.mu is held.
func (s *gcraShard) chunk(g *GCRA) []int64 {
	i := int(s.id) * shardChunks
	return g.chunks[i : i+shardChunks : i+shardChunks]
}

// clearChunks records every chunk as holding no key, before keys are
// placed again.
func (s *gcraShard) clearChunks(g *GCRA) {
	ch := s.chunk(g)
	for c := range ch {
		ch[c] = math.MaxInt64
	}
}

// place moves e to the first empty slot on its probe sequence, recording
// its expiry in that slot's chunk.
func (s *gcraShard) place(g *GCRA, e gcraSlot) {
	i := s.firstEmpty(g, e.tag)
	s.slots[i] = e
	ch := s.chunk(g)
	c := i >> chunkShift
	ch[c] = min(ch[c], g.expiry(&e))
}

// lookup scans tag's probe sequence from its home slot to the key's slot or
// an empty one. It returns the key's slot or -1, and the first slot a new
// key may take (a tombstone, an expired key's slot, or the empty slot that
// ended the scan) or -1 if there is none. s.mu is held.
func (s *gcraShard) lookup(g *GCRA, tag uint64, now int64) (at, free int) {
	mask := len(s.slots) - 1
	i := int(tag>>g.fracBits) & mask
	free = -1
	for range len(s.slots) {
		e := &s.slots[i]
		switch {
		case e.tag == 0:
			if free < 0 {
				free = i
			}
			return -1, free
		case e.tag&^g.fracMask == tag:
			return i, free
		case free < 0 && (e.tag == tombstone || g.expired(e, now)):
			free = i
		}
		i = (i + 1) & mask
	}
	return -1, free
}

// expired reports whether the key in e has nothing owed at now.
func (g *GCRA) expired(e *gcraSlot, now int64) bool {
	return g.expiry(e) <= now
}

// expiry returns the first whole nanosecond at which the key in e has
// nothing owed: its TAT, rounded up.
func (g *GCRA) expiry(e *gcraSlot) int64 {
	if e.tag&g.fracMask != 0 {
		return e.tat + 1
	}
	return e.tat
}

// load returns the TAT of slot i.
func (s *gcraShard) load(g *GCRA, i int) gcra.Time {
	return gcra.Time{NS: s.slots[i].tat, Frac: s.slots[i].tag & g.fracMask}
}

// store sets the TAT of slot i, which holds a key; clock is g's clock.
func (s *gcraShard) store(g *GCRA, i int, tat gcra.Time, clock int64) {
	s.put(g, i, s.slots[i].tag&^g.fracMask, tat, clock)
}

// put stores a key's tag and TAT in slot i; clock is g's clock. s.mu is
// held.
func (s *gcraShard) put(g *GCRA, i int, tag uint64, tat gcra.Time, clock int64) {
	e := &s.slots[i]
	old := int64(math.MaxInt64)
	if e.tag > tombstone {
		old = g.expiry(e)
	}
	*e = gcraSlot{tag: tag | tat.Frac, tat: tat.NS}
	s.changed(g, i, old, g.expiry(e), clock)
}

// setSlots makes slots the shard's, and publishes where they are for
// prefetching. s.mu is held.
func (s *gcraShard) setSlots(slots []gcraSlot) {
	s.slots = slots
	s.base.Store(uintptr(unsafe.Pointer(&slots[0])))
	s.mask.Store(int32(len(slots) - 1))
}

// prefetchHome asks for the cache line of tag's home slot, if the shard
// has slots: at worst a line the shard no longer uses.
func (s *gcraShard) prefetchHome(g *GCRA, tag uint64) {
	if base := s.base.Load(); base != 0 {
		prefetch(base + uintptr(int32(tag>>g.fracBits)&s.mask.Load())*unsafe.Sizeof(gcraSlot{}))
	}
}

// testHookRaise, if set by a test, is called by raise between reading a
// node's children and writing the node.
var testHookRaise func()

// testHookFreed, if set by a test, is called when a new key at the cap
// has freed places, with no lock held, before it takes one.
var testHookFreed func()

// testHookScan, if set by a test, is told how many slots each pass over a
// whole shard looks at.
var testHookScan func(slots int)

// purge turns the slots of expired keys into tombstones and returns how
// many it freed. s.mu is held; now is g's clock.
func (s *gcraShard) purge(g *GCRA, now int64, keep int) int {
	if testHookScan != nil {
		testHookScan(len(s.slots))
	}
	freed := 0
	ch := s.chunk(g)
	for c := range s.chunks() {
		lo := c << chunkShift
		m := int64(math.MaxInt64)
		for i := lo; i < min(lo+1<<chunkShift, len(s.slots)); i++ {
			e := &s.slots[i]
			switch {
			case e.tag <= tombstone:
			case g.expired(e, now):
				e.tag = tombstone
				freed++
			default:
				m = min(m, g.expiry(e))
			}
		}
		ch[c] = m
	}
	s.held -= int16(freed)
	s.setNext(g, s.soonestChunk(g), now)
	if freed > 0 {
		g.keys.Add(int64(keep - freed))
	}
	return freed
}

// maintain keeps the shard's probe sequences short once three-quarters of
// its slots are used. While it may still grow, it frees expired keys'
// places, then doubles the shard if it is over half full of keys, or
// clears its tombstones if they fill an eighth of it. At its largest size
// it waits until seven-eighths are used: keys that expired there come back
// to their slots, or make room for new keys when the table is at its cap,
// and freeing them early would only make each return an insertion. The
// cost, at most one pass over the shard and one over its new slots, is
// amortised over the insertions that filled it; only growing allocates, at
// most eight times in a shard's life. s.mu is held; now is g's clock.
func (s *gcraShard) maintain(g *GCRA, now int64) {
	full := len(s.slots) >= g.shardMax
	if full && 8*int(s.used) <= 7*len(s.slots) {
		return
	}
	if s.next <= now {
		s.purge(g, now, 0)
	}
	// No key held has expired now: s.next is no later than any key's TAT.
	switch {
	case !full && 2*int(s.held) > len(s.slots):
		s.rebuild(g, 2*len(s.slots), now)
	case 8*int(s.used-s.held) >= len(s.slots):
		s.compact(g, now)
	}
}

// compact clears the shard's tombstones in place, then moves every key
// back to the first slot its probe sequence reaches, in ring order from a
// slot that was empty before: no probe sequence crosses that slot, so each
// key's home comes after it, the key finds a slot no later than its own,
// and no key is left behind an empty slot on its way. (A cleared tombstone
// will not do: sequences cross it.) s.mu is held, and no key held has
// expired (maintain purges first).
func (s *gcraShard) compact(g *GCRA, now int64) {
	if testHookScan != nil {
		testHookScan(2 * len(s.slots))
	}
	start := -1
	for i := range s.slots {
		e := &s.slots[i]
		switch e.tag {
		case 0:
			if start < 0 {
				start = i
			}
		case tombstone:
			*e = gcraSlot{}
		}
	}
	s.used = s.held
	if start < 0 {
		// Every slot was used, by keys or tombstones: never so in the
		// table, which maintains shards before they fill.
		s.rebuild(g, len(s.slots), now)
		return
	}
	s.clearChunks(g)
	mask := len(s.slots) - 1
	for k := 1; k < len(s.slots); k++ {
		i := (start + k) & mask
		e := s.slots[i]
		if e.tag == 0 {
			continue
		}
		s.slots[i] = gcraSlot{}
		s.place(g, e)
	}
	s.setNext(g, s.soonestChunk(g), now)
}

// firstEmpty returns the first empty slot on the probe sequence of tag.
func (s *gcraShard) firstEmpty(g *GCRA, tag uint64) int {
	mask := len(s.slots) - 1
	i := int(tag>>g.fracBits) & mask
	for s.slots[i].tag != 0 {
		i = (i + 1) & mask
	}
	return i
}

// rebuild moves the shard's keys into size new slots, leaving out
// tombstones: the shard grows. s.mu is held, and no key held has expired
// (maintain purges first).
func (s *gcraShard) rebuild(g *GCRA, size int, now int64) {
	if testHookScan != nil {
		testHookScan(len(s.slots))
	}
	old := s.slots
	s.setSlots(make([]gcraSlot, size))
	s.clearChunks(g)
	for _, e := range old {
		if e.tag > tombstone {
			s.place(g, e)
		}
	}
	s.setNext(g, s.soonestChunk(g), now)
	s.used = s.held
}
