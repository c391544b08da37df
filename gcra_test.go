package limits

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestNewGCRAPanics(t *testing.T) {
	tests := []struct {
		name string
		f    func()
		want string
	}{
		{"zero limit", func() { NewGCRA(0, time.Second) }, "limits: limit must be >= 1, got 0"},
		{"negative limit", func() { NewGCRA(-3, time.Second) }, "limits: limit must be >= 1, got -3"},
		{"zero period", func() { NewGCRA(1, 0) }, "limits: period must be > 0, got 0s"},
		{"zero burst", func() { NewGCRA(1, time.Second, WithBurst(0)) }, "limits: burst must be >= 1, got 0"},
		{"zero max keys", func() { NewGCRA(1, time.Second, WithMaxKeys(0)) }, "limits: max keys must be >= 1, got 0"},
		{"huge burst", func() { NewGCRA(1, time.Hour, WithBurst(1_000_000)) }, "limits: a burst of 1000000 at one event per 1h0m0s takes too long to recover"},
	}
	for _, tt := range tests {
		if got := mustPanic(t, tt.f); got != tt.want {
			t.Errorf("%s: panic %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestNewGCRAFor(t *testing.T) {
	g, err := NewGCRAFor(Limit{5, time.Second}, WithBurst(2))
	if err != nil || g.Limit() != 5 || g.Burst() != 2 {
		t.Fatalf("NewGCRAFor(5/s, burst 2) = %v, %v", g, err)
	}
	for _, tt := range []struct {
		l    Limit
		opts []GCRAOption
		want string
	}{
		{Limit{0, time.Second}, nil, "limits: invalid limit: limit must be >= 1, got 0"},
		{Limit{1, -time.Second}, nil, "limits: invalid limit: period must be > 0, got -1s"},
		{Limit{1, time.Second}, []GCRAOption{WithBurst(-1)}, "limits: invalid limit: burst must be >= 1, got -1"},
		{Limit{1, time.Second}, []GCRAOption{WithMaxKeys(-1)}, "limits: invalid limit: max keys must be >= 1, got -1"},
		{Limit{1, time.Hour}, []GCRAOption{WithBurst(1 << 20)}, "limits: invalid limit: a burst of 1048576 at one event per 1h0m0s takes too long to recover"},
	} {
		g, err := NewGCRAFor(tt.l, tt.opts...)
		if g != nil || !errors.Is(err, ErrInvalidLimit) || err.Error() != tt.want {
			t.Errorf("NewGCRAFor(%v) = %v, %v; want error %q", tt.l, g, err, tt.want)
		}
	}
}

func TestGCRAEmissionInterval(t *testing.T) {
	tests := []struct {
		limit  int
		period time.Duration
		want   time.Duration
	}{
		{10, time.Second, 100 * time.Millisecond},
		{3, time.Second, 333333334}, // rounded up: never more than 3 a second
		{2_000_000_000, time.Second, 1},
		{1, 24 * time.Hour, 24 * time.Hour},
	}
	for _, tt := range tests {
		g := NewGCRA(tt.limit, tt.period)
		if got := g.EmissionInterval(); got != tt.want {
			t.Errorf("NewGCRA(%d, %v): T = %v, want %v", tt.limit, tt.period, got, tt.want)
		}
		if g.Limit() != tt.limit || g.Period() != tt.period || g.Burst() != tt.limit || g.MaxKeys() != DefaultMaxKeys {
			t.Errorf("NewGCRA(%d, %v): accessors %d %v %d %d", tt.limit, tt.period, g.Limit(), g.Period(), g.Burst(), g.MaxKeys())
		}
	}
}

func TestGCRABasics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGCRA(10, time.Second, WithBurst(3)) // T = 100ms, 3 at once
		for i := range 3 {
			d := g.Allow("k")
			want := Decision{Allowed: true, Limit: 10, Period: time.Second, Burst: 3, Remaining: 2 - i, ResetAfter: time.Duration(i+1) * 100 * time.Millisecond}
			if d != want {
				t.Errorf("request %d: %+v, want %+v", i, d, want)
			}
		}
		d := g.Allow("k")
		want := Decision{Reason: ReasonRateLimited, Limit: 10, Period: time.Second, Burst: 3, RetryAfter: 100 * time.Millisecond, ResetAfter: 300 * time.Millisecond}
		if d != want {
			t.Errorf("over the burst: %+v, want %+v", d, want)
		}
		if d := g.Allow("other"); !d.Allowed || d.Remaining != 2 {
			t.Errorf("another key: %+v", d)
		}
		time.Sleep(100 * time.Millisecond)
		if d := g.Allow("k"); !d.Allowed || d.Remaining != 0 {
			t.Errorf("after RetryAfter: %+v", d)
		}
		time.Sleep(time.Second)
		if d := g.Peek("k"); !d.Allowed || d.Remaining != 3 || d.ResetAfter != 0 {
			t.Errorf("after a long pause: %+v", d)
		}
	})
}

