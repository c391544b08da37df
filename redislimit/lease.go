package redislimit

// This file holds the lease mode (WithLeases): a process takes a run of a
// hot key's next emission slots from Redis in one script call and spends
// them locally, each within the GCRA's tolerance of its own time.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/internal/gcra"
)

// DefaultLeaseKeys is the size of the lease table, the most keys a GCRA in
// lease mode keeps local state for, unless WithLeases says otherwise.
const DefaultLeaseKeys = 4096

// MaxLeaseSlots is the most slots WithLeases accepts for one lease.
const MaxLeaseSlots = 1 << 16

// leaseShards is the number of independently locked parts of the lease
// table.
const leaseShards = 64

// sweepProbes bounds the entries a full lease table looks at to make room
// for a new key, so that no call pays for work proportional to the table.
const sweepProbes = 8

// WithLeases turns on the lease mode, in which a process decides a key
// that is hot in it locally, from a run of the key's emission slots
// leased from Redis, rather than in one Redis call per decision.
//
// A lease is one script call that advances the key's TAT by k emission
// intervals, exactly as k requests arriving at once would, and hands the
// process the k slots so taken: slot i of a lease whose run starts at B
// (the key's TAT, or now if later) has the time B + i*T on the Redis
// server's clock. The script grants only slots the key could admit at once
// (its TAT then at most burst*T ahead of now), so each slot may be spent
// from the moment the lease is made; the process spends it at the latest
// at its own time, and drops it unspent after. So every admission, local
// or by Redis, takes a slot of its own, no earlier than the slot's time
// less burst*T and no later than the slot's time, and the fleet's
// admissions conform to the one GCRA: in any interval of length d at most
// burst + d/T (+1 at the edges), whichever processes make them. The
// process reckons a slot's deadline on its own monotonic clock, from the
// moment it sent the lease call, less a microsecond for the resolution of
// TIME, so that it errs early; the clocks of different processes never
// meet.
//
// A key is hot in a process when that process saw at least two requests
// for it in a burst time D = burst*T, measured between its Redis calls for
// the key: with u the mean interval between them, a lease asks for
// floor(D/u) slots, at most slots (and at most the burst). A key seen less
// often is cold: each decision is one call, as without leases, and its
// Decision is Redis's. A request of cost n is spent from the run in hand
// when it holds n; otherwise it is a call of its own.
//
// A process leases ahead: once a quarter of a hot key's run is left, and
// the run lasts at least twice as long as the call that leased it took,
// the next run is leased on a goroutine of its own, which ends within the
// timeout, while the requests go on spending the slots left; it is sized
// to make the hand up to what the key's local rate would lease at once,
// so the slots in hand never exceed a lease. So the requests for a key
// that stays hot find slots in hand rather than wait for a call. A lease
// ahead that fails, or that the key has not room for in full, stops the
// leasing ahead until a lease made for a request is granted in full; its
// error goes to the error handler (WithErrorHandler), if any, and
// LeaseStats.AheadErrors counts it: it decides no request, so it counts
// in neither Stats.Errors nor CallStats.Failures.
//
// At a key whose TAT runs less far ahead than the process needs (a key
// with room to spare), the run starts later than the TAT: far enough ahead
// for the first slot to be still to come when the reply arrives (two round
// trips) and for the run to last as long as the process takes to spend it
// at its pace u, up to an eighth of the burst ahead. The time skipped is
// charged as if spent, and since nothing is skipped at a key whose TAT
// runs that far ahead, skips hold at most an eighth of the burst's room
// at any moment: room, not rate. A saturated key's TAT runs further
// ahead than that: nothing is skipped there.
//
// When the slots in hand are spent and Redis had no room, the process
// refuses locally, with Reason limits.ReasonRateLimited, until the key
// has room, by the latest lease's reply, for the request or, if more, for
// as many slots as the key's rate brings in four round trips (at most a
// lease): RetryAfter is that time. So a saturated key costs a process at
// most about one call every four round trips, and the process's burst is
// smaller by up to that many slots, never its rate.
//
// The cost is under-admission. At any moment the fleet's P processes hold
// at most P*slots slots unspent, and may leave less than a lease of room
// untaken while they wait for enough to be worth a call, and skips hold
// at most an eighth of the burst: only these can make the fleet refuse a
// request that one GCRA would have allowed, as a GCRA whose burst is
// smaller by at most (P+1)*slots + burst/8 would. Slots are lost
// for good when they expire unspent: a lease of floor(D/u) slots at a
// steady local rate 1/u is spent before its slots' times whenever the key
// is saturated (its TAT within a lease of its burst), so a saturated key
// loses slots only when a process's requests slow down or a reply comes
// later than the slots' times: at most its lease, each time. Slots
// expiring at a key with room to spare cost nobody anything. LeaseStats
// counts the slots spent, expired and in hand. A crashed process loses its
// slots in hand, which expire with their times, within burst*T;
// ReturnLeases gives them back on an orderly shutdown.
//
// Decisions made from a lease are the process's: Allowed, the GCRA's
// Limit, Period and Burst, the Cost, At the server's time as the process
// reckons it (never ahead of the server), Remaining and ResetAfter as a
// GCRA whose state were the process's lease, with the slots spent charged
// and those in hand not (what Redis would say were this process alone).
// Peek and requests
// of cost 0, below 0 or above the burst are answered so too, without a
// call, for a key the process holds a lease of. Each decision made from
// the slots in hand takes slots of its own, and Refund gives back a
// lease's decision by putting its slots back in hand, each until its
// time (those whose time has passed stay spent), whatever the order of
// the refunds and whether or not the process has leased since; a unit
// request spends the earliest of them first. A decision Redis made is
// given back in Redis only if nothing was charged for the key after it
// (the key's TAT is where the charge left it), as a refund that lowered a
// TAT under slots leased since could let their holders overrun the limit;
// otherwise the charge stays, towards owing more. So refunds are exact in
// any order for a lease's decisions, and last in, first out for Redis's.
//
// A change of limit (SetLimit) gives the slots in hand back to Redis and
// leases anew at the new limit, so that no slot leased at one emission
// interval is spent as one of another; the decisions made from them
// before the change are then refunded as Redis's are. The key's TAT is
// kept, so the new limit's slots come after every slot spent before the
// change: each admission, local or by Redis, still takes a part of the
// key's timeline of its own, its cost times the T of the limit it was
// made under, ending no later than that limit's burst*T after the
// admission. Hence, with every process of the fleet changed, the
// admissions of any interval of length d weigh, each its cost times its
// limit's T, at most d + D + the weight of one of them, where D is the
// burst*T of the limit whose part of the timeline ends last: the new
// limit's, for an interval that ends with its admissions. What was
// admitted before the change counts, at the old T, against the new
// limit; an interval after the change (and the calls in flight at it)
// conforms to the new limit alone, at most burst + d/T + 1. Slots Redis
// does not take back at a change, at most a lease per process, add to
// the under-admission, and so does the room the old limit's skips held.
//
// When Redis is down or does not answer, decisions from the slots in hand
// go on until they are spent or expire (within burst*T); after that each
// decision is a call, and the failure policy applies when it fails, within
// the timeout. Goroutines waiting for a lease another one asked for share
// its failure, and wait no longer than their context allows; each of
// their decisions counts as one that failed, in Stats.Errors and under the
// failure's kind in CallStats.Failures. A flush or a
// restart of Redis forgives debts as without leases, and lets the slots in
// hand be spent too: at most burst + P*slots at once, once.
//
// The lease table keeps local state for at most keys keys (DefaultLeaseKeys
// if keys is 0), about 300 bytes each with a short key, and for a key
// whose decisions are refunded, 8 bytes per slot given back in hand and
// 24 per run of slots whose decisions may still be given back: keys whose
// slots are spent or expired and that saw no request for D are dropped to
// make room,
// looking at a few entries per new key; when those are all in use, a new
// key is decided by a call per decision, as a cold key.
//
// New returns an error if slots is below 2 or above MaxLeaseSlots, or keys
// is negative.
func WithLeases(slots, keys int) Option {
	return func(o *options) { o.leaseSlots, o.leaseKeys, o.leases = slots, keys, true }
}

