// Package gcra holds the arithmetic of the generic cell rate algorithm that
// the local limiter (limits.GCRA) and the Redis one (redislimit.GCRA)
// share, so that both validate a policy, cut time and decide alike.
//
// The emission interval T = period/limit is rarely a whole number of
// nanoseconds (a minute over 7 is 8571428571.43ns), and rounding it would
// either let more through than the limit or, rounded up, fewer: 7 a minute
// would let only 6 through at each minute's start. So time is kept exactly:
// a nanosecond is cut into Den units, where Den is limit/gcd(period, limit),
// and T is a whole number of units. Den is at most 2^32; the few policies
// that would need more (over 4 billion events per period, with a period
// and a limit sharing almost no factor) round T up by less than 2^-32 ns,
// which only ever errs strict.
package gcra

import (
	"fmt"
	"math"
	"math/bits"
	"time"
)

// MaxSpan bounds every time the limiters compute with, in nanoseconds from
// their origin (about 73 years either way), so that sums of two never
// overflow.
const MaxSpan = math.MaxInt64 / 4

// MaxDen is the most units a nanosecond is cut into.
const MaxDen = 1 << 32

// Time is an instant or a duration: NS nanoseconds and Frac units more,
// where a nanosecond is the Policy's Den units and 0 <= Frac < Den.
type Time struct {
	NS   int64
	Frac uint64
}

// Policy is a validated limit: Limit events per Period, in bursts of at
// most Burst.
type Policy struct {
	Limit  int
	Period time.Duration
	Burst  int
	// Den is the number of units in a nanosecond.
	Den uint64
	// TU is the emission interval in units: T = TU/Den nanoseconds.
	TU uint64
	// T is the emission interval, D = Burst*T how far a key's TAT may run
	// ahead of now.
	T, D Time
	// Lead is how far a key's TAT may run ahead of the time it was written:
	// D, or more while keys charged under an earlier policy whose D was
	// larger may remain (see Judge).
	Lead Time
	// Exact reports whether T is exactly Period/Limit.
	Exact bool
}

// New returns the policy of limit events per period in bursts of at most
// burst, or an error saying which value is wrong, without a package prefix.
func New(limit int, period time.Duration, burst int) (Policy, error) {
	return Within(limit, period, burst, MaxDen)
}

// Within is New with a nanosecond cut into at most maxDen units, a power of
// two from 1 to MaxDen: a policy that would need more rounds T up to the
// nearest unit, which only ever errs strict.
func Within(limit int, period time.Duration, burst int, maxDen uint64) (Policy, error) {
	switch {
	case limit < 1:
		return Policy{}, fmt.Errorf("limit must be >= 1, got %d", limit)
	case period <= 0:
		return Policy{}, fmt.Errorf("period must be > 0, got %v", period)
	case burst < 1:
		return Policy{}, fmt.Errorf("burst must be >= 1, got %d", burst)
	}
	p := Policy{Limit: limit, Period: period, Burst: burst, Exact: true}
	g := gcd(uint64(period), uint64(limit))
	p.Den, p.TU = uint64(limit)/g, uint64(period)/g
	if p.Den > maxDen {
		// period*maxDen / limit, rounded up: limit > maxDen, so the
		// quotient fits.
		shift := uint(bits.TrailingZeros64(maxDen))
		q, r := bits.Div64(uint64(period)>>(64-shift), uint64(period)<<shift, uint64(limit))
		if shift == 0 {
			q, r = uint64(period)/uint64(limit), uint64(period)%uint64(limit)
		}
		if r != 0 {
			q++
		}
		p.Den, p.TU, p.Exact = maxDen, q, false
	}
	p.T = Time{NS: int64(p.TU / p.Den), Frac: p.TU % p.Den}
	hi, lo := bits.Mul64(uint64(burst), p.TU)
	if hi >= p.Den {
		return Policy{}, p.tooLong()
	}
	q, r := bits.Div64(hi, lo, p.Den)
	if q > MaxSpan {
		return Policy{}, p.tooLong()
	}
	p.D = Time{NS: int64(q), Frac: r}
	p.Lead = p.D
	return p, nil
}

// Convert returns t, a time in units of a nanosecond cut into from, in
// units of p's, rounded up.
func (p *Policy) Convert(t Time, from uint64) Time {
	return p.convert(t, from, true)
}

// ConvertDown is Convert rounded down: for a charge to give back, which
// must never give back more than was taken.
func (p *Policy) ConvertDown(t Time, from uint64) Time {
	return p.convert(t, from, false)
}

func (p *Policy) convert(t Time, from uint64, up bool) Time {
	if from == p.Den || t.Frac == 0 {
		return t
	}
	hi, lo := bits.Mul64(t.Frac, p.Den)
	q, r := bits.Div64(hi, lo, from) // hi < from, as Frac < from
	if r != 0 && up {
		q++
	}
	if q >= p.Den {
		return Time{NS: t.NS + 1}
	}
	return Time{NS: t.NS, Frac: q}
}

