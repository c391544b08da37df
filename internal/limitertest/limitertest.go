// Package limitertest is the conformance suite for limiters that implement
// limits.Limiter with the semantics of limits.GCRA: the local one and the
// Redis one (package redislimit) run the same table, so their decisions
// and refunds agree.
//
// The suite runs on real time, since a limiter such as the Redis one keeps
// its own clock. Most cases use periods so long that the milliseconds a test
// takes cannot change a decision, and compare durations with the truth up to
// the time the case has taken so far plus the limiter's clock granularity,
// both measured, never guessed. Identities that hold whatever the time
// (Remaining and RetryAfter from ResetAfter, with the emission interval
// kept exactly as a fraction of a nanosecond) are checked on every
// decision.
package limitertest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/internal/gcra"
)

// Factory returns a limiter with no state yet, allowing each key limit
// events per period in bursts of at most burst.
type Factory func(t *testing.T, limit int, period time.Duration, burst int) limits.Limiter

// Run runs the suite against the limiters newLimiter makes, as subtests of
// t. granularity is the step of the limiter's clock: 0 for one that reads
// time.Now, a microsecond for Redis's TIME.
// reasonAllowed is the Reason of an allowed request, the zero Reason.
const reasonAllowed limits.Reason = 0

func Run(t *testing.T, granularity time.Duration, newLimiter Factory) {
	t.Run("Sequences", func(t *testing.T) { testSequences(t, granularity, newLimiter) })
	t.Run("AgainstModel", func(t *testing.T) { testAgainstModel(t, granularity, newLimiter) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, newLimiter) })
	t.Run("Recovery", func(t *testing.T) { testRecovery(t, granularity, newLimiter) })
	t.Run("Refund", func(t *testing.T) { testRefund(t, granularity, newLimiter) })
	t.Run("SetLimit", func(t *testing.T) { testSetLimit(t, granularity, newLimiter) })
}

// Setter is a limiter whose limit changes while it serves, as
// limits.GCRA.SetLimit and redislimit.GCRA.SetLimit change it: burst 0
// means limit.
type Setter interface {
	SetLimit(limit int, period time.Duration, burst int) error
}

// policy is a limiter's configuration, with its arithmetic.
type policy struct {
	limit  int
	period time.Duration
	burst  int
	p      gcra.Policy
}

func newPolicy(limit int, period time.Duration, burst int) policy {
	p, err := gcra.New(limit, period, burst)
	if err != nil {
		panic(err)
	}
	return policy{limit: limit, period: period, burst: burst, p: p}
}

// times returns k*T in nanoseconds, rounded up.
func (p policy) times(k int64) int64 {
	return gcra.Ceil(p.p.Cost(int(k)))
}

// checkIdentities checks what must hold of any decision on a request of
// cost n, whatever the time. ResetAfter is the key's lead rounded up to
// the nanosecond, so the exact lead lies in (ResetAfter-1ns, ResetAfter],
// and Remaining and RetryAfter must be what one of those leads gives. The
// lead is at most D, or p.p.Lead after a change to a smaller burst.
func (p policy) checkIdentities(t *testing.T, what string, n int, d limits.Decision) {
	t.Helper()
	if d.Limit != p.limit || d.Period != p.period || d.Burst != p.burst || d.Cost != n {
		t.Errorf("%s: policy %d/%v burst %d cost %d, want %d/%v burst %d cost %d", what, d.Limit, d.Period, d.Burst, d.Cost, p.limit, p.period, p.burst, n)
	}
	if d.Allowed != (d.Reason == reasonAllowed) {
		t.Errorf("%s: Allowed %v with Reason %v", what, d.Allowed, d.Reason)
	}
	if d.At.IsZero() || time.Until(d.At).Abs() > time.Minute {
		t.Errorf("%s: At %v is not the time of the decision", what, d.At)
	}
	if d.ResetAfter < 0 || int64(d.ResetAfter) > gcra.Ceil(p.p.Lead) {
		t.Errorf("%s: ResetAfter %v outside [0, %v]", what, d.ResetAfter, time.Duration(gcra.Ceil(p.p.Lead)))
	}
	hi := gcra.Time{NS: int64(d.ResetAfter)}
	lo := hi
	if p.p.Den > 1 && hi.NS > 0 {
		lo = gcra.Time{NS: hi.NS - 1, Frac: 1}
	}
	cost := n
	if n < 0 || n > p.burst {
		cost = 0
	}
	rh, rl := p.p.Report(false, hi, cost), p.p.Report(false, lo, cost)
	if d.Remaining != rh.Remaining && d.Remaining != rl.Remaining {
		t.Errorf("%s: Remaining %d, want %d from ResetAfter %v and T %v", what, d.Remaining, rh.Remaining, d.ResetAfter, p.p.T)
	}
	if d.Reason == limits.ReasonRateLimited {
		// The request is allowed once the lead has come within D - n*T.
		if d.RetryAfter <= 0 || d.RetryAfter < rl.RetryAfter || d.RetryAfter > rh.RetryAfter {
			t.Errorf("%s: RetryAfter %v, want %v from ResetAfter %v, T %v and burst %d", what, d.RetryAfter, rh.RetryAfter, d.ResetAfter, p.p.T, p.burst)
		}
	} else if d.RetryAfter != 0 {
		t.Errorf("%s: RetryAfter %v with Reason %v", what, d.RetryAfter, d.Reason)
	}
}