// LeaseStats is a snapshot of a GCRA's lease counters, from 0 when the
// GCRA was made; all are 0 without WithLeases. The slots leased equal
// those spent, expired, returned and in hand.
type LeaseStats struct {
	// Leases counts the lease calls Redis answered with at least one slot.
	Leases uint64
	// Ahead counts those of them taken ahead, while the key's slots in
	// hand were still being spent (see WithLeases).
	Ahead uint64
	// AheadErrors counts the leases taken ahead that failed. Such a
	// lease decides no request, so it counts in neither Stats.Errors nor
	// CallStats.Failures (CallStats.Latency times it as a call); its
	// error goes to the error handler, and each request that waited for
	// it and shared its failure counts there as a decision that failed.
	AheadErrors uint64
	// Slots counts the slots those leases granted.
	Slots uint64
	// Spent counts the slots spent by decisions made from the slots in
	// hand (a request of cost n spends n; a refund puts them back).
	Spent uint64
	// Expired counts the slots dropped unspent when their time passed:
	// the under-admission.
	Expired uint64
	// Returned counts the slots given back to Redis by ReturnLeases or
	// SetLimit, or dropped by them: when Redis had charged the key since,
	// and the slots refunds put back in hand below slots still spent,
	// which Redis could take back only with those.
	Returned uint64
	// Local counts the decisions made without a call: from the slots in
	// hand, and the refusals while Redis had granted none.
	Local uint64
	// Held is the number of slots in hand now.
	Held uint64
}

// leaseStats are the counters behind LeaseStats.
type leaseStats struct {
	leases, ahead, aheadErrs, slots, spent, expired, returned, local atomic.Uint64
	unspent                                                          atomic.Int64 // slots in hand
}

// leaseReply is what Redis answered to a lease call.
type leaseReply struct {
	k     int       // slots granted; 0 if the key had no room
	ahead gcra.Time // the key's TAT (or now, if later) minus now, before the lease
	now   int64     // the server's time, in ns since the Unix epoch
}

// leaseBackend is what the lease table asks of Redis: a GCRA, or a model
// of one in tests.
type leaseBackend interface {
	// decide is AllowN: one call, charged.
	decide(ctx context.Context, key string, n int) (limits.Decision, error)
	// lease asks for up to want slots of key, starting no sooner than
	// skip from now.
	lease(ctx context.Context, key string, want int, skip int64) (leaseReply, error)
	// giveBack takes n*T off key's TAT if it is top (rounded: within
	// (top-1ns, top]), and reports whether it did.
	giveBack(ctx context.Context, key string, top gcra.Time, n int, rounded bool) (bool, error)
	// failed applies the failure policy to a charged request of cost n
	// whose call failed with err.
	failed(key string, n int, err error) (limits.Decision, error)
	// aheadFailed reports err, the failure of a lease taken ahead, which
	// no request's failure policy decides.
	aheadFailed(err error)
}