func TestGCRACosts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGCRA(5, time.Second) // burst 5, T = 200ms
		if d := g.AllowN("k", 3); !d.Allowed || d.Remaining != 2 {
			t.Errorf("AllowN(3): %+v", d)
		}
		if d := g.AllowN("k", 3); d.Allowed || d.Reason != ReasonRateLimited || d.RetryAfter != 200*time.Millisecond || d.Remaining != 2 {
			t.Errorf("AllowN(3) with 2 left: %+v", d)
		}
		for _, n := range []int{6, 1000, math.MaxInt} {
			d := g.AllowN("k", n)
			if d.Allowed || d.Reason != ReasonCostAboveBurst || d.RetryAfter != 0 || d.Remaining != 2 {
				t.Errorf("AllowN(%d) above the burst: %+v", n, d)
			}
		}
		for _, n := range []int{-1, math.MinInt} {
			d := g.AllowN("k", n)
			if d.Allowed || d.Reason != ReasonInvalidCost || d.RetryAfter != 0 || d.Remaining != 2 {
				t.Errorf("AllowN(%d): %+v", n, d)
			}
		}
		if d := g.AllowN("k", 0); !d.Allowed || d.Remaining != 2 || d.ResetAfter != 600*time.Millisecond {
			t.Errorf("AllowN(0): %+v", d)
		}
		if d := g.AllowN("k", 2); !d.Allowed || d.Remaining != 0 {
			t.Errorf("refusals and peeks must not have charged: %+v", d)
		}
		if d := g.AllowN("new", 0); !d.Allowed || g.Len() != 1 {
			t.Errorf("AllowN(0) on a new key: %+v, Len %d; want allowed and not stored", d, g.Len())
		}
		if d := g.Peek("new"); !d.Allowed || d.Remaining != 5 || g.Len() != 1 {
			t.Errorf("Peek on a new key: %+v, Len %d", d, g.Len())
		}
	})
}

func TestReasonString(t *testing.T) {
	for r, want := range map[Reason]string{
		ReasonAllowed: "allowed", ReasonRateLimited: "rate_limited", ReasonTableFull: "table_full",
		ReasonCostAboveBurst: "cost_above_burst", ReasonInvalidCost: "invalid_cost", ReasonUnavailable: "unavailable", Reason(99): "reason(99)",
	} {
		if got := r.String(); got != want {
			t.Errorf("Reason(%d).String() = %q, want %q", r, got, want)
		}
	}
}

// leakyBucket is a locked reference: the continuous-state leaky bucket of
// ITU-T I.371, the other classic statement of the same conformance rule.
type leakyBucket struct {
	mu     sync.Mutex
	inc    int64 // T
	limit  int64 // tau
	x, lct map[string]int64
}

func newLeakyBucket(t, burst int64) *leakyBucket {
	return &leakyBucket{inc: t, limit: t * (burst - 1), x: map[string]int64{}, lct: map[string]int64{}}
}

func (b *leakyBucket) allow(now int64, k string, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	x := max(b.x[k]-(now-b.lct[k]), 0)
	if _, seen := b.lct[k]; !seen {
		x = 0
	}
	if x+(n-1)*b.inc > b.limit {
		return false
	}
	b.x[k], b.lct[k] = x+n*b.inc, now
	return true
}