// step is one request of a sequence and the decision it must get. retry and
// reset are in multiples of T at the instant of the sequence's first
// request; the limiter's answers may be smaller by the time the sequence
// has taken since, plus the clock's granularity.
type step struct {
	key       string
	n         int
	allowed   bool
	reason    limits.Reason
	remaining int
	retry     int64
	reset     int64
}

func ok(key string, n, remaining int, reset int64) step {
	return step{key: key, n: n, allowed: true, remaining: remaining, reset: reset}
}

func limited(key string, n, remaining int, retry, reset int64) step {
	return step{key: key, n: n, reason: limits.ReasonRateLimited, remaining: remaining, retry: retry, reset: reset}
}

func refused(key string, n int, reason limits.Reason, remaining int, reset int64) step {
	return step{key: key, n: n, reason: reason, remaining: remaining, reset: reset}
}

const (
	day  = 24 * time.Hour
	year = 365 * day
)

var longKey = strings.Repeat("k", 1000)

var sequences = []struct {
	name   string
	limit  int
	period time.Duration
	burst  int
	steps  []step
}{
	{
		name: "burst then refuse", limit: 10, period: time.Hour, burst: 3,
		steps: []step{
			ok("k", 1, 2, 1), ok("k", 1, 1, 2), ok("k", 1, 0, 3),
			limited("k", 1, 0, 1, 3), limited("k", 1, 0, 1, 3),
			ok("other", 1, 2, 1), ok("k", 0, 0, 3),
		},
	},
	{
		name: "costs", limit: 5, period: time.Hour, burst: 5,
		steps: []step{
			ok("k", 3, 2, 3),
			limited("k", 3, 2, 1, 3),
			refused("k", 6, limits.ReasonCostAboveBurst, 2, 3),
			refused("k", 1000, limits.ReasonCostAboveBurst, 2, 3),
			refused("k", math.MaxInt, limits.ReasonCostAboveBurst, 2, 3),
			refused("k", -1, limits.ReasonInvalidCost, 2, 3),
			refused("k", math.MinInt, limits.ReasonInvalidCost, 2, 3),
			ok("k", 0, 2, 3),
			ok("k", 2, 0, 5),
			limited("k", 1, 0, 1, 5),
			limited("k", 5, 0, 5, 5),
			ok("k", 0, 0, 5),
		},
	},
	{
		name: "new keys", limit: 4, period: time.Hour, burst: 4,
		steps: []step{
			ok("a", 0, 4, 0),
			refused("b", -1, limits.ReasonInvalidCost, 4, 0),
			refused("c", 5, limits.ReasonCostAboveBurst, 4, 0),
			ok("a", 4, 0, 4), ok("b", 4, 0, 4), ok("c", 4, 0, 4),
		},
	},
	{
		name: "burst of one", limit: 4, period: time.Hour, burst: 1,
		steps: []step{
			ok("k", 1, 0, 1), limited("k", 1, 0, 1, 1), ok("k", 0, 0, 1),
			refused("k", 2, limits.ReasonCostAboveBurst, 0, 1),
		},
	},
	{
		name: "burst above the limit", limit: 2, period: time.Hour, burst: 5,
		steps: []step{
			ok("k", 1, 4, 1), ok("k", 2, 2, 3), ok("k", 2, 0, 5), limited("k", 1, 0, 1, 5),
		},
	},
	{
		// 3600s/7 is not a whole number of nanoseconds: T is kept exactly,
		// so that all 7 pass at once, and the whole burst takes exactly an
		// hour to come back.
		name: "seven an hour", limit: 7, period: time.Hour, burst: 7,
		steps: []step{
			ok("k", 1, 6, 1), ok("k", 5, 1, 6), ok("k", 1, 0, 7), limited("k", 1, 0, 1, 7), limited("k", 7, 0, 7, 7),
		},
	},
	{
		name: "three in ten seconds", limit: 3, period: 10 * time.Second, burst: 3,
		steps: []step{ok("k", 3, 0, 3)},
	},
	{
		name: "full burst at once", limit: 1000, period: time.Hour, burst: 1000,
		steps: []step{ok("k", 1000, 0, 1000), limited("k", 1, 0, 1, 1000), limited("k", 1000, 0, 1000, 1000)},
	},
	{
		name: "daily quota", limit: 5000, period: day, burst: 5000,
		steps: []step{ok("acct", 4999, 1, 4999), ok("acct", 1, 0, 5000), limited("acct", 10, 0, 10, 5000)},
	},
	{
		// burst*T is about 1.6e18ns, far beyond the 2^53 that doubles hold
		// exactly.
		name: "fifty years", limit: 1, period: 50 * year, burst: 1,
		steps: []step{ok("k", 1, 0, 1), limited("k", 1, 0, 1, 1), ok("k", 0, 0, 1)},
	},
	{
		name: "yearly quota", limit: 1000, period: year, burst: 1000,
		steps: []step{ok("k", 999, 1, 999), ok("k", 1, 0, 1000), limited("k", 7, 0, 7, 1000)},
	},
	{
		// T is 3.5ns exactly, below the microsecond of Redis's clock.
		name: "three and a half nanoseconds", limit: 1_000_000_000, period: 3500 * time.Millisecond, burst: 3,
		steps: []step{ok("k", 3, 0, 3)},
	},
	{
		name: "unusual keys", limit: 2, period: time.Hour, burst: 2,
		steps: []step{
			ok("", 2, 0, 2), ok(" ", 2, 0, 2), ok("a b", 2, 0, 2), ok("{tag}x", 2, 0, 2),
			ok("{tag}y", 2, 0, 2), ok("ключ", 2, 0, 2), ok("k\x00\n", 2, 0, 2), ok(longKey, 2, 0, 2),
			limited("", 1, 0, 1, 2), limited("{tag}x", 1, 0, 1, 2), limited(longKey, 1, 0, 1, 2),
		},
	},
}