// leaseTable holds the runs of slots a process holds, per key.
type leaseTable struct {
	p       *gcra.Policy
	slots   int   // the most slots per lease
	keys    int   // the most entries
	dNS     int64 // D in whole ns, rounded down
	maxSkip int64 // the most a lease's last slot is placed ahead of now by a skip, D/8
	clock   func() int64
	b       leaseBackend
	// async runs a lease call taken ahead, with the shard's lock not
	// held: on a goroutine of its own for Redis; nil runs it at once, on
	// the caller's goroutine (the model of the tests).
	async func(func())
	seed  maphash.Seed
	count atomic.Int64 // entries
	rtt   atomic.Int64 // how long calls take, in ns: a moving average, quicker to rise than to fall
	stats *leaseStats  // shared with the tables of the GCRA's other limits
	// retired is set when the table's limit was replaced (retire): it
	// decides nothing more, and its slots have gone back to Redis.
	retired atomic.Bool
	shards  [leaseShards]leaseShard
}

// errRetired is take's answer once the table is retired: the caller asks
// the table of the limit in force.
var errRetired = errors.New("redislimit: the lease table's limit was replaced")

type leaseShard struct {
	mu sync.Mutex
	m  map[string]*leaseEntry
	_  [40]byte // keeps shards on their own cache lines
}

// leaseEntry is the local state of one key: its run of slots, the
// refusal Redis last gave, and its measured rate. Its fields are guarded
// by its shard's lock.
type leaseEntry struct {
	// The run: slot i, 1 <= i <= end, is at base + i*T on the server's
	// clock; slots next..end are in hand, the ones before spent or
	// expired, or given back by a refund.
	base      gcra.Time // the key's TAT or the server's now if later, before the lease, in ns since the epoch
	ahead     gcra.Time // base minus the server's now at the lease
	next, end int
	sent      int64         // the local clock when the lease call was sent
	recv      int64         // the local clock when its reply came
	srvNow    int64         // the server's clock at the lease, in ns since the epoch
	refunds   *leaseRefunds // nil until a run is followed by another, or a refund needs it
	// The rate: count requests since the local time since, when the
	// latest call for the key was made; measured is false before it.
	since    int64
	count    int64
	measured bool
	used     int64      // the local clock at the latest request
	fetch    *leaseCall // the lease call in flight, or nil
	// full is set when the latest lease granted all the slots it asked
	// for: the key had room, and the next run may be leased ahead.
	full bool
	// queued, if queued.k > 0, is a run leased ahead while slots of the
	// run above were in hand; it becomes the run once those are spent or
	// expired. Its slots come after the run's.
	queued leaseRun
}

// leaseRefunds is what the refunds of a key's decisions made from its runs
// of slots need.
type leaseRefunds struct {
	// back holds the slots refunds gave back to the hand, other than
	// those the run's next slot moved back over: the times of the slots
	// on the server's clock, rounded up to the nanosecond, latest first.
	// They are in hand until their time, whichever run they are of.
	back []int64
	// past holds the runs before the key's run whose slots may still be
	// given back: their last slot is still to come.
	past []pastRun
}

// given returns the slots refunds gave back in r.back; r may be nil.
func (r *leaseRefunds) given() int {
	if r == nil {
		return 0
	}
	return len(r.back)
}

// find returns where the slot at the time at is in r.back, or would go,
// and whether it is there.
func (r *leaseRefunds) find(at int64) (int, bool) {
	// Latest first: a slot comes before those earlier than it.
	return slices.BinarySearchFunc(r.back, at, func(x, at int64) int { return cmp.Compare(at, x) })
}

// pastRun is a run of slots whose slots are all spent or expired: slot i,
// 1 <= i <= end, is at base + i*T on the server's clock.
type pastRun struct {
	base gcra.Time
	end  int
}

// leaseRun is a run of slots granted by one lease and not yet begun.
type leaseRun struct {
	base, ahead        gcra.Time
	k                  int
	sent, recv, srvNow int64
}

// leaseCall is a lease call in flight, that other requests for its key
// wait for.
type leaseCall struct {
	done chan struct{} // closed when the call has ended
	err  error         // its error, set before done is closed
}

func newLeaseTable(p *gcra.Policy, slots, keys int, clock func() int64, b leaseBackend) *leaseTable {
	t := &leaseTable{p: p, slots: min(slots, p.Burst), keys: keys, dNS: p.D.NS, maxSkip: p.D.NS / 8, clock: clock, b: b, seed: maphash.MakeSeed(), stats: &leaseStats{}}
	for i := range t.shards {
		t.shards[i].m = make(map[string]*leaseEntry)
	}
	return t
}

// deadline returns the last local time at which slot i of e may be spent.
func (t *leaseTable) deadline(e *leaseEntry, i int) int64 {
	return e.sent + t.p.Add(e.ahead, t.p.Cost(i)).NS - int64(time.Microsecond)
}

// backDeadline returns the last local time at which the slot at the time
// at on the server's clock (rounded up to the nanosecond), a slot of e's
// run or of a run before it, may be spent. It reckons as deadline does,
// from e's run: the lease call was sent before the server read its clock,
// so any lease's reckoning errs early.
func (t *leaseTable) backDeadline(e *leaseEntry, at int64) int64 {
	return e.sent + (at - 1 - e.srvNow) - int64(time.Microsecond)
}

// serverTime returns the server's time at local time now as e's lease
// lets the process reckon it, never ahead of the server.
func (e *leaseEntry) serverTime(now int64) time.Time {
	return time.Unix(0, e.srvNow+now-e.recv)
}

// dropExpired drops the slots in hand whose time has passed at now, and
// begins the run leased ahead once the run's slots are all spent or
// dropped.
func (t *leaseTable) dropExpired(e *leaseEntry, now int64) {
	lost := 0
	if r := e.refunds; r != nil {
		for len(r.back) > 0 && t.backDeadline(e, r.back[len(r.back)-1]) < now {
			r.back = r.back[:len(r.back)-1]
			lost++
		}
	}
	for {
		for e.next <= e.end && t.deadline(e, e.next) < now {
			e.next++
			lost++
		}
		if e.next <= e.end || e.queued.k == 0 {
			break
		}
		t.begin(e, e.queued)
		e.queued = leaseRun{}
	}
	if lost > 0 {
		t.stats.expired.Add(uint64(lost))
		t.stats.unspent.Add(-int64(lost))
	}
}

