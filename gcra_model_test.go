package limits

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitsgo/limits/internal/gcra"
)

// mapGCRA is the reference model of GCRA's table: the algorithm over a Go
// map under one mutex, as the table was before it was made flat, deciding
// with the same arithmetic and the same clock. It drops a key as soon as
// it expires by that clock, so that it admits a new key exactly when fewer
// than maxKeys keys are in use.
type mapGCRA struct {
	mu      sync.Mutex
	p       gcra.Policy // the policy decisions apply, with the lead of pol.at
	pol     gcraPolicy
	maxKeys int
	tat     map[string]gcra.Time
	live    bool  // a request was decided by the real clock
	dated   int64 // the latest date given, as far as the real clock
	// shard returns the shard of a key, and gens the generation of the
	// policy each shard's keys are in the units of: the model converts
	// TATs as the table does, shard by shard when one is reached, so that
	// its roundings are the table's (see SetLimit). Without shard, all
	// keys are in one shard.
	shard    func(string) int
	gens     map[int]uint32
	fracBits uint
}

func newMapGCRA(limit int, period time.Duration, burst, maxKeys int) *mapGCRA {
	p, err := gcra.New(limit, period, burst)
	if err != nil {
		panic(err)
	}
	m := &mapGCRA{p: p, maxKeys: maxKeys, tat: map[string]gcra.Time{}, dated: math.MinInt64,
		pol: gcraPolicy{p: p, lead: p, dens: []uint64{p.Den}}, gens: map[int]uint32{}, fracBits: 32}
	m.shard = func(string) int { return 0 }
	return m
}

// follow makes m convert TATs as g does: by g's shards, in g's units.
func (m *mapGCRA) follow(g *GCRA) {
	m.shard = func(k string) int { return int(g.shardOf(maphash.String(g.seed, k)).id) }
	m.fracBits = g.fracBits
}

// sync brings the TATs of key's shard to the units of the policy, as the
// table's sync does, and sets m.p to the policy to judge by at clock.
func (m *mapGCRA) sync(key string, clock int64) {
	id := m.shard(key)
	if gen := m.gens[id]; gen != m.pol.gen {
		from := m.pol.dens[gen]
		for k, tat := range m.tat {
			if m.shard(k) == id {
				m.tat[k] = m.pol.p.Convert(tat, from)
			}
		}
		m.gens[id] = m.pol.gen
	}
	m.p = *m.pol.at(clock)
}

// setLimit changes the model's limit as GCRA.SetLimit does.
func (m *mapGCRA) setLimit(real int64, limit int, period time.Duration, burst int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := gcra.Within(limit, period, burst, 1<<m.fracBits)
	if err != nil {
		panic(err)
	}
	clock := m.clock(real)
	next := gcraPolicy{p: p, lead: p, gen: m.pol.gen + 1, dens: append(m.pol.dens, p.Den)}
	if lead := p.Convert(m.pol.at(clock).Lead, m.pol.p.Den); gcra.Less(p.D, lead) {
		next.lead.Lead = lead
		next.until = clock + gcra.Ceil(lead)
	}
	m.pol = next
}

// clock returns the model's clock, the time no decision is made before,
// given the real clock: the real clock once a request was decided by it,
// the latest date given until then.
func (m *mapGCRA) clock(real int64) int64 {
	if m.live {
		return real
	}
	return m.dated
}

// live counts the keys that owe something at clock, dropping the others.
func (m *mapGCRA) inUse(clock int64) int {
	n := 0
	for k, tat := range m.tat {
		if gcra.Positive(m.p.Sub(tat, gcra.Time{NS: clock})) {
			n++
		} else {
			delete(m.tat, k)
		}
	}
	return n
}

// modelDecision is what the model decides: the fields of a Decision.
type modelDecision struct {
	allowed   bool
	reason    Reason
	remaining int
	retry     time.Duration
	reset     time.Duration
	at        int64
	mark      gcra.Time
}