func (p *Policy) tooLong() error {
	return fmt.Errorf("a burst of %d at %d per %v takes too long to recover", p.Burst, p.Limit, p.Period)
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Cost returns n*T, for 0 <= n <= Burst.
func (p *Policy) Cost(n int) Time {
	if n == 1 {
		return p.T
	}
	hi, lo := bits.Mul64(uint64(n), p.TU)
	q, r := bits.Div64(hi, lo, p.Den) // hi < Den, as n*T <= D fits
	return Time{NS: int64(q), Frac: r}
}

// Add returns a+b.
func (p *Policy) Add(a, b Time) Time {
	t := Time{NS: a.NS + b.NS, Frac: a.Frac + b.Frac}
	if t.Frac >= p.Den {
		t.NS++
		t.Frac -= p.Den
	}
	return t
}

// Sub returns a-b, which may be negative (NS < 0, Frac still in [0, Den)).
func (p *Policy) Sub(a, b Time) Time {
	t := Time{NS: a.NS - b.NS}
	if a.Frac >= b.Frac {
		t.Frac = a.Frac - b.Frac
	} else {
		t.NS--
		t.Frac = a.Frac + p.Den - b.Frac
	}
	return t
}

// Less reports whether a < b.
func Less(a, b Time) bool {
	return a.NS < b.NS || a.NS == b.NS && a.Frac < b.Frac
}

// Ceil returns t in whole nanoseconds, rounded up.
func Ceil(t Time) int64 {
	if t.Frac > 0 {
		return t.NS + 1
	}
	return t.NS
}

// Positive reports whether t > 0.
func Positive(t Time) bool { return t.NS > 0 || t.NS == 0 && t.Frac > 0 }

// Result is a decision on one request.
type Result struct {
	Allowed bool
	// Ahead is how far the key's TAT runs ahead of the time of the
	// decision, after it: 0 for a key with nothing owed.
	Ahead      Time
	Remaining  int
	RetryAfter time.Duration // for a refusal: until the same request is allowed
	ResetAfter time.Duration // until the key is back to its full burst
}

// Decide judges a request of cost n, 0 <= n <= Burst, for a key whose TAT
// runs ahead of now by ahead (0 or less for a key that owes nothing). A
// lead above D is taken as D: a key's state can run no further ahead of
// the time it was written, so the decision is then made at the earliest
// time consistent with the state. With charge set, an allowed request's
// cost is added to the returned Ahead.
func (p *Policy) Decide(ahead Time, n int, charge bool) Result {
	allowed, after := p.Judge(ahead, n, charge)
	return p.Report(allowed, after, n)
}

// Judge is the decision of Decide without its report: whether the request
// is allowed, and the key's lead after it. A lead above Lead is taken as
// Lead; one between D and Lead (a key charged under an earlier policy of a
// larger burst) is kept, and refused a positive cost until it falls to D
// less the cost. A cost of 0 is always allowed.
func (p *Policy) Judge(ahead Time, n int, charge bool) (allowed bool, after Time) {
	if !Positive(ahead) {
		ahead = Time{}
	} else if Less(p.Lead, ahead) {
		ahead = p.Lead
	}
	next := p.Add(ahead, p.Cost(n))
	switch {
	case n > 0 && Less(p.D, next):
		return false, ahead
	case charge:
		return true, next
	}
	return true, ahead
}

// Report builds the Result of a decision made elsewhere (by the Redis
// script): allowed or refused for cost n, with the key's TAT ahead of now
// by ahead, 0 <= ahead <= Lead, after the decision.
func (p *Policy) Report(allowed bool, ahead Time, n int) Result {
	r := Result{Allowed: allowed, Ahead: ahead, ResetAfter: time.Duration(Ceil(ahead)), Remaining: p.remaining(ahead)}
	if !allowed {
		r.RetryAfter = time.Duration(Ceil(p.Sub(p.Add(ahead, p.Cost(n)), p.D)))
	}
	return r
}

// remaining returns floor((D - ahead) / T): the unit requests a key whose
// TAT runs ahead by ahead could make now.
func (p *Policy) remaining(ahead Time) int {
	x := p.Sub(p.D, ahead)
	if x.NS < 0 {
		return 0
	}
	if p.Den == 1 {
		return int(uint64(x.NS) / p.TU)
	}
	hi, lo := bits.Mul64(uint64(x.NS), p.Den)
	lo, c := bits.Add64(lo, x.Frac, 0)
	q, _ := bits.Div64(hi+c, lo, p.TU) // the quotient is at most Burst
	return int(q)
}

// Refund returns a key's TAT after giving back a charge of n, given its
// TAT now, cur, and just after the charge, charged; now is the time of the
// refund. With rounded set, charged is only known to the nanosecond above
// (At + ResetAfter of a Decision), the exact value lying in (charged-1ns,
// charged].
//
// It takes off the part of the charge that still lies ahead of now, at
// most n*T and none once charged has passed, and never takes the TAT below
// now. So refunds are exact in any order: charges refunded once each,
// after which no request kept was allowed, leave the key as it would be
// had they never been made, whatever the order of the refunds (first in,
// first out as well as last in, first out). A request kept that was
// allowed before the refunds began is left charged, owing no less than
// had the refunded ones never been made. One allowed between two refunds
// may be credited up to what the refunds before it gave back, no more. A
// charge must be refunded once: a second refund gives back another part.
// When rounded, the result errs by less than a nanosecond, and only
// towards owing more.
func (p *Policy) Refund(cur, charged, now Time, n int, rounded bool) Time {
	return p.RefundCost(cur, charged, now, p.Cost(n), rounded)
}

// RefundCost is Refund for a charge whose cost, in p's units, is cost: a
// charge made under an earlier policy.
func (p *Policy) RefundCost(cur, charged, now, cost Time, rounded bool) Time {
	low := charged
	if rounded && p.Den > 1 {
		low.NS--
	}
	left := p.Sub(low, now)
	if !Positive(left) {
		return cur
	}
	if Less(cost, left) {
		left = cost
	}
	next := p.Sub(cur, left)
	if Less(next, now) {
		next = now
	}
	if Less(cur, next) {
		return cur
	}
	return next
}