func testSequences(t *testing.T, granularity time.Duration, newLimiter Factory) {
	ctx := context.Background()
	for _, seq := range sequences {
		t.Run(seq.name, func(t *testing.T) {
			p := newPolicy(seq.limit, seq.period, seq.burst)
			l := newLimiter(t, seq.limit, seq.period, seq.burst)
			start := time.Now()
			for i, s := range seq.steps {
				d, err := l.Take(ctx, s.key, s.n)
				slack := time.Since(start) + granularity
				what := fmt.Sprintf("step %d: Take(%.20q, %d)", i, s.key, s.n)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				p.checkIdentities(t, what, s.n, d)
				if d.Allowed != s.allowed || d.Reason != s.reason || d.Remaining != s.remaining {
					t.Errorf("%s: %+v, want allowed %v, reason %v, remaining %d", what, d, s.allowed, s.reason, s.remaining)
				}
				checkNear(t, what+": RetryAfter", d.RetryAfter, p.times(s.retry), slack)
				checkNear(t, what+": ResetAfter", d.ResetAfter, p.times(s.reset), slack)
			}
		})
	}
}

// checkNear checks that got is want, or less by at most slack, the time
// that may have passed since want was true.
func checkNear(t *testing.T, what string, got time.Duration, want int64, slack time.Duration) {
	t.Helper()
	if int64(got) > want || int64(got) < want-int64(slack) {
		t.Errorf("%s = %v, want %v or less by at most %v", what, got, time.Duration(want), slack)
	}
}