// allowN decides a request of cost n for key, by the real clock real, or
// at the date at if dated. With charge false it is a Peek (n 1) or a cost
// of 0.
func (m *mapGCRA) allowN(real int64, dated bool, at int64, key string, n int, charge bool) modelDecision {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !dated {
		m.live = true
	} else if !m.live {
		m.dated = max(m.dated, min(at, real))
	}
	clock := m.clock(real)
	m.sync(key, clock)
	now := real
	if dated {
		now = max(at, clock)
	}
	reason, cost := reasonAllowed, n
	switch {
	case n < 0:
		reason, cost, charge = ReasonInvalidCost, 0, false
	case n > m.p.Burst:
		reason, cost, charge = ReasonCostAboveBurst, 0, false
	case n == 0:
		charge = false
	}
	tat, found := m.tat[key]
	if found && !gcra.Positive(m.p.Sub(tat, gcra.Time{NS: clock})) {
		delete(m.tat, key)
		found = false
	}
	var ahead gcra.Time
	if found {
		ahead = m.p.Sub(tat, gcra.Time{NS: now})
		if gcra.Less(m.p.Lead, ahead) {
			late := gcra.Ceil(m.p.Sub(ahead, m.p.Lead))
			now += late
			ahead = m.p.Sub(ahead, gcra.Time{NS: late})
		}
	}
	r := m.p.Decide(ahead, cost, charge)
	d := modelDecision{allowed: r.Allowed && reason == reasonAllowed, reason: reason, remaining: r.Remaining, reset: r.ResetAfter, at: now}
	if r.Allowed && !found && cost > 0 && len(m.tat) >= m.maxKeys && m.inUse(clock) >= m.maxKeys {
		return modelDecision{reason: ReasonTableFull, at: now}
	}
	if r.Allowed && charge {
		d.mark = m.p.Add(gcra.Time{NS: now}, r.Ahead)
		m.tat[key] = d.mark
	}
	if !r.Allowed && reason == reasonAllowed {
		d.reason, d.retry = ReasonRateLimited, r.RetryAfter
	}
	return d
}

// same reports whether the model's decision is got's.
func (d modelDecision) same(g *GCRA, got Decision) bool {
	return got.Allowed == d.allowed && got.Reason == d.reason && got.Remaining == d.remaining &&
		got.RetryAfter == d.retry && got.ResetAfter == d.reset && got.At.Equal(g.start.Add(time.Duration(d.at))) &&
		(!got.Allowed || got.Cost == 0 || got.mark == d.mark)
}

func (m *mapGCRA) refund(real int64, key string, d Decision, charged gcra.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	clock := m.clock(real)
	m.sync(key, clock)
	if tat, ok := m.tat[key]; ok && d.Allowed && d.Cost > 0 && d.Cost <= d.Burst {
		cost := m.p.Cost(d.Cost)
		if d.Limit != m.p.Limit || d.Period != m.p.Period || d.Burst != m.p.Burst {
			op, _ := gcra.Within(d.Limit, d.Period, d.Burst, 1<<m.fracBits)
			charged, cost = m.p.ConvertDown(charged, op.Den), m.p.ConvertDown(op.Cost(d.Cost), op.Den)
		}
		m.tat[key] = m.p.RefundCost(tat, charged, gcra.Time{NS: clock}, cost, false)
	}
}

func (m *mapGCRA) reset(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.tat, key)
}

// modelRun is one random sequence of calls on a GCRA and its model.
type modelRun struct {
	limit, burst, maxKeys, nkeys int
	period                       time.Duration
	// dates: 0 for current calls only, 1 for dated calls only (a log
	// replayed from three hours back, in order but for some dates out of
	// order, far in the past or future), 2 for both mixed.
	dates int
	steps int
	// sleepEvery: time moves on once every sleepEvery calls, on average.
	sleepEvery int
	noWaits    bool
	fill       int  // the first fill calls charge distinct keys
	setLimits  bool // SetLimit changes the limit now and then
}