// granted counts the slots of the lease reply r, sent and received at
// those local times, as leased and in hand, and returns their run.
func (t *leaseTable) granted(r leaseReply, sent, recv int64) leaseRun {
	if r.k > 0 {
		t.stats.leases.Add(1)
		t.stats.slots.Add(uint64(r.k))
		t.stats.unspent.Add(int64(r.k))
	}
	return leaseRun{base: t.p.Add(gcra.Time{NS: r.now}, r.ahead), ahead: r.ahead, k: r.k, sent: sent, recv: recv, srvNow: r.now}
}

// begin makes r e's run of slots in hand, in place of a run that holds
// none after its next slot, which joins the past runs while its last slot
// is still to come.
func (t *leaseTable) begin(e *leaseEntry, r leaseRun) {
	if e.end > 0 && (e.refunds != nil || gcra.Ceil(t.p.Add(e.base, t.p.Cost(e.end))) > r.srvNow) {
		if e.refunds == nil {
			e.refunds = &leaseRefunds{}
		}
		// Forget the past runs whose slots have all passed, as the
		// server's clock reads at r's lease at the latest.
		rf := e.refunds
		kept := rf.past[:0]
		for _, p := range rf.past {
			if gcra.Ceil(t.p.Add(p.base, t.p.Cost(p.end))) > r.srvNow {
				kept = append(kept, p)
			}
		}
		clear(rf.past[len(kept):])
		rf.past = kept
		switch n := len(rf.past); {
		case gcra.Ceil(t.p.Add(e.base, t.p.Cost(e.end))) <= r.srvNow:
		case n > 0 && rf.past[n-1].end+e.end <= t.p.Burst && t.p.Add(rf.past[n-1].base, t.p.Cost(rf.past[n-1].end)) == e.base:
			rf.past[n-1].end += e.end // the runs follow each other
		default:
			rf.past = append(rf.past, pastRun{e.base, e.end})
		}
	}
	e.sent, e.recv, e.srvNow = r.sent, r.recv, r.srvNow
	e.ahead, e.base = r.ahead, r.base
	e.next, e.end = 1, r.k
}

// held returns the slots e holds in hand: those left of its run, those
// refunds gave back and the run leased ahead.
func (e *leaseEntry) held() int { return e.left() + e.queued.k }

// left returns the slots e holds in hand but for the run leased ahead.
func (e *leaseEntry) left() int { return max(e.end-e.next+1, 0) + e.refunds.given() }

// serves reports whether the slots in hand serve a request of cost n
// without the run leased ahead: n slots in a row after the run's next,
// or, for a unit request, one a refund gave back.
func (e *leaseEntry) serves(n int) bool {
	return e.end-e.next+1 >= n || n == 1 && e.refunds.given() > 0
}

// entry returns key's entry, adding it if the table has room; nil if not.
// The shard's lock is held.
func (t *leaseTable) entry(s *leaseShard, key string, now int64) *leaseEntry {
	if e := s.m[key]; e != nil {
		return e
	}
	if t.count.Load() >= int64(t.keys) && !t.sweep(s, now) {
		return nil
	}
	e := &leaseEntry{next: 1} // no slots: next > end
	s.m[key] = e
	t.count.Add(1)
	return e
}

// sweep drops up to sweepProbes entries of shard s that hold nothing and
// saw no request for D, and reports whether it dropped one.
func (t *leaseTable) sweep(s *leaseShard, now int64) bool {
	probes, dropped := 0, false
	for k, e := range s.m {
		if probes++; probes > sweepProbes {
			break
		}
		if e.fetch != nil || now-e.used <= t.dNS {
			continue
		}
		t.dropExpired(e, now) // and a run leased ahead, once its time is past too
		if e.held() == 0 {
			delete(s.m, k)
			t.count.Add(-1)
			dropped = true
		}
	}
	return dropped
}