// testAgainstModel sends random requests, costs out of range included, on a
// few keys of a limiter so slow that no key recovers anything during the
// test, and compares each decision with a model that counts each key's
// charges: then a request is allowed if and only if it fits in what is
// left of the burst.
func testAgainstModel(t *testing.T, granularity time.Duration, newLimiter Factory) {
	ctx := context.Background()
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 6))
		burst := 1 + rng.IntN(12)
		limit := 1 + rng.IntN(20)
		p := newPolicy(limit, 1000*time.Hour, burst)
		l := newLimiter(t, p.limit, p.period, p.burst)
		used := map[string]int{}
		var last limits.Decision
		lastKey := ""
		start := time.Now()
		for i := range 150 {
			key := fmt.Sprintf("key-%d", rng.IntN(4))
			n := rng.IntN(burst+3) - 1
			if rng.IntN(6) == 0 && lastKey != "" {
				// Give the latest allowed charge back: no time has passed
				// for a key this slow, so all of it comes back.
				if err := l.Refund(ctx, lastKey, last); err != nil {
					t.Fatalf("seed %d request %d: Refund: %v", seed, i, err)
				}
				used[lastKey] -= last.Cost
				lastKey = ""
				continue
			}
			d, err := l.Take(ctx, key, n)
			slack := time.Since(start) + granularity
			what := fmt.Sprintf("seed %d request %d: Take(%s, %d) with %d of %d used", seed, i, key, n, used[key], burst)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			p.checkIdentities(t, what, n, d)
			want := step{reason: reasonAllowed, allowed: true}
			switch {
			case n < 0:
				want = step{reason: limits.ReasonInvalidCost}
			case n > burst:
				want = step{reason: limits.ReasonCostAboveBurst}
			case used[key]+n > burst:
				want = step{reason: limits.ReasonRateLimited, retry: int64(used[key] + n - burst)}
			default:
				used[key] += n
				if n > 0 {
					last, lastKey = d, key
				}
			}
			want.remaining = burst - used[key]
			if d.Allowed != want.allowed || d.Reason != want.reason || d.Remaining != want.remaining {
				t.Fatalf("%s: %+v, want allowed %v, reason %v, remaining %d", what, d, want.allowed, want.reason, want.remaining)
			}
			checkNear(t, what+": RetryAfter", d.RetryAfter, p.times(want.retry), slack)
			checkNear(t, what+": ResetAfter", d.ResetAfter, p.times(int64(used[key])), slack)
		}
	}
}