// TestGCRAAgainstLeakyBucket compares decisions on random arrivals and costs
// with the reference.
func TestGCRAAgainstLeakyBucket(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		limit := 1 + rng.IntN(20)
		period := time.Duration(1+rng.IntN(5000)) * time.Millisecond
		burst := 1 + rng.IntN(10)
		g := NewGCRA(limit, period, WithBurst(burst))
		ref := newLeakyBucket(int64(g.EmissionInterval()), int64(burst))
		start := g.start
		now := int64(0)
		for i := range 2000 {
			now += rng.Int64N(int64(period) / int64(limit) * 2)
			k := strconv.Itoa(rng.IntN(3))
			n := rng.IntN(burst + 1)
			if n == 0 {
				n = 1
			}
			got := g.AllowNAt(start.Add(time.Duration(now)), k, n).Allowed
			if want := ref.allow(now, k, int64(n)); got != want {
				t.Fatalf("seed %d step %d: AllowN(%s, %d) at %v = %v, reference says %v", seed, i, k, n, time.Duration(now), got, want)
			}
		}
	}
}

// TestGCRANoWindowEdge checks, on random arrival sequences, that every
// closed interval of length d holds at most burst + floor(d/T) allowed unit
// requests, by brute force over all pairs of allowed requests.
func TestGCRANoWindowEdge(t *testing.T) {
	for seed := range uint64(10) {
		synctest.Test(t, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 2))
			burst := 1 + rng.IntN(8)
			g := NewGCRA(1+rng.IntN(10), time.Second, WithBurst(burst))
			T := int64(g.EmissionInterval())
			start := time.Now()
			var allowed []int64
			for range 1500 {
				// bursts of arrivals at one instant, and pauses
				if rng.IntN(3) == 0 {
					time.Sleep(time.Duration(rng.Int64N(2 * T)))
				}
				if g.Allow("k").Allowed {
					allowed = append(allowed, int64(time.Since(start)))
				}
			}
			if len(allowed) < burst+10 {
				t.Fatalf("seed %d: only %d requests allowed", seed, len(allowed))
			}
			tight := false
			for i := range allowed {
				for j := i; j < len(allowed); j++ {
					count := int64(j - i + 1)
					bound := int64(burst) + (allowed[j]-allowed[i])/T
					if count > bound {
						t.Fatalf("seed %d: %d requests in [%d, %d], bound %d", seed, count, allowed[i], allowed[j], bound)
					}
					tight = tight || count == bound
				}
			}
			if !tight {
				t.Errorf("seed %d: the bound was never reached; the limiter is stricter than GCRA", seed)
			}
		})
	}
}

// TestGCRARetryAfterExact checks, on random states, that a refused request
// is allowed exactly RetryAfter later and not a nanosecond before, and
// that Remaining and ResetAfter tell the truth.
func TestGCRARetryAfterExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for i := range 300 {
		burst := 1 + rng.IntN(6)
		g := NewGCRA(1+rng.IntN(1000), time.Duration(1+rng.Int64N(int64(time.Minute))), WithBurst(burst))
		now := g.start
		for range rng.IntN(20) {
			now = now.Add(time.Duration(rng.Int64N(int64(g.EmissionInterval()))))
			g.AllowNAt(now, "k", 1+rng.IntN(burst))
		}
		n := 1 + rng.IntN(burst)
		d := g.AllowNAt(now, "k", n)
		if d.Allowed {
			continue
		}
		if d.Reason != ReasonRateLimited || d.RetryAfter <= 0 {
			t.Fatalf("case %d: refusal %+v", i, d)
		}
		if early := g.AllowNAt(now.Add(d.RetryAfter-1), "k", n); early.Allowed {
			t.Fatalf("case %d: allowed 1ns before RetryAfter %v", i, d.RetryAfter)
		}
		// Remaining: that many unit requests pass right now, and no more.
		p := g.PeekAt(now, "k")
		for j := range p.Remaining {
			if !g.AllowNAt(now, "k", 1).Allowed {
				t.Fatalf("case %d: unit request %d of Remaining %d refused", i, j, p.Remaining)
			}
		}
		if g.AllowNAt(now, "k", 1).Allowed {
			t.Fatalf("case %d: more than Remaining %d unit requests allowed", i, p.Remaining)
		}
		r := g.PeekAt(now, "k")
		if full := g.PeekAt(now.Add(r.ResetAfter), "k"); full.Remaining != burst {
			t.Fatalf("case %d: Remaining %d at ResetAfter, want the burst %d", i, full.Remaining, burst)
		}
		if r.ResetAfter > 0 && g.PeekAt(now.Add(r.ResetAfter-1), "k").Remaining == burst {
			t.Fatalf("case %d: full burst before ResetAfter", i)
		}
		if late := g.AllowNAt(now.Add(r.RetryAfter+d.RetryAfter+r.ResetAfter), "k", n); !late.Allowed {
			t.Fatalf("case %d: refused after a full reset: %+v", i, late)
		}
	}
}

