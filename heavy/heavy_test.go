package heavy

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/limitsgo/limits"
)

// mustPanic runs f and returns the message of its panic, failing the test
// if it does not panic.
func mustPanic(t *testing.T, f func()) (msg string) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Errorf("no panic")
		}
		msg = fmt.Sprint(r)
	}()
	f()
	return ""
}

func TestNewPanics(t *testing.T) {
	tests := []struct {
		threshold int64
		capacity  int
		want      string
	}{
		{0, 10, "heavy: threshold must be >= 1, got 0"},
		{-3, 10, "heavy: threshold must be >= 1, got -3"},
		{5, 0, "heavy: capacity must be >= 1, got 0"},
	}
	for _, tt := range tests {
		if got := mustPanic(t, func() { New(tt.threshold, tt.capacity) }); got != tt.want {
			t.Errorf("New(%d, %d) panicked with %q, want %q", tt.threshold, tt.capacity, got, tt.want)
		}
	}
}

func TestHittersTable(t *testing.T) {
	hh := New(10, 2)
	offers := []struct {
		key             string
		estimate, n     int64
		wantLen         int
		wantTopKey      string
		wantTopExact    int64
		wantTopEstimate int64
	}{
		{"a", 9, 1, 0, "", 0, 0},    // below the threshold
		{"a", 10, 1, 1, "a", 1, 10}, // enters
		{"a", 12, 2, 1, "a", 3, 12},
		{"b", 11, 1, 2, "a", 3, 12},
		{"a", 11, 1, 2, "a", 4, 12}, // a lower estimate does not lower Estimate
		{"c", 10, 1, 2, "a", 4, 12}, // full; 10 <= b's 11: turned away
		{"c", 11, 1, 2, "a", 4, 12}, // 11 <= 11: turned away
		{"c", 20, 1, 2, "c", 1, 20}, // evicts b, the smallest
		{"b", 15, 1, 2, "c", 1, 20}, // 15 > a's 12: evicts a
	}
	for i, o := range offers {
		hh.Offer(o.key, o.estimate, o.n)
		top := hh.Top(10)
		if got := hh.Len(); got != o.wantLen || len(top) != o.wantLen {
			t.Fatalf("offer %d (%s, %d): Len %d, Top has %d, want %d", i, o.key, o.estimate, got, len(top), o.wantLen)
		}
		if o.wantLen > 0 {
			if got := top[0]; got.Key != o.wantTopKey || got.Exact != o.wantTopExact || got.Estimate != o.wantTopEstimate {
				t.Errorf("offer %d (%s, %d): Top()[0] = %+v, want {%s %d %d}", i, o.key, o.estimate, got, o.wantTopKey, o.wantTopEstimate, o.wantTopExact)
			}
		}
	}
	if got, want := hh.Top(10), []Hitter{{"c", 20, 1}, {"b", 15, 1}}; !slices.Equal(got, want) {
		t.Errorf("Top(10) = %v, want %v", got, want)
	}
	if got := hh.Top(1); len(got) != 1 || got[0].Key != "c" {
		t.Errorf("Top(1) = %v, want c only", got)
	}
	if got := hh.Top(-1); len(got) != 0 {
		t.Errorf("Top(-1) = %v, want none", got)
	}
	hh.Reset()
	if got := hh.Len(); got != 0 {
		t.Errorf("Len after Reset = %d", got)
	}
	hh.Offer("d", 10, 1) // the floor went with the table
	if got := hh.Top(5); len(got) != 1 || got[0] != (Hitter{"d", 10, 1}) {
		t.Errorf("Top after Reset and one offer = %v", got)
	}
}