func randomModelRun(rng *rand.Rand) modelRun {
	r := modelRun{limit: 1 + rng.IntN(20), burst: 1 + rng.IntN(6), dates: rng.IntN(3), steps: 3000, sleepEvery: 4, setLimits: rng.IntN(2) == 0}
	r.period = time.Duration(1+rng.IntN(20)) * time.Duration([]int64{1, 7, 1000, 3_000_000}[rng.IntN(4)])
	r.maxKeys = []int{1, 3, 10, 64, 100, 500, 2000, 100_000}[rng.IntN(8)]
	r.nkeys = 1 + rng.IntN(2*min(r.maxKeys, 300))
	if r.maxKeys == 2000 {
		// Several shards, kept full: time moves slowly enough for
		// thousands of keys to be in use, and reclaim runs.
		r.nkeys, r.steps, r.sleepEvery, r.burst = 3000, 12000, 1000, 4+rng.IntN(3)
		r.fill = 2500
		r.noWaits = true
	}
	return r
}

// run sends r's calls to g and the model and compares every decision.
func (r modelRun) run(t *testing.T, rng *rand.Rand) {
	g := NewGCRA(r.limit, r.period, WithBurst(r.burst), WithMaxKeys(r.maxKeys))
	m := newMapGCRA(r.limit, r.period, r.burst, r.maxKeys)
	m.follow(g)
	ctx := context.Background()
	T := int64(r.period) / int64(r.limit)
	outstanding := map[string][]Decision{}
	date := g.now() - int64(3*time.Hour) // the replay's clock
	var reasons [8]int
	waits, refunds, most, setLimits := 0, 0, 0, 0
	defer func() {
		t.Logf("decisions by reason %v, %d waits, %d refunds, %d new limits, at most %d keys held", reasons, waits, refunds, setLimits, most)
	}()
	for i := range r.steps {
		if rng.IntN(r.sleepEvery) == 0 {
			d := time.Duration(rng.Int64N(2*T + 1))
			time.Sleep(d)
			date += int64(d)
		}
		k := fmt.Sprint("k", rng.IntN(r.nkeys))
		if i < r.fill {
			k = fmt.Sprint("k", i)
		}
		dated := r.dates == 1 || r.dates == 2 && rng.IntN(2) == 0
		at := date
		switch rng.IntN(20) {
		case 0:
			at -= rng.Int64N(10*T + 1) // out of order
		case 1:
			at -= int64(time.Hour)
		case 2:
			at += int64(time.Hour)
		}
		real := g.now()
		if r.setLimits && i >= r.fill && rng.IntN(100) == 0 {
			// A new limit, stricter or looser, for every key at once.
			limit := 1 + rng.IntN(20)
			period := time.Duration(1+rng.IntN(20)) * time.Duration([]int64{1, 7, 1000, 3_000_000}[rng.IntN(4)])
			burst := 1 + rng.IntN(6)
			if err := g.SetLimit(limit, period, burst); err != nil {
				t.Fatalf("step %d: SetLimit(%d, %v, %d): %v", i, limit, period, burst, err)
			}
			m.setLimit(real, limit, period, burst)
			setLimits++
			continue
		}
		var got Decision
		var want modelDecision
		op := rng.IntN(20)
		if i < r.fill {
			op = 0
		}
		switch {
		case op < 11:
			n := rng.IntN(m.pol.p.Burst+3) - 1
			if i < r.fill {
				n = 1 + rng.IntN(r.burst)
			}
			if dated {
				got = g.AllowNAt(g.start.Add(time.Duration(at)), k, n)
			} else {
				got = g.AllowN(k, n)
			}
			want = m.allowN(real, dated, at, k, n, true)
			if got.Allowed && got.Cost > 0 {
				outstanding[k] = append(outstanding[k], got)
			}
		case op < 15:
			n := 1
			switch {
			case dated:
				got = g.PeekAt(g.start.Add(time.Duration(at)), k)
			case op == 14:
				n = rng.IntN(m.pol.p.Burst+3) - 1
				got = g.PeekN(k, n)
			default:
				got = g.Peek(k)
			}
			want = m.allowN(real, dated, at, k, n, false)
		case op < 18:
			// Give back one of the key's charges still held, any of them:
			// refunds in every order.
			if ds := outstanding[k]; len(ds) > 0 {
				j := rng.IntN(len(ds))
				d := ds[j]
				outstanding[k] = append(ds[:j], ds[j+1:]...)
				g.Refund(ctx, k, d)
				m.refund(real, k, d, d.mark)
				refunds++
			}
			continue
		case op < 19 && r.dates != 1 && !r.noWaits:
			// Wait, for at most a few emission intervals.
			n := rng.IntN(m.pol.p.Burst+3) - 1
			wctx, cancel := context.WithTimeout(ctx, time.Duration(rng.Int64N(3*T+1)+1))
			err := g.WaitN(wctx, k, n)
			cancel()
			first := m.allowN(real, false, 0, k, n, true)
			ok := first.allowed || first.reason == ReasonRateLimited && err == nil
			if first.reason == ReasonRateLimited && err == nil {
				second := m.allowN(g.now(), false, 0, k, n, true)
				if !second.allowed || g.now()-real != int64(first.retry) {
					t.Fatalf("step %d: Wait(%s, %d) returned after %v, model retry %v then %+v", i, k, n, time.Duration(g.now()-real), first.retry, second)
				}
			}
			if ok != (err == nil) {
				t.Fatalf("step %d: Wait(%s, %d) = %v, model %+v", i, k, n, err, first)
			}
			waits++
			continue
		default:
			g.Reset(k)
			m.reset(k)
			delete(outstanding, k)
			continue
		}
		reasons[got.Reason]++
		if !want.same(g, got) {
			t.Fatalf("step %d (dated %v at %v): %s got %+v, model %+v", i, dated, time.Duration(at-real), k, got, want)
		}
		most = max(most, g.Len())
		if g.Len() > r.maxKeys {
			t.Fatalf("step %d: Len %d above the cap %d", i, g.Len(), r.maxKeys)
		}
	}
}

