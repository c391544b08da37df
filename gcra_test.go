package limits

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/limitsgo/limits/internal/gcra"
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
		{"zero max keys", func() { NewGCRA(1, time.Second, WithMaxKeys(0)) }, "limits: max keys must be within 1-268435456, got 0"},
		{"huge max keys", func() { NewGCRA(1, time.Second, WithMaxKeys(1<<40)) }, "limits: max keys must be within 1-268435456, got 1099511627776"},
		{"huge burst", func() { NewGCRA(1, time.Hour, WithBurst(1_000_000)) }, "limits: a burst of 1000000 at 1 per 1h0m0s takes too long to recover"},
	}
	for _, tt := range tests {
		if got := mustPanic(t, tt.f); got != tt.want {
			t.Errorf("%s: panic %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestNewGCRAErrors(t *testing.T) {
	g, err := newGCRA(5, time.Second, []Option{WithBurst(2)})
	if err != nil || g.Limit() != 5 || g.Burst() != 2 {
		t.Fatalf("newGCRA(5/s, burst 2) = %v, %v", g, err)
	}
	for _, tt := range []struct {
		l    Limit
		opts []Option
		want string
	}{
		{Limit{0, time.Second}, nil, "limit must be >= 1, got 0"},
		{Limit{1, -time.Second}, nil, "period must be > 0, got -1s"},
		{Limit{1, time.Second}, []Option{WithBurst(-1)}, "burst must be >= 1, got -1"},
		{Limit{1, time.Second}, []Option{WithMaxKeys(-1)}, "max keys must be within 1-268435456, got -1"},
		{Limit{1, time.Hour}, []Option{WithBurst(1 << 20)}, "a burst of 1048576 at 1 per 1h0m0s takes too long to recover"},
	} {
		g, err := newGCRA(tt.l.Events, tt.l.Period, tt.opts)
		if g != nil || err == nil || err.Error() != tt.want {
			t.Errorf("newGCRA(%v) = %v, %v; want error %q", tt.l, g, err, tt.want)
		}
		if got := mustPanic(t, func() { NewGCRA(tt.l.Events, tt.l.Period, tt.opts...) }); got != "limits: "+tt.want {
			t.Errorf("NewGCRA(%v) panicked with %q", tt.l, got)
		}
	}
}

func TestGCRAAccessors(t *testing.T) {
	g := NewGCRA(7, time.Minute, WithBurst(3), WithMaxKeys(10))
	if g.Limit() != 7 || g.Period() != time.Minute || g.Burst() != 3 || g.MaxKeys() != 10 || g.Len() != 0 {
		t.Errorf("accessors: %d %v %d %d %d", g.Limit(), g.Period(), g.Burst(), g.MaxKeys(), g.Len())
	}
	if g := NewGCRA(1, time.Second); g.Burst() != 1 || g.MaxKeys() != defaultMaxKeys {
		t.Errorf("defaults: burst %d, max keys %d", g.Burst(), g.MaxKeys())
	}
}

// sameDecision reports whether two Decisions agree in their exported
// fields, their times compared as instants.
func sameDecision(a, b Decision) bool {
	ta, tb := a.At, b.At
	for _, d := range []*Decision{&a, &b} {
		d.At, d.src, d.mark = time.Time{}, nil, gcra.Time{}
	}
	return a == b && ta.Equal(tb)
}

func TestGCRABasics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGCRA(10, time.Second, WithBurst(3)) // T = 100ms, 3 at once
		for i := range 3 {
			d := g.Allow("k")
			want := Decision{Allowed: true, Limit: 10, Period: time.Second, Burst: 3, Cost: 1, Remaining: 2 - i, ResetAfter: time.Duration(i+1) * 100 * time.Millisecond, At: time.Now()}
			if !sameDecision(d, want) {
				t.Errorf("request %d: %+v, want %+v", i, d, want)
			}
		}
		d := g.Allow("k")
		want := Decision{Reason: ReasonRateLimited, Limit: 10, Period: time.Second, Burst: 3, Cost: 1, RetryAfter: 100 * time.Millisecond, ResetAfter: 300 * time.Millisecond, At: time.Now()}
		if !sameDecision(d, want) {
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
		reasonAllowed: "allowed", ReasonRateLimited: "rate_limited", ReasonTableFull: "table_full",
		ReasonCostAboveBurst: "cost_above_burst", ReasonInvalidCost: "invalid_cost", ReasonUnavailable: "limiter_error", Reason(99): "reason(99)",
	} {
		if got := r.String(); got != want {
			t.Errorf("Reason(%d).String() = %q, want %q", r, got, want)
		}
	}
}

// leakyBucket is a locked reference: the continuous-state leaky bucket of
// ITU-T I.371, the other classic statement of the same conformance rule,
// with time counted exactly in units of 1/limit nanoseconds, so that the
// emission interval is period units, a whole number.
type leakyBucket struct {
	mu     sync.Mutex
	scale  int64 // units per nanosecond: the limit
	inc    int64 // T, in units: the period in nanoseconds
	limit  int64 // tau, in units
	x, lct map[string]int64
}

func newLeakyBucket(limit int, period time.Duration, burst int) *leakyBucket {
	return &leakyBucket{scale: int64(limit), inc: int64(period), limit: int64(period) * int64(burst-1), x: map[string]int64{}, lct: map[string]int64{}}
}

func (b *leakyBucket) allow(now int64, k string, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now *= b.scale
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
		ref := newLeakyBucket(limit, period, burst)
		start := g.start
		now := int64(0)
		for i := range 2000 {
			now += rng.Int64N(int64(period)/int64(limit)*2 + 1)
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
			limit := 1 + rng.IntN(10)
			g := NewGCRA(limit, time.Second, WithBurst(burst))
			T := int64(time.Second)/int64(limit) + 1 // for the pauses
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
					bound := int64(burst) + (allowed[j]-allowed[i])*int64(limit)/int64(time.Second)
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
	// In a bubble: the dates are near the GCRA's start, and a slow run must
	// not let the real clock overtake them.
	synctest.Test(t, testGCRARetryAfterExact)
}

func testGCRARetryAfterExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for i := range 300 {
		burst := 1 + rng.IntN(6)
		limit, period := 1+rng.IntN(1000), time.Duration(1+rng.Int64N(int64(time.Minute)))
		g := NewGCRA(limit, period, WithBurst(burst))
		now := g.start
		for range rng.IntN(20) {
			now = now.Add(time.Duration(rng.Int64N(int64(period)/int64(limit) + 1)))
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
		if n := g.TableFull(); n != 3 {
			t.Errorf("TableFull = %d, want the 3 refusals of new keys", n)
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

// TestGCRAReclaimBounded keeps a table at its cap with keys expiring one
// by one and new keys arriving as fast, and checks that new keys are
// admitted as old ones expire while no call looks at more than a few
// shards' worth of slots, however large the table.
func TestGCRAReclaimBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxKeys = 20_000
		g := NewGCRA(1, time.Second, WithMaxKeys(maxKeys)) // keys expire 1s after their request
		worst := 0
		scanned := 0
		testHookScan = func(n int) { scanned += n }
		defer func() { testHookScan = nil }()
		step := time.Second / maxKeys
		for i := range maxKeys { // staggered: one key expires every step
			g.Allow(fmt.Sprintf("old%d", i))
			time.Sleep(step)
		}
		admitted := 0
		const rounds = 4 * maxKeys // four seconds of arrivals at the expiry rate
		for i := range rounds {
			scanned = 0
			if g.Allow(fmt.Sprintf("new%d", i)).Allowed {
				admitted++
			}
			worst = max(worst, scanned)
			time.Sleep(step)
		}
		if bound := (2 + reclaimPurges) * shardSlots; worst > bound {
			t.Errorf("a call scanned %d slots, more than %d", worst, bound)
		}
		if admitted < rounds*9/10 {
			t.Errorf("only %d of %d new keys admitted as old ones expired", admitted, rounds)
		}
		if g.Len() > maxKeys {
			t.Errorf("Len %d above the cap", g.Len())
		}
		t.Logf("%d of %d new keys admitted; at most %d slots scanned by one call", admitted, rounds, worst)
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
			case reasonAllowed:
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
		if held > 24*maxKeys {
			t.Errorf("heap grew by %d bytes, more than 24 per key of the cap", held)
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
		ref := newLeakyBucket(100, time.Second, 20)
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

// TestGCRAShardLayout checks that a shard fills one cache line, and that
// the slot address it publishes for prefetching follows its slots as they
// grow.
func TestGCRAShardLayout(t *testing.T) {
	if got := unsafe.Sizeof(gcraShard{}); got != 64 {
		t.Fatalf("gcraShard is %d bytes, want 64", got)
	}
	g := NewGCRA(1, time.Hour, WithMaxKeys(1<<12))
	for i := range 1 << 11 {
		g.Allow(strconv.Itoa(i))
	}
	grown := 0
	for i := range g.shards {
		s := &g.shards[i]
		s.mu.Lock()
		if s.slots == nil {
			if s.base.Load() != 0 {
				t.Errorf("shard %d: no slots, base %#x", i, s.base.Load())
			}
		} else {
			if len(s.slots) > 4 {
				grown++
			}
			if s.base.Load() != uintptr(unsafe.Pointer(&s.slots[0])) || int(s.mask.Load()) != len(s.slots)-1 {
				t.Errorf("shard %d: published %#x/%d, slots at %p/%d", i, s.base.Load(), s.mask.Load(), &s.slots[0], len(s.slots))
			}
		}
		s.mu.Unlock()
	}
	if grown == 0 {
		t.Fatal("no shard grew")
	}
}

// TestGCRACompactKeepsKeysFindable builds shards of random layouts, with
// keys in clusters, tombstones and empty slots, compacts them, and checks
// that every key is still found where its probe sequence leads and that
// no tombstone is left.
func TestGCRACompactKeepsKeysFindable(t *testing.T) {
	g := NewGCRA(1, time.Hour)
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 20_000 {
		size := []int{4, 8, 16, 32}[rng.IntN(4)]
		s := &gcraShard{}
		s.setSlots(make([]gcraSlot, size))
		var keys []uint64
		// Insert keys and delete some, as the table does, with at least
		// one slot never used.
		for range rng.IntN(3 * size) {
			if int(s.used) >= size-1 {
				break
			}
			if len(keys) > 0 && rng.IntN(3) == 0 {
				j := rng.IntN(len(keys))
				i, _ := s.lookup(g, keys[j], math.MinInt64)
				s.slots[i].tag = tombstone
				s.held--
				keys = slices.Delete(keys, j, j+1)
				continue
			}
			tag := g.tagOf(uint64(rng.IntN(size)) | uint64(rng.IntN(1<<20))<<8)
			if i, _ := s.lookup(g, tag, math.MinInt64); i >= 0 {
				continue
			}
			_, free := s.lookup(g, tag, math.MinInt64)
			if s.slots[free].tag == 0 {
				s.used++
			}
			s.held++
			s.put(g, free, tag, gcra.Time{NS: 1 << 40}, 0)
			keys = append(keys, tag)
		}
		layout := fmt.Sprint(s.slots)
		s.compact(g, 0)
		for _, tag := range keys {
			if i, _ := s.lookup(g, tag, math.MinInt64); i < 0 {
				t.Fatalf("trial %d: key %x lost by compacting %s into %v", trial, tag, layout, s.slots)
			}
		}
		for i, e := range s.slots {
			if e.tag == tombstone {
				t.Fatalf("trial %d: tombstone left at %d: %v", trial, i, s.slots)
			}
		}
		if int(s.used) != len(keys) || int(s.held) != len(keys) {
			t.Fatalf("trial %d: used %d, held %d, keys %d", trial, s.used, s.held, len(keys))
		}
	}
}

// TestGCRASetLimit checks the rule a change of limit keeps: each key keeps
// its TAT, so a key that owes more than a stricter limit's burst waits
// until it owes no more, and a change never hands out a fresh burst; the
// decisions after it carry the new limit, and refunds of decisions before
// it give back what they charged.
func TestGCRASetLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGCRA(100, time.Second) // T 10ms, burst 100
		if d := g.AllowN("k", 100); !d.Allowed {
			t.Fatal(d)
		}
		early := g.AllowN("j", 50)                             // to refund after the change
		if err := g.SetLimit(10, time.Second, 5); err != nil { // T 100ms, burst 5: D 500ms
			t.Fatal(err)
		}
		if g.Limit() != 10 || g.Burst() != 5 || g.Period() != time.Second {
			t.Errorf("limit %d/%v burst %d", g.Limit(), g.Period(), g.Burst())
		}
		// j's refund of a charge of 50 at 10ms gives back 500ms.
		before := g.Peek("j")
		g.Refund(context.Background(), "j", early)
		after := g.Peek("j")
		if before.ResetAfter-after.ResetAfter != 500*time.Millisecond {
			t.Errorf("refund across the change: reset %v then %v, want 500ms less", before.ResetAfter, after.ResetAfter)
		}
		// k owes 1s, twice the new burst: it waits until it owes 400ms.
		d := g.Allow("k")
		if d.Allowed || d.RetryAfter != 600*time.Millisecond || d.Limit != 10 || d.Burst != 5 || !d.At.Equal(time.Now()) {
			t.Errorf("k after a stricter limit: %+v, want refused for 600ms", d)
		}
		time.Sleep(600 * time.Millisecond)
		if d := g.Allow("k"); !d.Allowed || d.Remaining != 0 {
			t.Errorf("k once it owes the new burst less one: %+v", d)
		}
		// A new key gets the new burst, no more.
		n := 0
		for g.Allow("new").Allowed {
			n++
		}
		if n != 5 {
			t.Errorf("a new key: %d allowed, want the new burst of 5", n)
		}
		// A looser limit gives only the room it adds: k owes 500ms (its
		// burst of 5 at 100ms); at 100 a second with a burst of 100 (D 1s),
		// it may make 50 more requests now, not 100.
		if err := g.SetLimit(100, time.Second, 0); err != nil {
			t.Fatal(err)
		}
		n = 0
		for g.Allow("k").Allowed {
			n++
		}
		if n != 50 {
			t.Errorf("k after a looser limit: %d allowed, want 50", n)
		}
		for _, bad := range [][3]int{{0, 1, 1}, {1, 0, 1}, {1, 1, -1}} {
			if err := g.SetLimit(bad[0], time.Duration(bad[1])*time.Second, bad[2]); err == nil {
				t.Errorf("SetLimit(%v) accepted", bad)
			}
		}
		if g.Limit() != 100 {
			t.Errorf("a refused SetLimit changed the limit to %d", g.Limit())
		}
	})
}

// TestGCRASetLimitConcurrent changes the limit again and again while many
// goroutines decide and refund, under -race: nothing panics, no key is
// allowed more than the loosest limit allows, and every key's state stays
// within what a limit allows.
func TestGCRASetLimitConcurrent(t *testing.T) {
	g := NewGCRA(1000, time.Second, WithMaxKeys(500))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				return
			default:
			}
			g.SetLimit(1+rng.IntN(2000), time.Duration(1+rng.IntN(3))*time.Second, 1+rng.IntN(50))
		}
	})
	for w := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			for range 5000 {
				k := strconv.Itoa(rng.IntN(600))
				d := g.AllowN(k, rng.IntN(5))
				if d.Allowed && rng.IntN(3) == 0 {
					g.Refund(context.Background(), k, d)
				}
				if d.Remaining > d.Burst || d.Reason == reasonAllowed != d.Allowed {
					t.Errorf("%s: %+v", k, d)
					return
				}
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	if g.Len() > 500 {
		t.Errorf("%d keys held, above the cap", g.Len())
	}
}
