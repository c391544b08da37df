package redislimit

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/limitsgo/limits/internal/gcra"
	"github.com/limitsgo/limits/redislimit/redistest"
)

// TestDecideScript runs the decision script on random states, costs and
// looks, for limits whose T is a whole number of nanoseconds and limits
// whose T is not, with times beyond what a double holds, and checks every
// reply and every stored value and expiry against gcra.Policy.Judge at the
// time the server read from its clock (the reply's), as the local GCRA
// would decide: states that have passed, that owe part of the burst, that
// run to within a unit of D or past it (repaired), stored fractions of
// another limit (rounded up), values of fewer than ten digits, and charges
// that end on a whole second. Each limit runs again with a lead L above D,
// as after a change to a smaller burst (GCRA.SetLimit), judged by a Policy
// whose Lead is L: states within a unit of L and between D and L (kept,
// refused), and past L (repaired to L).
func TestDecideScript(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(21, 2))
	for _, pol := range []struct {
		limit  int
		period time.Duration
		burst  int
	}{
		{100_000, time.Second, 1000},                        // T = 10µs
		{7, time.Hour, 7},                                   // T = 514285714285+5/7 ns
		{3, time.Second, 3},                                 // T = 333333333+1/3 ns
		{1_000_000_000, 3500 * time.Millisecond, 1_000_000}, // T = 3.5ns
		{999_983, 1000 * time.Hour, 1000},                   // a den near a million
		{3, 50 * 365 * 24 * time.Hour, 2},                   // D beyond 2^53 ns
	} {
		for _, withLead := range []bool{false, true} {
			g := must(New(c, pol.limit, pol.period, WithBurst(pol.burst), WithPrefix(freshPrefix())))
			st := g.lim.Load()
			if withLead {
				// A lead of 1 to 3 D and a few units.
				lead := st.p.Add(st.p.D, gcra.Time{NS: rng.Int64N(2*st.p.D.NS + 1), Frac: rng.Uint64N(st.p.Den)})
				st = newLimitState(st.p, lead, math.MaxInt64)
			}
			p, _ := st.at(0)
			key := g.Key("k")
			written, refused := 0, 0
			// Edges: TATs at the server's time of the decision plus D and a
			// unit, plus D, plus a unit and plus nothing. That time is guessed
			// from the previous reply, in whole microseconds as TIME has it,
			// and tried until each edge has been met.
			var hits [4]int
			var delay int64
			for i := 0; i < 200 || slices.Contains(hits[:], 0) && i < 5000; i++ {
				clock, err := c.Time(ctx).Result()
				if err != nil {
					t.Fatal(err)
				}
				now := gcra.Time{NS: clock.UnixNano()}
				guess := gcra.Time{NS: now.NS + delay}
				// A state about now: the TAT, as the script should read it,
				// and its stored form.
				var tat gcra.Time
				var value string
				off := gcra.Time{NS: rng.Int64N(max(p.D.NS, 1)), Frac: rng.Uint64N(p.Den)}
				n := rng.IntN(pol.burst + 1)
				charge := rng.IntN(4) != 0
				k := rng.IntN(13)
				if i >= 200 {
					k = 8 + rng.IntN(4)
				}
				unit := gcra.Time{Frac: 1}
				if p.Den == 1 {
					unit = gcra.Time{NS: 1}
				}
				switch k {
				case 8:
					tat = p.Add(p.Add(guess, p.Lead), unit)
				case 9:
					tat = p.Add(guess, p.Lead)
				case 10:
					tat = p.Add(guess, unit)
				case 11:
					tat = guess
				case 12: // a charge takes it to a whole second
					w := (now.NS/1e9 + 1 + rng.Int64N(max(p.D.NS/1e9, 1))) * 1e9
					tat = p.Sub(gcra.Time{NS: w}, p.Cost(n))
				case 0: // no key
				case 1, 2: // owing part of the burst
					tat = p.Add(now, off)
				case 3: // within a unit of D, either side, from now
					tat = p.Add(now, p.D)
					if rng.IntN(2) == 0 {
						tat = p.Sub(tat, gcra.Time{Frac: 1})
					} else {
						tat = p.Add(tat, gcra.Time{Frac: 1})
					}
				case 4: // far past L: repaired
					tat = p.Add(p.Add(now, p.Lead), off)
					if withLead && rng.IntN(2) == 0 { // between D and L
						tat = p.Add(now, p.Sub(p.Lead, gcra.Time{NS: rng.Int64N(p.Sub(p.Lead, p.D).NS + 1)}))
					}
				case 5: // passed
					tat = p.Sub(now, off)
				case 6: // a fraction of another limit, rounded up
					tat = p.Add(now, gcra.Time{NS: off.NS})
					value = fmt.Sprintf("%d:%d", tat.NS, p.Den+rng.Uint64N(10))
					tat.NS++
				case 7: // few digits: long past
					tat = gcra.Time{NS: rng.Int64N(1e9)}
				}
				if value == "" && (tat != gcra.Time{}) {
					value = formatTAT(tat)
				}
				if value == "" {
					c.Del(ctx, key)
				} else if err := c.Set(ctx, key, value, 0).Err(); err != nil {
					t.Fatal(err)
				}
				r, err := eval(ctx, c, decideScript, []string{key}, st.args(n, charge, withLead))
				if err != nil {
					t.Fatal(err)
				}
				at := gcra.Time{NS: r.now.UnixNano()}
				delay = at.NS - now.NS
				if k >= 8 && k < 12 && at == guess {
					hits[k-8]++
				}
				var ahead gcra.Time
				if value != "" {
					ahead = p.Sub(tat, at)
				}
				allowed, after := p.Judge(ahead, n, charge)
				what := fmt.Sprintf("%d/%v burst %d, lead %+v, stored %q, cost %d, charge %v, at %d", pol.limit, pol.period, pol.burst, p.Lead, value, n, charge, at.NS)
				if (r.flag == 1) != allowed || r.ahead != after {
					t.Fatalf("%s: reply %d, ahead %+v; want allowed %v, ahead %+v", what, r.flag, r.ahead, allowed, after)
				}
				switch {
				case allowed && charge && n > 0, gcra.Positive(ahead) && gcra.Less(p.Lead, ahead):
					checkStored(t, c, key, p.Add(at, after))
					written++
				case value == "":
					if n := c.Exists(ctx, key).Val(); n != 0 {
						t.Errorf("%s: the key was stored", what)
					}
				default:
					if got := c.Get(ctx, key).Val(); got != value {
						t.Errorf("%s: the key holds %q", what, got)
					}
					if ttl := c.TTL(ctx, key).Val(); ttl != -1 {
						t.Errorf("%s: the key expires in %v", what, ttl)
					}
				}
				if !allowed {
					refused++
				}
				if t.Failed() {
					t.FailNow()
				}
			}
			if slices.Contains(hits[:], 0) {
				t.Errorf("%d/%v: the edges were met %v times: the server's time was not guessed", pol.limit, pol.period, hits)
			}
			if written == 0 || refused == 0 {
				t.Errorf("%d/%v: %d written, %d refused: both should occur", pol.limit, pol.period, written, refused)
			}
		}
	}
}
