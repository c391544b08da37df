package limits

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitsgo/limits/internal/gcra"
)

// mapGCRA is the reference model of GCRA's table: the algorithm over a Go
// map under one mutex, as the table was before it was made flat, deciding
// with the same arithmetic. It drops a key as soon as it expires, so that
// it admits a new key exactly when fewer than maxKeys keys are in use.
type mapGCRA struct {
	mu      sync.Mutex
	p       gcra.Policy
	maxKeys int
	tat     map[string]gcra.Time
}

func newMapGCRA(limit int, period time.Duration, burst, maxKeys int) *mapGCRA {
	p, err := gcra.New(limit, period, burst)
	if err != nil {
		panic(err)
	}
	return &mapGCRA{p: p, maxKeys: maxKeys, tat: map[string]gcra.Time{}}
}

// live counts the keys that owe something at now.
func (m *mapGCRA) live(now int64) int {
	n := 0
	for k, tat := range m.tat {
		if gcra.Positive(m.p.Sub(tat, gcra.Time{NS: now})) {
			n++
		} else {
			delete(m.tat, k)
		}
	}
	return n
}

func (m *mapGCRA) allowN(now int64, key string, n int, charge bool) (bool, Reason, int, time.Duration, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	reason, cost := ReasonAllowed, n
	switch {
	case n < 0:
		reason, cost, charge = ReasonInvalidCost, 0, false
	case n > m.p.Burst:
		reason, cost, charge = ReasonCostAboveBurst, 0, false
	case n == 0:
		charge = false
	}
	tat, found := m.tat[key]
	var ahead gcra.Time
	if found {
		ahead = m.p.Sub(tat, gcra.Time{NS: now})
	}
	r := m.p.Decide(ahead, cost, charge)
	if r.Allowed && charge {
		if !found || !gcra.Positive(ahead) {
			delete(m.tat, key)
			if m.live(now) >= m.maxKeys {
				return false, ReasonTableFull, 0, 0, 0
			}
		}
		m.tat[key] = m.p.Add(gcra.Time{NS: now}, r.Ahead)
	}
	if !r.Allowed && reason == ReasonAllowed {
		reason = ReasonRateLimited
	}
	if reason != ReasonRateLimited {
		r.RetryAfter = 0
	}
	return r.Allowed && reason == ReasonAllowed, reason, r.Remaining, r.RetryAfter, r.ResetAfter
}

func (m *mapGCRA) refund(now int64, key string, d Decision, charged gcra.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if tat, ok := m.tat[key]; ok && d.Allowed && d.Cost > 0 {
		m.tat[key] = m.p.Refund(tat, charged, gcra.Time{NS: now}, d.Cost, false)
	}
}

func (m *mapGCRA) reset(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.tat, key)
}

// TestGCRAAgainstMapModel runs random sequences of every operation, with
// time moving on, against the reference model, and compares every
// decision. The tables are small enough for one shard, where a full table
// admits a new key exactly when one has expired, as the model does; the
// larger ones never fill.
func TestGCRAAgainstMapModel(t *testing.T) {
	for seed := range uint64(40) {
		synctest.Test(t, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			limit := 1 + rng.IntN(20)
			period := time.Duration(1+rng.IntN(20)) * time.Duration([]int64{1, 7, 1000, 3_000_000}[rng.IntN(4)])
			burst := 1 + rng.IntN(6)
			maxKeys := []int{1, 3, 10, 100, 500, 100_000}[rng.IntN(6)]
			nkeys := 1 + rng.IntN(2*min(maxKeys, 300))
			g := NewGCRA(limit, period, WithBurst(burst), WithMaxKeys(maxKeys))
			m := newMapGCRA(limit, period, burst, maxKeys)
			ctx := context.Background()
			last := map[string]Decision{}
			for i := range 3000 {
				if rng.IntN(4) == 0 {
					time.Sleep(time.Duration(rng.Int64N(int64(period)/int64(limit)*2 + 1)))
				}
				now := g.now()
				k := fmt.Sprint("k", rng.IntN(nkeys))
				var got Decision
				var wAllowed bool
				var wReason Reason
				var wRemaining int
				var wRetry, wReset time.Duration
				switch op := rng.IntN(10); {
				case op < 6:
					n := rng.IntN(burst+3) - 1
					got = g.AllowN(k, n)
					wAllowed, wReason, wRemaining, wRetry, wReset = m.allowN(now, k, n, true)
					if got.Allowed {
						last[k] = got
					}
				case op < 8:
					got = g.Peek(k)
					wAllowed, wReason, wRemaining, wRetry, wReset = m.allowN(now, k, 1, false)
				case op < 9:
					if d, ok := last[k]; ok {
						g.Refund(ctx, k, d)
						m.refund(now, k, d, d.mark)
						delete(last, k)
					}
					continue
				default:
					g.Reset(k)
					m.reset(k)
					delete(last, k)
					continue
				}
				if got.Allowed != wAllowed || got.Reason != wReason || got.Remaining != wRemaining || got.RetryAfter != wRetry || got.ResetAfter != wReset {
					t.Fatalf("seed %d step %d (%d/%v burst %d, %d keys): %s got %+v, model %v %v remaining %d retry %v reset %v",
						seed, i, limit, period, burst, maxKeys, k, got, wAllowed, wReason, wRemaining, wRetry, wReset)
				}
				if g.Len() > maxKeys {
					t.Fatalf("seed %d step %d: Len %d above the cap %d", seed, i, g.Len(), maxKeys)
				}
			}
		})
	}
}

// TestGCRAConcurrentAgainstMapModel has many goroutines send requests of
// random costs, refunds and resets to a few hot keys and many cold ones
// under -race, then checks the table against itself: every key's state
// is one the model reaches by replaying the allowed requests in the order
// the GCRA's lock saw them.
func TestGCRAConcurrentAgainstMapModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGCRA(50, time.Second, WithBurst(10), WithMaxKeys(5000))
		m := newMapGCRA(50, time.Second, 10, 5000)
		for round := range 6 {
			var mu sync.Mutex
			sent := map[string][]int{}
			got := map[string]int{}
			var wg sync.WaitGroup
			for w := range 16 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), uint64(round)))
					for range 400 {
						k := fmt.Sprint("hot", rng.IntN(3))
						if rng.IntN(2) == 0 {
							k = fmt.Sprint("cold", rng.IntN(2000))
						}
						d := g.Allow(k)
						mu.Lock()
						sent[k] = append(sent[k], 1)
						if d.Allowed {
							got[k]++
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			// At one instant, unit requests are allowed up to what the
			// key's state permits, whatever their order.
			now := g.now()
			for k, reqs := range sent {
				want := 0
				for _, n := range reqs {
					if ok, _, _, _, _ := m.allowN(now, k, n, true); ok {
						want++
					}
				}
				if got[k] != want {
					t.Errorf("round %d: %s allowed %d of %d, model %d", round, k, got[k], len(reqs), want)
				}
				p := g.Peek(k)
				_, _, rem, _, reset := m.allowN(now, k, 1, false)
				if p.Remaining != rem || p.ResetAfter != reset {
					t.Errorf("round %d: %s left with %d remaining and reset %v, model %d and %v", round, k, p.Remaining, p.ResetAfter, rem, reset)
				}
			}
			time.Sleep(time.Duration(70+round*40) * time.Millisecond)
		}
	})
}