func TestGCRARetryAfterAtExactTime(t *testing.T) {
	g := NewGCRA(7, time.Second, WithBurst(2))
	now := g.start.Add(time.Hour)
	g.AllowNAt(now, "k", 2)
	d := g.AllowNAt(now, "k", 2)
	if d.Allowed {
		t.Fatal("allowed past the burst")
	}
	if !g.AllowNAt(now.Add(d.RetryAfter), "k", 2).Allowed {
		t.Errorf("refused at exactly RetryAfter %v", d.RetryAfter)
	}
}

// TestGCRATableFull fills a small table, checks that new keys are refused
// while existing ones keep their debt, then lets the entries expire.
func TestGCRATableFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGCRA(2, time.Second, WithMaxKeys(3)) // burst 2, T = 500ms
		for _, k := range []string{"a", "b", "c"} {
			if d := g.AllowN(k, 2); !d.Allowed {
				t.Fatalf("%s: %+v", k, d)
			}
		}
		d := g.Allow("d")
		if d.Allowed || d.Reason != ReasonTableFull || d.RetryAfter != 0 || d.Remaining != 0 {
			t.Errorf("new key in a full table: %+v", d)
		}
		for _, k := range []string{"a", "b", "c"} {
			if d := g.Allow(k); d.Allowed || d.Reason != ReasonRateLimited {
				t.Errorf("%s lost its debt: %+v", k, d)
			}
		}
		time.Sleep(500 * time.Millisecond)
		// Each has recovered one request, but none has expired.
		if d := g.Allow("a"); !d.Allowed {
			t.Errorf("a after 500ms: %+v", d)
		}
		if d := g.Allow("d"); d.Reason != ReasonTableFull {
			t.Errorf("d while every key is in use: %+v", d)
		}
		time.Sleep(500 * time.Millisecond) // b and c expire; a runs until 1.5s
		for _, k := range []string{"d", "e"} {
			if d := g.Allow(k); !d.Allowed {
				t.Errorf("%s after others expired: %+v", k, d)
			}
		}
		if d := g.Allow("f"); d.Reason != ReasonTableFull {
			t.Errorf("f with a, d and e in use: %+v", d)
		}
		if d := g.AllowN("a", 2); d.Allowed {
			t.Errorf("a kept its state through the reclaim, yet: %+v", d)
		}
		if g.Len() != 3 {
			t.Errorf("Len = %d, want 3", g.Len())
		}
	})
}

// TestGCRAFutureDateKeepsOthersDebt checks that a request dated in the
// future cannot make the table drop keys still in debt by the real clock.
func TestGCRAFutureDateKeepsOthersDebt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGCRA(1, time.Hour, WithMaxKeys(2))
		g.Allow("a")
		g.Allow("b")
		if d := g.AllowNAt(time.Now().Add(100*time.Hour), "c", 1); d.Reason != ReasonTableFull {
			t.Errorf("new key dated 100h ahead: %+v, want table_full", d)
		}
		for _, k := range []string{"a", "b"} {
			if d := g.Allow(k); d.Allowed {
				t.Errorf("%s lost its debt: %+v", k, d)
			}
		}
		// A date in the past is judged against the key's state: stricter,
		// and never a negative Remaining.
		if d := g.AllowNAt(time.Now().Add(-10*time.Hour), "a", 1); d.Allowed || d.Remaining != 0 {
			t.Errorf("request dated 10h back: %+v", d)
		}
	})
}