// testConcurrent has goroutines race for one key's burst: exactly the burst
// passes, and the allowed decisions report each Remaining from burst-1 down
// to 0 once, as if they had been made one at a time.
func testConcurrent(t *testing.T, newLimiter Factory) {
	const workers, each, burst = 8, 40, 100
	l := newLimiter(t, burst, 1000*time.Hour, burst)
	var mu sync.Mutex
	seen := map[int]int{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				d, err := l.Take(context.Background(), "hot", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					mu.Lock()
					seen[d.Remaining]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != burst {
		t.Errorf("%d distinct Remaining values among the allowed, want %d: %v", len(seen), burst, seen)
	}
	for r, c := range seen {
		if r < 0 || r >= burst || c != 1 {
			t.Errorf("Remaining %d reported %d times", r, c)
		}
	}
}

// testRecovery waits for what the limiter says: a request refused with
// RetryAfter r is allowed r later, and a key is back to its full burst
// ResetAfter later. Waiting longer than told is always right, so the test
// waits the time told plus the clock's granularity.
func testRecovery(t *testing.T, granularity time.Duration, newLimiter Factory) {
	ctx := context.Background()
	start := time.Now()
	p := newPolicy(10, time.Second, 2) // T = 100ms
	l := newLimiter(t, p.limit, p.period, p.burst)
	allow := func(n int) limits.Decision {
		t.Helper()
		d, err := l.Take(ctx, "k", n)
		if err != nil {
			t.Fatal(err)
		}
		p.checkIdentities(t, fmt.Sprintf("Take(k, %d)", n), n, d)
		return d
	}
	allow(1)
	allow(1)
	if d := allow(2); d.Reason == limits.ReasonRateLimited {
		time.Sleep(d.RetryAfter + granularity)
		if d := allow(2); !d.Allowed {
			t.Fatalf("Take(k, 2) after RetryAfter: %+v", d)
		}
	} else {
		t.Logf("Take(k, 2) allowed at once, %v after the first request: RetryAfter not exercised", time.Since(start))
	}
	d := allow(0)
	time.Sleep(d.ResetAfter + granularity)
	if d := allow(0); d.Remaining != p.burst || d.ResetAfter != 0 {
		t.Errorf("after ResetAfter: %+v, want the full burst", d)
	}
}

// testRefund checks that a refund gives a charge back: all of it when
// nothing came in between, none of a refusal or of a cost of 0, and never
// more than the key owes from the charge.
func testRefund(t *testing.T, granularity time.Duration, newLimiter Factory) {
	ctx := context.Background()
	p := newPolicy(7, 1000*time.Hour, 5) // no key recovers anything during the test
	l := newLimiter(t, p.limit, p.period, p.burst)
	take := func(key string, n int) limits.Decision {
		t.Helper()
		d, err := l.Take(ctx, key, n)
		if err != nil {
			t.Fatal(err)
		}
		p.checkIdentities(t, fmt.Sprintf("Take(%s, %d)", key, n), n, d)
		return d
	}
	refund := func(key string, d limits.Decision) {
		t.Helper()
		if err := l.Refund(ctx, key, d); err != nil {
			t.Fatalf("Refund(%s, %+v): %v", key, d, err)
		}
	}
	take("a", 2)
	d := take("a", 3)
	refund("a", d)
	if d := take("a", 0); d.Remaining != 3 {
		t.Errorf("after a charge of 3 and its refund: %+v, want 3 remaining", d)
	}
	// A refusal and a cost of 0 give nothing back.
	refund("a", take("a", 4))
	refund("a", take("a", 0))
	if d := take("a", 0); d.Remaining != 3 {
		t.Errorf("after refunding a refusal and a cost of 0: %+v, want 3 remaining", d)
	}
	// Charges made after the one refunded stay charged.
	first := take("b", 2)
	take("b", 2)
	refund("b", first)
	if d := take("b", 0); d.Remaining != 3 {
		t.Errorf("after refunding the first of two charges: %+v, want 3 remaining", d)
	}
	// A key never charged gains nothing from a refund.
	refund("c", first)
	if d := take("c", 5); !d.Allowed {
		t.Errorf("a fresh key after a stray refund: %+v", d)
	}
	if d := take("c", 1); d.Allowed {
		t.Errorf("a stray refund credited a fresh key: %+v", d)
	}
	// A unit limit that recovers quickly: a charge whose time has passed
	// is owed no more, and its refund gives back nothing.
	q := newPolicy(1000, time.Second, 1) // T = 1ms
	f := newLimiter(t, q.limit, q.period, q.burst)
	d1, err := f.Take(ctx, "k", 1)
	if err != nil || !d1.Allowed {
		t.Fatalf("Take: %+v, %v", d1, err)
	}
	time.Sleep(2*time.Millisecond + granularity)
	d2, err := f.Take(ctx, "k", 1)
	if err != nil || !d2.Allowed {
		t.Fatalf("Take after 2ms: %+v, %v", d2, err)
	}
	if err := f.Refund(ctx, "k", d1); err != nil {
		t.Fatal(err)
	}
	if d, err := f.Take(ctx, "k", 1); err != nil || d.Allowed && time.Since(d2.At) < time.Duration(q.times(1))-granularity {
		t.Errorf("a late refund of an old charge let a request through: %+v, %v", d, err)
	}
}

// testSetLimit changes the limit of a limiter that is a Setter between
// requests, to a stricter limit and then a looser one, and checks that
// each key keeps its state by the one rule: a key's TAT is kept, so that
// under a stricter limit a key that owes more than the new burst waits,
// with an exact RetryAfter, until it owes the new burst less the cost;
// no change hands out a fresh burst; and a refund of a decision made
// before a change gives back what that decision charged. The periods are
// so long that no key recovers anything during the test.
func testSetLimit(t *testing.T, granularity time.Duration, newLimiter Factory) {
	ctx := context.Background()
	p0 := newPolicy(10, 1000*time.Hour, 10) // T 100h, D 1000h
	l := newLimiter(t, p0.limit, p0.period, p0.burst)
	s, isSetter := l.(Setter)
	if !isSetter {
		t.Skipf("%T has no SetLimit", l)
	}
	start := time.Now()
	p := p0
	check := func(key string, n int, want step) limits.Decision {
		t.Helper()
		d, err := l.Take(ctx, key, n)
		slack := time.Since(start) + granularity
		what := fmt.Sprintf("at %d/%v burst %d: Take(%s, %d)", p.limit, p.period, p.burst, key, n)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		p.checkIdentities(t, what, n, d)
		if d.Allowed != want.allowed || d.Reason != want.reason || d.Remaining != want.remaining {
			t.Errorf("%s: %+v, want allowed %v, reason %v, remaining %d", what, d, want.allowed, want.reason, want.remaining)
		}
		checkNear(t, what+": RetryAfter", d.RetryAfter, p.times(want.retry), slack)
		checkNear(t, what+": ResetAfter", d.ResetAfter, p.times(want.reset), slack)
		return d
	}
	set := func(limit int, period time.Duration, burst int) {
		t.Helper()
		if err := s.SetLimit(limit, period, burst); err != nil {
			t.Fatalf("SetLimit(%d, %v, %d): %v", limit, period, burst, err)
		}
		if burst == 0 {
			burst = limit
		}
		next := newPolicy(limit, period, burst)
		// Keys charged before may run as far ahead as the limit before
		// let them.
		if lead := next.p.Convert(p.p.Lead, p.p.Den); gcra.Less(next.p.D, lead) {
			next.p.Lead = lead
		}
		p = next
	}

	check("k", 8, ok("k", 8, 2, 8))         // k owes 800h
	j := check("j", 4, ok("j", 4, 6, 4))    // j owes 400h
	set(5, 1000*time.Hour, 3)               // T 200h, D 600h
	check("k", 1, limited("k", 1, 0, 2, 4)) // k owes 800h: 400h to wait
	// A cost of 0 is allowed even while the key owes more than the burst,
	// with nothing remaining.
	check("k", 0, ok("k", 0, 0, 4))
	check("k", 4, refused("k", 4, limits.ReasonCostAboveBurst, 0, 4))
	check("j", 1, ok("j", 1, 0, 3))         // 400h + 200h: the new burst, no more
	check("j", 1, limited("j", 1, 0, 1, 3)) // no fresh burst
	check("new", 3, ok("new", 3, 0, 3))     // a new key: the new burst
	check("new", 1, limited("new", 1, 0, 1, 3))
	// The refund of j's first charge gives back its 4*100h, not 4*200h.
	if err := l.Refund(ctx, "j", j); err != nil {
		t.Fatalf("Refund across a change: %v", err)
	}
	check("j", 0, ok("j", 0, 2, 1))
	set(20, 1000*time.Hour, 0) // T 50h, D 1000h
	// k owes 800h: the looser limit adds 200h of room, 4 requests, not
	// a fresh burst of 20.
	check("k", 5, limited("k", 5, 4, 1, 16))
	check("k", 4, ok("k", 4, 0, 20))
	check("k", 1, limited("k", 1, 0, 1, 20))
	check("j", 0, ok("j", 0, 16, 4))
	for _, bad := range [][3]int{{0, 1, 1}, {1, 0, 1}, {1, 1, -1}} {
		if err := s.SetLimit(bad[0], time.Duration(bad[1])*time.Hour, bad[2]); err == nil {
			t.Errorf("SetLimit(%d, %dh, %d) accepted", bad[0], bad[1], bad[2])
		}
	}
	check("k", 0, ok("k", 0, 0, 20)) // at 20 per 1000h still
}