// take decides a request of cost n, 1 <= n <= burst, for key.
func (t *leaseTable) take(ctx context.Context, key string, n int) (limits.Decision, error) {
	s := &t.shards[maphash.String(t.seed, key)%leaseShards]
	counted := false
	for {
		now := t.clock()
		s.mu.Lock()
		if t.retired.Load() {
			s.mu.Unlock()
			return limits.Decision{}, errRetired
		}
		e := t.entry(s, key, now)
		if e == nil {
			s.mu.Unlock()
			return t.b.decide(ctx, key, n)
		}
		if !counted {
			e.count++
			counted = true
		}
		e.used = now
		t.dropExpired(e, now)
		if e.serves(n) {
			d := t.spend(e, n, now)
			ahead := t.leaseAhead(s, e, key, now)
			s.mu.Unlock()
			if ahead != nil {
				t.run(ahead)
			}
			return d, nil
		}
		if e.queued.k > 0 {
			// The run holds fewer than n slots, and the next one is in
			// hand: one call, as for a request the hand cannot serve.
			s.mu.Unlock()
			return t.b.decide(ctx, key, n)
		}
		if now < t.until(e, t.grant(n)) {
			// Redis would refuse, the key's TAT being no lower than the
			// lease left it, or have too little room to be worth a call.
			d := t.refusal(e, n, now)
			s.mu.Unlock()
			return d, nil
		}
		if c := e.fetch; c != nil {
			// Another goroutine is leasing for key: wait for it, and
			// share its failure.
			s.mu.Unlock()
			select {
			case <-c.done:
				if c.err != nil && c.err != errRetired {
					return t.b.failed(key, n, c.err)
				}
				continue
			case <-ctx.Done():
				return t.b.failed(key, n, ctx.Err())
			}
		}
		want, u := 1, int64(0) // u: the mean interval between requests
		if e.measured {
			if elapsed := now - e.since; elapsed <= 0 || e.count == 0 {
				want = t.slots
			} else {
				u = elapsed / e.count
				want = int(min(float64(t.dNS)*float64(e.count)/float64(elapsed), float64(t.slots)))
			}
		}
		e.since, e.count, e.measured = now, 0, true
		if want < 2 || want < n || e.next <= e.end {
			// A cold key, or a request the hand cannot serve while it
			// holds slots: one call.
			s.mu.Unlock()
			d, err := t.b.decide(ctx, key, n)
			if err == nil {
				t.took(t.clock() - now)
			}
			return d, err
		}
		// At a key with room to spare, the first slot comes two round
		// trips out and the lease lasts as long as the process takes to
		// spend it at its pace, so that its slots have not all passed
		// when the reply arrives or soon after. The time skipped is
		// charged as if spent; as nothing is skipped at a key whose TAT
		// runs an eighth of the burst ahead, skips never hold more.
		skip := max(min(2*t.rtt.Load()+int64(time.Microsecond)+int64(want)*u, t.maxSkip)-t.p.Cost(want).NS, 0)
		c := &leaseCall{done: make(chan struct{})}
		e.fetch = c
		s.mu.Unlock()

		sent := t.clock()
		r, err := t.b.lease(ctx, key, want, skip)
		recv := t.clock()

		s.mu.Lock()
		e.fetch = nil
		c.err = err
		close(c.done)
		if err == errRetired {
			s.mu.Unlock()
			return limits.Decision{}, errRetired
		}
		if err != nil {
			s.mu.Unlock()
			return t.b.failed(key, n, err)
		}
		t.took(recv - sent)
		run := t.granted(r, sent, recv)
		if t.retired.Load() {
			// Leased at the limit SetLimit replaced meanwhile, after it
			// took back the slots in hand: these go back too.
			s.mu.Unlock()
			t.giveBackRun(ctx, key, run)
			return limits.Decision{}, errRetired
		}
		switch {
		case e.next > e.end:
			t.begin(e, run)
		case run.k > 0:
			// Refunds gave the run slots back while the call was in
			// flight: the new run comes after them.
			e.queued = run
		}
		e.full = r.k == want
		now = t.clock()
		t.dropExpired(e, now) // slots whose time passed before the reply came
		if e.serves(n) {
			d := t.spend(e, n, now)
			s.mu.Unlock()
			return d, nil
		}
		if r.k >= n {
			// The reply came later than the slots' time: decide by a
			// call, as Redis had room.
			s.mu.Unlock()
			return t.b.decide(ctx, key, n)
		}
		// No room for the request: refused, and refused locally until
		// Redis has room for it; the slots granted stay in hand.
		d := t.refusal(e, n, now)
		s.mu.Unlock()
		return d, nil
	}
}

// leaseAhead starts the lease of e's next run, if e's key is hot and its
// latest lease granted all it asked for, once a quarter of e's run is
// left and no call for the key is in flight, so that the requests to
// come find slots in hand rather than wait for a call: it returns what
// to run, with the shard's lock not held, or nil. The next run makes up
// the hand to what the key's local rate would lease at once, so that the
// slots in hand never exceed a lease. Its first slot comes as late as
// the process takes to spend the slots left, two round trips on, within
// the skip's bound. The shard's lock is held.
func (t *leaseTable) leaseAhead(s *leaseShard, e *leaseEntry, key string, now int64) func() {
	left := e.left()
	if e.fetch != nil || e.queued.k > 0 || !e.full || !e.measured || 4*left > e.end {
		return nil
	}
	elapsed := now - e.since
	if elapsed <= 0 || e.count == 0 {
		return nil
	}
	u := elapsed / e.count
	if int64(e.end)*u < 2*(e.recv-e.sent) {
		// Half the run lasts less than the call that leased it took:
		// the hand would run out before the reply came all the same,
		// and leasing ahead would only make leases smaller.
		return nil
	}
	want := int(min(float64(t.dNS)*float64(e.count)/float64(elapsed), float64(t.slots))) - left
	if want < 2 {
		return nil
	}
	e.since, e.count = now, 0
	skip := max(min(2*t.rtt.Load()+int64(time.Microsecond)+int64(left+want)*u, t.maxSkip)-t.p.Cost(want).NS, 0)
	c := &leaseCall{done: make(chan struct{})}
	e.fetch = c
	return func() { t.fetchAhead(s, e, key, c, want, skip) }
}

// run runs f, a lease taken ahead, as t.async says.
func (t *leaseTable) run(f func()) {
	if t.async != nil {
		t.async(f)
		return
	}
	f()
}

// fetchAhead makes the lease call c that leaseAhead started for e, and
// queues the run granted behind e's run. A call that fails, or a key
// that had not room for all, stops leasing ahead until a lease made for a
// request grants all it asked for again; requests waiting for c share its
// failure, as they would a lease's made for a request.
func (t *leaseTable) fetchAhead(s *leaseShard, e *leaseEntry, key string, c *leaseCall, want int, skip int64) {
	sent := t.clock()
	r, err := t.b.lease(context.Background(), key, want, skip)
	recv := t.clock()
	s.mu.Lock()
	e.fetch = nil
	c.err = err
	if err == errRetired {
		// Not leased: the table's limit was replaced.
		s.mu.Unlock()
		close(c.done)
		return
	}
	if err != nil {
		e.full = false
		t.stats.aheadErrs.Add(1)
		s.mu.Unlock()
		// Reported before the requests waiting for c share it, and
		// with the lock not held, as the handler is the caller's code.
		t.b.aheadFailed(err)
		close(c.done)
		return
	}
	close(c.done)
	t.took(recv - sent)
	e.full = r.k == want
	if r.k == 0 {
		s.mu.Unlock()
		return
	}
	t.stats.ahead.Add(1)
	run := t.granted(r, sent, recv)
	if t.retired.Load() {
		// Leased at a limit SetLimit replaced meanwhile: given back.
		s.mu.Unlock()
		t.giveBackRun(context.Background(), key, run)
		return
	}
	e.queued = run
	t.dropExpired(e, t.clock()) // begins the run if the one before is spent
	s.mu.Unlock()
}

