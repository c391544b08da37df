package gcra

import (
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestNewErrors(t *testing.T) {
	for _, tt := range []struct {
		limit  int
		period time.Duration
		burst  int
		want   string
	}{
		{0, time.Second, 1, "limit must be >= 1, got 0"},
		{1, 0, 1, "period must be > 0, got 0s"},
		{1, time.Second, 0, "burst must be >= 1, got 0"},
		{1, time.Hour, 1 << 20, "a burst of 1048576 at 1 per 1h0m0s takes too long to recover"},
		{1, math.MaxInt64, 1, "a burst of 1 at 1 per 2562047h47m16.854775807s takes too long to recover"},
	} {
		if _, err := New(tt.limit, tt.period, tt.burst); err == nil || err.Error() != tt.want {
			t.Errorf("New(%d, %v, %d) = %v, want %q", tt.limit, tt.period, tt.burst, err, tt.want)
		}
	}
}

// rat returns t as a fraction of a nanosecond.
func (p *Policy) rat(t Time) *big.Rat {
	r := new(big.Rat).SetFrac(new(big.Int).SetUint64(t.Frac), new(big.Int).SetUint64(p.Den))
	return r.Add(r, new(big.Rat).SetInt64(t.NS))
}

// ceilRat returns r rounded up to an integer.
func ceilRat(r *big.Rat) int64 {
	q, m := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

func floorRat(r *big.Rat) int64 {
	return new(big.Int).Div(r.Num(), r.Denom()).Int64()
}

func randomPolicy(rng *rand.Rand) Policy {
	for {
		var limit int
		var period time.Duration
		switch rng.IntN(4) {
		case 0: // small and common
			limit, period = 1+rng.IntN(100), time.Duration(1+rng.IntN(3600))*time.Second
		case 1: // awkward primes
			limit, period = []int{3, 7, 13, 997, 65521, 999983}[rng.IntN(6)], time.Duration(1+rng.Int64N(int64(time.Hour)))
		case 2: // huge limits, with T under a nanosecond
			limit, period = 1+rng.IntN(1<<40), time.Duration(1+rng.Int64N(int64(time.Minute)))
		default:
			limit, period = 1+rng.IntN(1<<62), time.Duration(1+rng.Int64N(math.MaxInt64/8))
		}
		p, err := New(limit, period, 1+rng.IntN(min(limit, 1000)))
		if err == nil {
			return p
		}
	}
}

// TestPolicyExact checks that T is period/limit exactly whenever Den
// allows, and otherwise rounded up by less than one unit.
func TestPolicyExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	exact := 0
	for range 20000 {
		p := randomPolicy(rng)
		want := big.NewRat(int64(p.Period), int64(p.Limit))
		got := p.rat(p.T)
		if got.Cmp(new(big.Rat).SetFrac(new(big.Int).SetUint64(p.TU), new(big.Int).SetUint64(p.Den))) != 0 {
			t.Fatalf("%+v: T and TU disagree", p)
		}
		switch c := got.Cmp(want); {
		case p.Exact && c != 0:
			t.Fatalf("%d/%v: T = %v, want %v", p.Limit, p.Period, got, want)
		case !p.Exact && (c < 0 || new(big.Rat).Sub(got, want).Cmp(big.NewRat(1, int64(p.Den))) >= 0):
			t.Fatalf("%d/%v (inexact): T = %v, want %v rounded up by less than a unit", p.Limit, p.Period, got, want)
		case p.Exact:
			exact++
		}
		if p.Limit <= MaxDen && !p.Exact {
			t.Fatalf("%d/%v: a limit of at most 2^32 must be exact", p.Limit, p.Period)
		}
		d := new(big.Rat).Mul(got, big.NewRat(int64(p.Burst), 1))
		if p.rat(p.D).Cmp(d) != 0 {
			t.Fatalf("%+v: D = %v, want %v", p, p.rat(p.D), d)
		}
	}
	if exact < 10000 {
		t.Errorf("only %d of 20000 random policies exact", exact)
	}
}

// TestDecideAgainstRationals checks every field of random decisions
// against the same rule computed with exact rationals.
func TestDecideAgainstRationals(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	for i := range 50000 {
		p := randomPolicy(rng)
		// A lead within [0, D], on T's grid or off it, and sometimes
		// beyond D or below 0.
		var ahead Time
		switch rng.IntN(5) {
		case 0:
		case 1:
			ahead = p.Cost(rng.IntN(p.Burst + 1))
		case 2:
			ahead = p.Add(p.D, Time{NS: rng.Int64N(1000)})
		case 3:
			ahead = Time{NS: -rng.Int64N(1 << 40), Frac: rng.Uint64N(p.Den)}
		default:
			ahead = Time{NS: rng.Int64N(p.D.NS + 1), Frac: rng.Uint64N(p.Den)}
		}
		n := rng.IntN(p.Burst + 1)
		charge := rng.IntN(4) > 0
		got := p.Decide(ahead, n, charge)

		tr, dr := p.rat(p.T), p.rat(p.D)
		a := p.rat(ahead)
		if a.Sign() < 0 {
			a.SetInt64(0)
		}
		if a.Cmp(dr) > 0 {
			a.Set(dr)
		}
		next := new(big.Rat).Add(a, new(big.Rat).Mul(tr, big.NewRat(int64(n), 1)))
		allowed := next.Cmp(dr) <= 0
		after := a
		if allowed && charge {
			after = next
		}
		want := Result{
			Allowed:    allowed,
			ResetAfter: time.Duration(ceilRat(after)),
			Remaining:  int(floorRat(new(big.Rat).Quo(new(big.Rat).Sub(dr, after), tr))),
		}
		if !allowed {
			want.RetryAfter = time.Duration(ceilRat(new(big.Rat).Sub(next, dr)))
		}
		got.Ahead = Time{}
		if got != want {
			t.Fatalf("case %d: %d/%v burst %d, ahead %v, n %d, charge %v: %+v, want %+v", i, p.Limit, p.Period, p.Burst, ahead, n, charge, got, want)
		}
	}
}

// TestRefundAgainstReplay checks, on random histories of one key, that
// giving a charge back leaves the key owing no less than if the charge had
// never been made (replayed without it), and exactly as much when nothing
// else happened in between.
func TestRefundAgainstReplay(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for i := range 20000 {
		p := randomPolicy(rng)
		if p.D.NS > 1<<50 {
			continue
		}
		// The key's TAT as an absolute time, with and without the charge.
		step := func(tat Time, now int64, n int) (Time, bool) {
			r := p.Decide(p.Sub(tat, Time{NS: now}), n, true)
			if !r.Allowed {
				return tat, false
			}
			return p.Add(Time{NS: now}, r.Ahead), true
		}
		now := int64(1 << 52)
		tat := Time{NS: now + rng.Int64N(p.D.NS+1) - p.D.NS/2}
		replay := tat
		n := 1 + rng.IntN(p.Burst)
		charged, ok := step(tat, now, n)
		if !ok {
			continue
		}
		tat = charged
		quiet := rng.IntN(2) == 0
		if !quiet {
			for range rng.IntN(5) {
				now += rng.Int64N(p.T.NS + 2)
				m := 1 + rng.IntN(p.Burst)
				if _, ok := step(tat, now, m); ok {
					// Served with the charge in place: the replay must
					// serve it too, or the refund cannot be checked.
					var rok bool
					replay, rok = step(replay, now, m)
					if !rok {
						t.Fatalf("case %d: the replay without the charge refused what was served", i)
					}
					tat, _ = step(tat, now, m)
				}
			}
		}
		now += rng.Int64N(p.T.NS + 2)
		rounded := rng.IntN(2) == 0
		mark := charged
		if rounded {
			mark = Time{NS: Ceil(charged)}
		}
		after := p.Refund(tat, mark, Time{NS: now}, n, rounded)
		// Owing: how far the TAT runs ahead of now, 0 if behind.
		owing := func(x Time) Time {
			d := p.Sub(x, Time{NS: now})
			if !Positive(d) {
				return Time{}
			}
			return d
		}
		if Less(owing(after), owing(replay)) {
			t.Fatalf("case %d: after the refund the key owes %v, less than %v without the charge", i, owing(after), owing(replay))
		}
		if quiet && !rounded && owing(after) != owing(replay) {
			t.Fatalf("case %d: a refund with nothing in between left %v owed, want %v", i, owing(after), owing(replay))
		}
		if quiet && rounded && p.Den == 1 && owing(after) != owing(replay) {
			t.Fatalf("case %d: a refund on whole nanoseconds left %v owed, want %v", i, owing(after), owing(replay))
		}
	}
}

func TestTimeArithmetic(t *testing.T) {
	p, _ := New(7, time.Minute, 7)
	a, b := Time{NS: 5, Frac: 6}, Time{NS: 2, Frac: 3}
	if got := p.Add(a, b); got != (Time{NS: 8, Frac: 2}) {
		t.Errorf("Add = %v", got)
	}
	if got := p.Sub(b, a); got != (Time{NS: -4, Frac: 4}) {
		t.Errorf("Sub = %v", got)
	}
	if Ceil(Time{NS: 3}) != 3 || Ceil(Time{NS: 3, Frac: 1}) != 4 || Ceil(Time{NS: -1, Frac: 1}) != 0 {
		t.Error("Ceil")
	}
	if !strings.Contains(p.tooLong().Error(), "7 per 1m0s") {
		t.Error(p.tooLong())
	}
}

// TestRefundsInAnyOrder checks, on random histories of one key, charges
// refunded in a random order: refunding every charge made since some point
// leaves the key as it was before them, in any order and at any later
// times; refunding some of them leaves it owing no less than a replay
// without them; and a request allowed between two refunds is credited by
// the later ones no more than the earlier ones gave back.
func TestRefundsInAnyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for i := range 50000 {
		p := randomPolicy(rng)
		if p.D.NS > 1<<50 {
			continue
		}
		step := func(tat Time, now int64, n int) (Time, bool) {
			r := p.Decide(p.Sub(tat, Time{NS: now}), n, true)
			if !r.Allowed {
				return tat, false
			}
			return p.Add(Time{NS: now}, r.Ahead), true
		}
		now := int64(1 << 52)
		tat0 := Time{NS: now + rng.Int64N(p.D.NS+1) - p.D.NS/2}
		tat := tat0
		type charge struct {
			at   int64
			n    int
			mark Time
			kept bool
		}
		var charges []charge
		for range 1 + rng.IntN(5) {
			now += rng.Int64N(p.T.NS + 2)
			n := 1 + rng.IntN(p.Burst)
			if next, ok := step(tat, now, n); ok {
				tat = next
				charges = append(charges, charge{at: now, n: n, mark: next})
			}
		}
		if len(charges) == 0 {
			continue
		}
		mode := rng.IntN(3) // 0: all refunded; 1: some; 2: some, with requests in between
		order := rng.Perm(len(charges))
		k := len(order)
		if mode > 0 {
			k = rng.IntN(len(order) + 1)
		}
		for _, j := range order[k:] {
			charges[j].kept = true
		}
		rounded := rng.IntN(2) == 0
		var credited, before Time
		for _, j := range order[:k] {
			now += rng.Int64N(p.T.NS + 2)
			if mode == 2 && rng.IntN(2) == 0 {
				n := 1 + rng.IntN(p.Burst)
				if next, ok := step(tat, now, n); ok {
					tat = next
					charges = append(charges, charge{at: now, n: n, mark: next, kept: true})
					before = credited
				}
			}
			mark := charges[j].mark
			if rounded {
				mark = Time{NS: Ceil(mark)}
			}
			next := p.Refund(tat, mark, Time{NS: now}, charges[j].n, rounded)
			if Less(tat, next) {
				t.Fatalf("case %d: a refund raised the TAT from %v to %v", i, tat, next)
			}
			if Less(Time{NS: now}, tat) {
				credited = p.Add(credited, p.Sub(tat, next))
			}
			tat = next
		}
		// The replay: the kept charges only, at their times.
		replay := tat0
		for _, c := range charges {
			if c.kept {
				r := p.Decide(p.Sub(replay, Time{NS: c.at}), c.n, true)
				replay = p.Add(Time{NS: c.at}, r.Ahead)
			}
		}
		owing := func(x Time) Time {
			d := p.Sub(x, Time{NS: now})
			if !Positive(d) {
				return Time{}
			}
			return d
		}
		got, want := owing(tat), owing(replay)
		switch {
		case mode == 0 && !rounded && got != want:
			t.Fatalf("case %d: every charge refunded, in order %v: %v owed, want %v", i, order, got, want)
		case mode == 0 && rounded && (Less(got, want) || Less(p.Add(want, Time{NS: int64(len(charges))}), got)):
			t.Fatalf("case %d: every charge refunded, rounded, in order %v: %v owed, want %v", i, order, got, want)
		case mode == 1 && Less(got, want):
			t.Fatalf("case %d: some charges refunded, in order %v: %v owed, less than %v", i, order, got, want)
		case mode == 2 && Less(p.Add(got, before), want):
			t.Fatalf("case %d: %v owed, %v given back before a request kept, want at least %v", i, got, before, want)
		}
	}
}