// TestHittersAgainstExact runs a skewed stream through a sketch, in
// both modes, and the table, and checks every entry against exact counts: Exact is never
// above the true count and short of it by less than the threshold, and with
// room for every key over the threshold, each of them is named.
func TestHittersAgainstExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, conservative := range []bool{false, true} {
		sk := limits.NewEstimator(4, 256, limits.Sizing{Conservative: conservative})
		const threshold = 200
		hh := New(threshold, 1000)
		exact := map[string]int64{}
		for range 100000 {
			k := fmt.Sprintf("ip-%d", int(1000/(1+rng.Float64()*999))-1) // skewed over 1000 keys
			n := 1 + rng.Int64N(2)
			exact[k] += n
			hh.Offer(k, sk.Incr(k, n), n)
		}
		named := map[string]bool{}
		for _, h := range hh.Top(hh.Len()) {
			named[h.Key] = true
			if tc := exact[h.Key]; h.Exact > tc || h.Exact <= tc-threshold || h.Estimate < tc {
				t.Errorf("conservative=%v: %+v, true count %d", conservative, h, tc)
			}
		}
		for k, c := range exact {
			if c >= threshold && !named[k] {
				t.Errorf("conservative=%v: %s counted %d times, not named", conservative, k, c)
			}
		}
		if len(named) < 5 {
			t.Errorf("conservative=%v: only %d keys named; the test does not exercise the table", conservative, len(named))
		}
	}
}

// TestHittersKeepsTheLargest fills a small table with many keys over
// the threshold and checks that the heaviest keys hold their places.
func TestHittersKeepsTheLargest(t *testing.T) {
	e := limits.NewEstimator(4, 4096)
	hh := New(5, 8)
	rng := rand.New(rand.NewPCG(1, 1))
	// Four heavy keys among 500 that each pass the threshold.
	var stream []string
	for i := range 500 {
		n := 10
		if i < 4 {
			n = 1000
		}
		for range n {
			stream = append(stream, fmt.Sprintf("k%d", i))
		}
	}
	rng.Shuffle(len(stream), func(i, j int) { stream[i], stream[j] = stream[j], stream[i] })
	for _, k := range stream {
		hh.Offer(k, e.Incr(k, 1), 1)
	}
	top := hh.Top(4)
	var keys []string
	for _, h := range top {
		keys = append(keys, h.Key)
	}
	slices.Sort(keys)
	if want := []string{"k0", "k1", "k2", "k3"}; !slices.Equal(keys, want) {
		t.Errorf("top 4 = %v, want %v", top, want)
	}
	if got := hh.Len(); got != 8 {
		t.Errorf("Len = %d, want the capacity 8", got)
	}
}

// TestHittersConcurrent offers from many goroutines at once and checks
// that no entry counts more than was offered for its key.
func TestHittersConcurrent(t *testing.T) {
	c := limits.NewEstimator(4, 64, limits.Sizing{Conservative: true})
	hh := New(50, 4)
	var mu sync.Mutex
	exact := map[string]int64{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 2))
			for i := range 3000 {
				k := fmt.Sprintf("k%d", rng.IntN(30))
				mu.Lock()
				exact[k]++
				mu.Unlock()
				hh.Offer(k, c.Incr(k, 1), 1)
				if i%500 == 0 {
					hh.Top(3)
				}
			}
		})
	}
	wg.Wait()
	top := hh.Top(10)
	if len(top) != 4 {
		t.Errorf("Top(10) has %d keys, want the capacity 4", len(top))
	}
	for _, h := range top {
		if h.Exact > exact[h.Key] || h.Exact < 1 {
			t.Errorf("%+v: true count %d", h, exact[h.Key])
		}
	}
}

func TestHittersAllocs(t *testing.T) {
	hh := New(10, 4)
	hh.Offer("hot", 10, 1)
	for i := range 4 {
		hh.Offer(fmt.Sprint("big", i), 100, 1) // fill the table: hot is out
	}
	allocs := testing.AllocsPerRun(1000, func() {
		hh.Offer("cold", 3, 1)     // below the threshold
		hh.Offer("big0", 101, 1)   // in the table
		hh.Offer("hot", 20, 1)     // over the threshold, too small to enter
		hh.Offer("client-9", 9, 1) // below
	})
	if allocs != 0 {
		t.Errorf("Offer allocates %v times per run, want 0", allocs)
	}
}