// giveBackRun gives back to Redis the run r of key's slots, leased by a
// call that was in flight when the table was retired, and counts its
// slots returned.
func (t *leaseTable) giveBackRun(ctx context.Context, key string, r leaseRun) {
	if r.k == 0 {
		return
	}
	t.stats.returned.Add(uint64(r.k))
	t.stats.unspent.Add(-int64(r.k))
	t.b.giveBack(ctx, key, t.p.Add(r.base, t.p.Cost(r.k)), r.k, false)
}

// spend admits a request of cost n, which e serves, from the slots in
// hand at now: a unit request takes the earliest slot a refund gave back,
// if any, and a request otherwise the n slots after the run's next. The
// Decision's At + ResetAfter is the time of the last slot it took,
// rounded up to the nanosecond, by which refund knows the slots it took.
func (t *leaseTable) spend(e *leaseEntry, n int, now int64) limits.Decision {
	var slot int64 // the time of the last slot spent
	if r := e.refunds; n == 1 && r.given() > 0 {
		slot = r.back[len(r.back)-1]
		r.back = r.back[:len(r.back)-1]
	} else {
		e.next += n
		slot = gcra.Ceil(t.p.Add(e.base, t.p.Cost(e.next-1)))
	}
	t.stats.spent.Add(uint64(n))
	t.stats.unspent.Add(-int64(n))
	t.stats.local.Add(1)
	at := e.serverTime(now)
	return limits.Decision{
		Allowed: true, Limit: t.p.Limit, Period: t.p.Period, Burst: t.p.Burst, Cost: n,
		Remaining: t.p.Report(true, t.view(e, now), 0).Remaining, ResetAfter: max(time.Duration(slot-at.UnixNano()), 0), At: at,
	}
}

// took notes that a call took d.
func (t *leaseTable) took(d int64) {
	if cur := t.rtt.Load(); d > cur {
		t.rtt.Store(cur + (d-cur)/2)
	} else {
		t.rtt.Store(cur - (cur-d)/8)
	}
}

// grant returns the room a key refused for a request of cost n must have
// before the process asks Redis again: n, or, if more, as many slots as
// the key's rate brings in four round trips, at most a lease. So a
// saturated key costs a process at most about one call every four round
// trips, at the price of a burst smaller by up to that many slots for the
// process, never a lower rate.
func (t *leaseTable) grant(n int) int {
	m := int(min(float64(4*t.rtt.Load())*float64(t.p.Den)/float64(t.p.TU), float64(t.slots)))
	return max(n, m)
}

// until returns the local time before which Redis would refuse a request
// of cost n for e's key, as its latest lease left it (the key's TAT then
// ahead of the server's now by e.ahead + e.end*T, at e.recv at the latest);
// in the past if e has no lease.
func (t *leaseTable) until(e *leaseEntry, n int) int64 {
	if e.recv == 0 && e.end == 0 {
		return 0
	}
	return e.recv + gcra.Ceil(t.p.Sub(t.p.Add(t.p.Add(e.ahead, t.p.Cost(e.end)), t.p.Cost(n)), t.p.D))
}

// view returns how far the key's TAT runs ahead of now as this process
// sees it: its lease's slots spent or expired charged, those in hand not.
func (t *leaseTable) view(e *leaseEntry, now int64) gcra.Time {
	ahead := t.p.Sub(t.p.Add(e.ahead, t.p.Cost(max(e.next-1-e.refunds.given(), 0))), gcra.Time{NS: now - e.recv})
	if !gcra.Positive(ahead) {
		return gcra.Time{}
	}
	return ahead
}

// refusal refuses a request of cost n locally at now, as Redis would.
func (t *leaseTable) refusal(e *leaseEntry, n int, now int64) limits.Decision {
	t.stats.local.Add(1)
	ahead := t.view(e, now)
	return limits.Decision{
		Reason: limits.ReasonRateLimited, Limit: t.p.Limit, Period: t.p.Period, Burst: t.p.Burst, Cost: n,
		Remaining: t.p.Report(true, ahead, 0).Remaining, RetryAfter: time.Duration(max(t.until(e, t.grant(n))-now, 1)),
		ResetAfter: time.Duration(gcra.Ceil(ahead)), At: e.serverTime(now),
	}
}