// TestGCRASweepsBounded keeps a table at its cap with keys expiring one by
// one and new keys arriving as fast, the case in which sweeping a whole
// shard for every new key would make each cost thousands of entries, and
// checks that shards are swept at most once per sweepGap.
func TestGCRASweepsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxKeys = 64 * 100
		g := NewGCRA(1, time.Second, WithMaxKeys(maxKeys)) // D = 1s, keys expire 1s after their request
		step := time.Second / maxKeys
		for i := range maxKeys { // staggered: one key expires every step
			g.Allow(fmt.Sprintf("old%d", i))
			time.Sleep(step)
		}
		before := g.sweeps.Load()
		admitted := 0
		const rounds = 4 * maxKeys // four seconds of arrivals at the expiry rate
		for i := range rounds {
			if g.Allow(fmt.Sprintf("new%d", i)).Allowed {
				admitted++
			}
			time.Sleep(step)
		}
		sweeps := g.sweeps.Load() - before
		const gaps = 4 * 32 // four seconds in gaps of 1/32 of the 1s recovery time
		if limit := int64(gcraShards * (gaps + 2)); sweeps > limit {
			t.Errorf("%d sweeps for %d new keys, more than %d (once per gap per shard)", sweeps, rounds, limit)
		}
		if admitted < rounds/2 {
			t.Errorf("only %d of %d new keys admitted as old ones expired", admitted, rounds)
		}
		t.Logf("%d sweeps, %d of %d new keys admitted", sweeps, admitted, rounds)
	})
}

// TestGCRAManyKeysBoundedHeap sends 10 million distinct keys through a
// GCRA capped at 100,000 and checks that its heap stays within the cap's
// budget, while keys expire and new ones take their places.
func TestGCRAManyKeysBoundedHeap(t *testing.T) {
	const maxKeys, total = 100_000, 10_000_000
	synctest.Test(t, func(t *testing.T) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		g := NewGCRA(1, 10*time.Millisecond, WithMaxKeys(maxKeys))
		buf := make([]byte, 0, 16)
		allowed, full := 0, 0
		for i := range total {
			if i%50_000 == 0 {
				time.Sleep(3 * time.Millisecond) // some keys expire
			}
			buf = strconv.AppendInt(buf[:0], int64(i), 10)
			switch d := g.Allow(string(buf)); d.Reason {
			case ReasonAllowed:
				allowed++
			case ReasonTableFull:
				full++
			default:
				t.Fatalf("key %d: %+v", i, d)
			}
			if g.Len() > maxKeys {
				t.Fatalf("Len %d above the cap", g.Len())
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
		t.Logf("%d allowed, %d refused with a full table; heap %d bytes, %.1f per key of the cap", allowed, full, held, float64(held)/maxKeys)
		if held > 64*maxKeys {
			t.Errorf("heap grew by %d bytes, more than 64 per key of the cap", held)
		}
		if full == 0 || allowed < total/4 {
			t.Errorf("%d allowed, %d refused: the test did not exercise both a full table and recovery", allowed, full)
		}
		runtime.KeepAlive(g)
	})
}

// TestGCRAConcurrentAgainstModel has many goroutines send unit requests to
// hot and cold keys in rounds at fixed instants, and compares the number
// allowed per key with a locked reference.
func TestGCRAConcurrentAgainstModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGCRA(100, time.Second, WithBurst(20))
		ref := newLeakyBucket(int64(g.EmissionInterval()), 20)
		start := time.Now()
		for round := range 5 {
			var mu sync.Mutex
			sent, got := map[string]int64{}, map[string]int64{}
			var wg sync.WaitGroup
			for w := range 16 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), uint64(round)))
					for range 300 {
						k := "hot"
						if rng.IntN(2) == 0 {
							k = fmt.Sprintf("cold%d", rng.IntN(100))
						}
						d := g.Allow(k)
						mu.Lock()
						sent[k]++
						if d.Allowed {
							got[k]++
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			// At one instant, the number of unit requests allowed does not
			// depend on their order: replay them in any order.
			now := int64(time.Since(start))
			for k, n := range sent {
				want := int64(0)
				for range n {
					if ref.allow(now, k, 1) {
						want++
					}
				}
				if got[k] != want {
					t.Errorf("round %d: %s allowed %d of %d, reference %d", round, k, got[k], n, want)
				}
			}
			time.Sleep(70 * time.Millisecond)
		}
	})
}

func TestGCRAAllocs(t *testing.T) {
	g := NewGCRA(1_000_000, time.Second)
	g.Allow("client-000123")
	allocs := testing.AllocsPerRun(1000, func() {
		g.Allow("client-000123")
		g.AllowN("client-000123", 2)
		g.Peek("client-000123")
	})
	if allocs != 0 {
		t.Errorf("Allow, AllowN and Peek allocate %v times per run, want 0", allocs)
	}
}