// TestGCRAAgainstMapModel runs random sequences of every operation, with
// time moving on, against the reference model, and compares every
// decision: current and dated calls, alone and mixed, dates out of order,
// far past and far future; costs from -1 to above the burst; refunds of
// any charge still held, in every order; waits; resets; tables from one
// key to several shards, with more keys than they hold.
func TestGCRAAgainstMapModel(t *testing.T) {
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 7))
		r := randomModelRun(rng)
		t.Run(fmt.Sprintf("%d/%d/%v/burst%d/keys%d/dates%d", seed, r.limit, r.period, r.burst, r.maxKeys, r.dates), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { r.run(t, rng) })
		})
	}
}

// TestGCRAConcurrentAgainstMapModel has many goroutines send requests to
// a few hot keys and many cold ones, more than the table holds, under
// -race, in rounds at fixed instants with time moving on between them, and
// checks the table against the model after each round. In a round of unit
// requests, each key present is allowed what the model allows it, whatever
// the order; new keys are admitted until the table is full of keys in
// use, exactly, and refused with table_full after. In a round of refunds,
// each goroutine gives back every charge it was allowed, in a random
// order, interleaved with the others' charges: the keys are left as they
// were.
func TestGCRAConcurrentAgainstMapModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A unit charge owes a second, so that the table fills over a few
		// rounds, and keys expire in every shard as time moves on.
		const limit, burst, maxKeys = 1, 10, 7000
		g := NewGCRA(limit, time.Second, WithBurst(burst), WithMaxKeys(maxKeys))
		if len(g.shards) < 9 {
			t.Fatalf("%d shards, want several", len(g.shards))
		}
		m := newMapGCRA(limit, time.Second, burst, maxKeys)
		ctx := context.Background()
		for round := range 12 {
			now := g.now()
			m.mu.Lock()
			inUse := m.inUse(now)
			m.mu.Unlock()
			var mu sync.Mutex
			sent, got, full := map[string]int{}, map[string]int{}, map[string]int{}
			var wg sync.WaitGroup
			refunds := round%3 == 2
			for w := range 16 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), uint64(round)))
					if refunds {
						var held []Decision // charges not yet given back
						var keys []string
						for range 40 {
							if len(held) > 0 && rng.IntN(2) == 0 {
								j := rng.IntN(len(held))
								g.Refund(ctx, keys[j], held[j])
								held, keys = append(held[:j], held[j+1:]...), append(keys[:j], keys[j+1:]...)
								continue
							}
							// Keys of their own, which the unit rounds leave
							// with room for charges.
							k := fmt.Sprint("refund", rng.IntN(3))
							if d := g.AllowN(k, rng.IntN(burst+2)); d.Allowed && d.Cost > 0 {
								held, keys = append(held, d), append(keys, k)
							}
						}
						for _, j := range rng.Perm(len(held)) {
							g.Refund(ctx, keys[j], held[j])
						}
						return
					}
					for range 400 {
						k := fmt.Sprint("hot", rng.IntN(3))
						if rng.IntN(2) == 0 {
							k = fmt.Sprint("cold", rng.IntN(12000))
						}
						var d Decision
						if rng.IntN(8) == 0 {
							d = g.Peek(k)
							if d.Reason == ReasonTableFull {
								mu.Lock()
								full[k]++
								mu.Unlock()
							}
							continue
						}
						d = g.Allow(k)
						mu.Lock()
						sent[k]++
						switch d.Reason {
						case reasonAllowed:
							got[k]++
						case ReasonTableFull:
							full[k]++
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			m.mu.Lock()
			admitted, refused := 0, 0
			for k := range sent {
				if _, ok := m.tat[k]; !ok {
					if got[k] > 0 {
						admitted++
					} else if full[k] > 0 {
						refused++
					}
				}
			}
			m.mu.Unlock()
			for k, n := range sent {
				_, present := m.tat[k]
				want := 0
				for range n {
					d := m.allowN(now, false, 0, k, 1, true)
					if d.allowed {
						want++
					}
					if !present && got[k] == 0 {
						m.reset(k) // refused with table_full: not in the table
						want = 0
						break
					}
				}
				if got[k] != want {
					t.Errorf("round %d: %s allowed %d of %d, model %d (table_full %d)", round, k, got[k], n, want, full[k])
				}
			}
			if refused > 0 && inUse+admitted != maxKeys {
				t.Errorf("round %d: %d new keys refused with table_full, with %d keys in use and %d admitted, of %d", round, refused, inUse, admitted, maxKeys)
			}
			if inUse+admitted > maxKeys {
				t.Errorf("round %d: %d keys in use and %d admitted, above the cap %d", round, inUse, admitted, maxKeys)
			}
			// Every key the model holds, and the refund rounds' keys, which
			// it never charged: each as the model has it.
			check := []string{"refund0", "refund1", "refund2"}
			for k := range m.tat {
				check = append(check, k)
			}
			for _, k := range check {
				p := g.Peek(k)
				w := m.allowN(now, false, 0, k, 1, false)
				if !w.same(g, p) {
					t.Errorf("round %d: %s left at %+v, model %+v", round, k, p, w)
				}
			}
			if t.Failed() {
				return
			}
			t.Logf("round %d: %d keys in use, %d new keys admitted, %d refused with table_full", round, inUse, admitted, refused)
			time.Sleep(time.Duration(70+round*40) * time.Millisecond)
		}
	})
}