// look answers a request of cost n that charges nothing, for a key this
// process holds a lease of, from what the process knows: reason is the
// refusal of a cost no wait cures (negative or above the burst), or
// the zero Reason (allowed) for cost 0 and a Peek. It returns false, to ask Redis,
// for a key with no lease.
func (t *leaseTable) look(key string, n int, reason limits.Reason) (limits.Decision, bool) {
	s := &t.shards[maphash.String(t.seed, key)%leaseShards]
	now := t.clock()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[key]
	if e == nil || e.recv == 0 || t.retired.Load() {
		return limits.Decision{}, false
	}
	t.dropExpired(e, now)
	ahead := t.view(e, now)
	d := limits.Decision{
		Allowed: true, Limit: t.p.Limit, Period: t.p.Period, Burst: t.p.Burst, Cost: n,
		Remaining: t.p.Report(true, ahead, 0).Remaining, ResetAfter: time.Duration(gcra.Ceil(ahead)), At: e.serverTime(now),
	}
	switch {
	case reason != reasonAllowed:
		d.Allowed, d.Reason = false, reason
	case n > 0 && e.held() < n && now < t.until(e, t.grant(n)):
		d.Allowed, d.Reason, d.RetryAfter = false, limits.ReasonRateLimited, time.Duration(max(t.until(e, t.grant(n))-now, 1))
	case n > 0 && e.held() < n:
		return limits.Decision{}, false // Redis may have room: ask
	}
	t.stats.local.Add(1)
	return d, true
}

// refund gives back d, an allowed decision for key, and reports whether d
// was made from key's runs of slots: its slots go back to the hand, those
// whose time has not passed, unless they are in hand already (d was given
// back before). False means that d is none of the runs' that may still be
// given back. Each admission from a run holds slots of its own, which
// spend records in its Decision, and only those go back: so refunds in any
// order give back exactly what their decisions took.
func (t *leaseTable) refund(key string, d limits.Decision) bool {
	s := &t.shards[maphash.String(t.seed, key)%leaseShards]
	now := t.clock()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[key]
	if e == nil || e.recv == 0 || t.retired.Load() {
		return false
	}
	charged := d.At.UnixNano() + int64(d.ResetAfter)
	if c, ok := t.slotOf(e.base, e.end, charged, d.Cost); ok {
		if c >= e.next {
			return true // in hand already
		}
		t.giveBack(e, e.base, c, d.Cost, now)
		return true
	}
	if r := e.refunds; r != nil {
		for i := len(r.past) - 1; i >= 0; i-- {
			if c, ok := t.slotOf(r.past[i].base, r.past[i].end, charged, d.Cost); ok {
				t.giveBack(e, r.past[i].base, c, d.Cost, now)
				return true
			}
		}
	}
	return false
}

// slotOf returns the slot c, n <= c <= end, of the run of slots after base
// whose time rounds up to charged.
func (t *leaseTable) slotOf(base gcra.Time, end int, charged int64, n int) (int, bool) {
	rel := charged - base.NS
	if rel <= 0 || end == 0 {
		return 0, false
	}
	tf := float64(t.p.TU) / float64(t.p.Den)
	j := int(float64(rel)/tf + 0.5)
	for _, c := range [...]int{j, j - 1, j + 1} {
		if c >= n && c <= end && gcra.Ceil(t.p.Add(base, t.p.Cost(c))) == charged {
			return c, true
		}
	}
	return 0, false
}

// giveBack puts the slots c-n+1..c of the run of slots after base, spent
// by one admission, back in e's hand at now, but those whose time has
// passed. Those that are the latest spent of e's run go back to the run,
// with the slots given back just below them; the others to e.refunds.back.
func (t *leaseTable) giveBack(e *leaseEntry, base gcra.Time, c, n int, now int64) {
	given := 0
	if base == e.base && c == e.next-1 {
		first := c - n + 1
		for first <= c && t.deadline(e, first) < now {
			first++
		}
		given = c - first + 1
		if given > 0 {
			e.next = first
		}
		for r := e.refunds; e.next > 1 && r.given() > 0; e.next-- {
			k, found := r.find(gcra.Ceil(t.p.Add(e.base, t.p.Cost(e.next-1))))
			if !found {
				break
			}
			r.back = slices.Delete(r.back, k, k+1)
		}
	} else {
		for i := c - n + 1; i <= c; i++ {
			at := gcra.Ceil(t.p.Add(base, t.p.Cost(i)))
			if t.backDeadline(e, at) < now {
				continue
			}
			if e.refunds == nil {
				e.refunds = &leaseRefunds{}
			}
			r := e.refunds
			k, found := r.find(at)
			if found {
				continue // given back before
			}
			r.back = slices.Insert(r.back, k, at)
			given++
		}
	}
	if given > 0 {
		t.stats.spent.Add(^uint64(given - 1))
		t.stats.unspent.Add(int64(given))
	}
}

// leaseReturn is a run of slots in hand to give back to Redis: the n
// slots of key up to top.
type leaseReturn struct {
	key string
	top gcra.Time
	n   int
}

// giveBackAll returns every run of slots in hand to Redis.
func (t *leaseTable) giveBackAll(ctx context.Context) (int, error) {
	return t.giveBackRuns(ctx, t.collect())
}

// retire stops t deciding, for a limit that replaces t's, and returns its
// runs of slots in hand, to give back to Redis with giveBackRuns. A
// decision made from t's slots holds its shard's lock, so that none is
// made once retire has passed its shard.
func (t *leaseTable) retire() []leaseReturn {
	t.retired.Store(true)
	return t.collect()
}

// collect takes every run of slots in hand out of t, the later run of a
// key first, for giveBackRuns, and drops the slots refunds gave back below
// slots still spent.
func (t *leaseTable) collect() []leaseReturn {
	var runs []leaseReturn
	now := t.clock()
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for k, e := range s.m {
			t.dropExpired(e, now)
			if q := e.queued; q.k > 0 {
				// The later run first: once it is back, the run before
				// may be top again.
				runs = append(runs, leaseReturn{k, t.p.Add(q.base, t.p.Cost(q.k)), q.k})
				e.queued = leaseRun{}
				t.stats.returned.Add(uint64(q.k))
				t.stats.unspent.Add(-int64(q.k))
			}
			if n := e.end - e.next + 1; n > 0 {
				runs = append(runs, leaseReturn{k, t.p.Add(e.base, t.p.Cost(e.end)), n})
				e.next = e.end + 1
				t.stats.returned.Add(uint64(n))
				t.stats.unspent.Add(-int64(n))
			}
			if n := e.refunds.given(); n > 0 {
				// Slots refunds gave back below slots still spent: Redis
				// could take them back only with those, so they are
				// dropped.
				e.refunds.back = e.refunds.back[:0]
				t.stats.returned.Add(uint64(n))
				t.stats.unspent.Add(-int64(n))
			}
		}
		s.mu.Unlock()
	}
	return runs
}

// giveBackRuns gives runs back to Redis, in order, and returns how many
// slots Redis took back, and the first error.
func (t *leaseTable) giveBackRuns(ctx context.Context, runs []leaseReturn) (int, error) {
	given := 0
	var first error
	for _, r := range runs {
		ok, err := t.b.giveBack(ctx, r.key, r.top, r.n, false)
		if err != nil && first == nil {
			first = err
		}
		if ok {
			given += r.n
		}
	}
	return given, first
}

// The GCRA's side of the lease mode.

// ReturnLeases gives back to Redis the slots this GCRA holds in hand, for
// every key, as on an orderly shutdown, and reports how many Redis took
// back. A key's slots are taken back only if the key's TAT is where this
// process's lease left it, nothing having been charged for the key since:
// slots leased by other processes since then keep their times; slots that
// refunds put back in hand below slots still spent are not taken back
// either. Slots not taken back are dropped all the same and expire with
// their times. It does
// nothing without WithLeases. An error wraps ErrUnavailable and the first
// failure; the GCRA remains usable, taking new leases as it needs.
func (g *GCRA) ReturnLeases(ctx context.Context) (int, error) {
	if !g.leases {
		return 0, nil
	}
	return g.lim.Load().leases.giveBackAll(ctx)
}

// LeaseStats returns a snapshot of the lease counters.
func (g *GCRA) LeaseStats() LeaseStats {
	if !g.leases {
		return LeaseStats{}
	}
	c := g.leaseStats
	return LeaseStats{
		Leases: c.leases.Load(), Ahead: c.ahead.Load(), AheadErrors: c.aheadErrs.Load(), Slots: c.slots.Load(), Spent: c.spent.Load(), Expired: c.expired.Load(),
		Returned: c.returned.Load(), Local: c.local.Load(), Held: uint64(max(c.unspent.Load(), 0)),
	}
}

// redisLeases is the leaseBackend of a GCRA's lease table: its Redis, at
// the table's limit, st. Decisions by a call are made at the limit in
// force.
type redisLeases struct {
	g  *GCRA
	st *limitState
}

func (r redisLeases) decide(ctx context.Context, key string, n int) (limits.Decision, error) {
	return r.g.decide(ctx, key, n, true)
}

func (r redisLeases) failed(key string, n int, err error) (limits.Decision, error) {
	return r.g.failed(r.g.lim.Load(), key, n, true, reasonAllowed, err)
}

func (r redisLeases) aheadFailed(err error) {
	if r.g.onError != nil {
		r.g.onError(fmt.Errorf("%w: a lease taken ahead failed: %w", ErrUnavailable, err))
	}
}

func (r redisLeases) lease(ctx context.Context, key string, want int, skip int64) (leaseReply, error) {
	g, st := r.g, r.st
	g.callMu.RLock()
	defer g.callMu.RUnlock()
	if g.lim.Load() != st {
		return leaseReply{}, errRetired // not at a limit SetLimit replaced
	}
	p, lead := st.at(g.clock())
	args := make([]any, 0, 14)
	args = append(args, st.den)
	args = timeArgs(args, st.p.T)
	args = append(args, st.dArgs...)
	args = append(args, strconv.Itoa(want))
	args = timeArgs(args, gcra.Time{NS: max(skip, 0)})
	if lead {
		args = append(args, st.lArgs...)
	}
	ctx, cancel := g.bound(ctx)
	rep, err := g.call(ctx, leaseScript, g.prefix+key, args, p)
	cancel()
	if err != nil {
		return leaseReply{}, err
	}
	g.statistics.answered.Add(1)
	if rep.flag < 0 || rep.flag > int64(want) {
		return leaseReply{}, fmt.Errorf("%w: %d slots granted", errReply, rep.flag)
	}
	return leaseReply{k: int(rep.flag), ahead: rep.ahead, now: rep.now.UnixNano()}, nil
}

func (r redisLeases) giveBack(ctx context.Context, key string, top gcra.Time, n int, rounded bool) (bool, error) {
	return r.g.giveBack(ctx, key, &r.st.p, top, n, rounded)
}

// giveBack takes a charge of n at p off key's TAT, in p's units, if the
// TAT is top (rounded: within (top-1ns, top]), and reports whether it did.
func (g *GCRA) giveBack(ctx context.Context, key string, p *gcra.Policy, top gcra.Time, n int, rounded bool) (bool, error) {
	args := make([]any, 0, 9)
	args = append(args, strconv.FormatUint(p.Den, 10))
	args = timeArgs(args, top) // seconds since the epoch are well within MaxSpan
	args = timeArgs(args, p.Cost(n))
	if rounded {
		args = append(args, "1")
	} else {
		args = append(args, "0")
	}
	ctx, cancel := g.bound(ctx)
	rep, err := g.call(ctx, giveBackScript, g.prefix+key, args, p)
	cancel()
	if err != nil {
		g.statistics.refundErrs.Add(1)
		g.statistics.failure(err)
		err = fmt.Errorf("%w: nothing given back: %w", ErrUnavailable, err)
		if g.onError != nil {
			g.onError(err)
		}
		return false, err
	}
	g.statistics.refunds.Add(1)
	return rep.flag == 1, nil
}
