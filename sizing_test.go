package limits

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestSizingDims(t *testing.T) {
	tests := []struct {
		s             Sizing
		hashes, slots int
	}{
		// Failure 0.02: 4 hashes, each row failing with probability at
		// most 50^(-1/4), so q = 50^(1/4) = 2.6591...
		{Sizing{Keys: 10000}, 4, 26589},                                 // q*9999 = 26588.8
		{Sizing{MaxOverFraction: 0.001}, 4, 2660},                       // q/0.001 = 2659.1
		{Sizing{Keys: 10000, MaxOverFraction: 0.001}, 4, 2660},          // the smaller of both
		{Sizing{Keys: 1000, MaxOverFraction: 0.0001}, 4, 2657},          // q*999 = 2656.5
		{Sizing{Keys: 100, Events: 1000000, MaxOver: 99}, 4, 264},       // q*99 = 263.3 beats q*1e6/100
		{Sizing{Events: 1000000, MaxOver: 99}, 4, 26592},                // q*1e6/100 = 26591.5
		{Sizing{Events: 1000, MaxOver: 0}, 4, 2660},                     // exact: more than 0 means at least 1
		{Sizing{Keys: 1}, 4, 1},                                         // one key never collides
		{Sizing{MaxOverFraction: 1}, 4, 3},                              // q/1
		{Sizing{MaxOverFraction: 0.01, Failure: 0.5}, 1, 200},           // 1 hash, q = 2
		{Sizing{MaxOverFraction: 0.01, Failure: math.Exp(-4)}, 4, 272},  // q = e exactly
		{Sizing{Keys: 1001, Failure: 0.01}, 5, 2512},                    // q = 100^(1/5) = 2.5119
		{Sizing{MaxOverFraction: 0.001, Failure: 0.999}, 1, 1002},       // q = 1/0.999
		{Sizing{Keys: 10, MaxOverFraction: 0.5, Failure: 1e-9}, 21, 6},  // q = 1e9^(1/21) = 2.68
		{Sizing{Keys: 50, Events: 10, MaxOver: 1000000}, 4, 1},          // tolerance above N
		{Sizing{Keys: 50, MaxOverFraction: 0.25, Failure: 0.02}, 4, 11}, // q/0.25 = 10.6
	}
	for _, tt := range tests {
		h, s, err := tt.s.Dims()
		if err != nil || h != tt.hashes || s != tt.slots {
			t.Errorf("%+v.Dims() = %d, %d, %v, want %d, %d, nil", tt.s, h, s, err, tt.hashes, tt.slots)
		}
	}
}

func TestSizingErrors(t *testing.T) {
	tests := []struct {
		s    Sizing
		want string
	}{
		{Sizing{}, "limits: Sizing needs Keys, a tolerance, or both"},
		{Sizing{Failure: 0.1}, "limits: Sizing needs Keys, a tolerance, or both"},
		{Sizing{Keys: -1}, "limits: Sizing.Keys must be >= 0, got -1"},
		{Sizing{Keys: 10, Events: -5}, "limits: Sizing.Events must be >= 0, got -5"},
		{Sizing{Keys: 10, Events: 5, MaxOver: -1}, "limits: Sizing.MaxOver must be >= 0, got -1"},
		{Sizing{MaxOverFraction: -0.1}, "limits: Sizing.MaxOverFraction must be in [0, 1], got -0.1"},
		{Sizing{MaxOverFraction: 1.5}, "limits: Sizing.MaxOverFraction must be in [0, 1], got 1.5"},
		{Sizing{MaxOverFraction: math.NaN()}, "limits: Sizing.MaxOverFraction must be in [0, 1], got NaN"},
		{Sizing{Keys: 10, Failure: 1}, "limits: Sizing.Failure must be in [0, 1), got 1"},
		{Sizing{Keys: 10, Failure: -0.5}, "limits: Sizing.Failure must be in [0, 1), got -0.5"},
		{Sizing{Keys: 10, Failure: math.NaN()}, "limits: Sizing.Failure must be in [0, 1), got NaN"},
		{Sizing{MaxOverFraction: 0.1, Events: 10}, "limits: Sizing takes MaxOverFraction or Events with MaxOver, not both"},
		{Sizing{Keys: 10, MaxOver: 5}, "limits: Sizing.MaxOver needs Sizing.Events"},
		{Sizing{MaxOverFraction: 5e-324}, "limits: Sizing needs 4 hashes x +Inf slots, more than the 1 GiB a sketch may take"},
		{Sizing{Keys: math.MaxInt}, "limits: Sizing needs 4 hashes x 24526310829800947712 slots, more than the 1 GiB a sketch may take"},
		{Sizing{Keys: 1 << 40}, "limits: Sizing needs 4 hashes x 2923764089320 slots, more than the 1 GiB a sketch may take"},
		{Sizing{Keys: 50_000_000}, "limits: Sizing needs 4 hashes x 132957395 slots, more than the 1 GiB a sketch may take"},
	}
	for _, tt := range tests {
		h, s, err := tt.s.Dims()
		if err == nil || err.Error() != tt.want {
			t.Errorf("%+v.Dims() = %d, %d, %v, want error %q", tt.s, h, s, err, tt.want)
		}
	}
}

func TestSizingAsOption(t *testing.T) {
	s := Sizing{Keys: 1000, MaxOverFraction: 0.01} // 4 x 266
	const want = 4 * 266 * 8
	tests := []struct {
		name string
		size int
	}{
		{"NewRate", NewRate(time.Second, s).Size() / 2},
		{"NewRate, conservative", NewRate(time.Second, Sizing{Keys: 1000, MaxOverFraction: 0.01, Conservative: true}).Size() / 2},
		{"NewInflight", NewInflight(s).Size()},
		{"NewRate, outright", NewRate(time.Second, Sizing{Hashes: 4, Slots: 266}).Size() / 2},
		{"NewInflight, outright", NewInflight(Sizing{Hashes: 4, Slots: 266}).Size()},
		{"NewRate, default", NewRate(time.Second).Size() / 2 * 266 / 4096},
		{"NewRate, conservative default", NewRate(time.Second, Sizing{Conservative: true}).Size() / 2 * 266 / 4096},
		{"NewInflight, default", NewInflight().Size() * 266 / 8192},
	}
	for _, tt := range tests {
		if tt.size != want {
			t.Errorf("%s(%+v): %d bytes per sketch, want %d", tt.name, s, tt.size, want)
		}
	}
	bad := Sizing{Keys: 10, Failure: 2}
	wantMsg := "limits: Sizing.Failure must be in [0, 1), got 2"
	for name, f := range map[string]func(){
		"NewRate":     func() { NewRate(time.Second, bad) },
		"NewInflight": func() { NewInflight(bad) },
	} {
		if got := mustPanic(t, f); got != wantMsg {
			t.Errorf("%s(%+v) panicked with %q, want %q", name, bad, got, wantMsg)
		}
	}
	for name, f := range map[string]func(){
		"limits: WithBurst does not apply to a Rate":        func() { NewRate(time.Second, WithBurst(3)) },
		"limits: WithMaxKeys does not apply to an Inflight": func() { NewInflight(WithMaxKeys(3)) },
		"limits: WithBurst does not apply to an Estimator":  func() { NewEstimator(1, 1, WithBurst(3)) },
		"limits: a Sizing does not apply to a GCRA":         func() { NewGCRA(1, time.Second, s) },
		"limits: interval must be > 0, got 0s":              func() { NewRate(0, s) },
	} {
		if got := mustPanic(t, f); got != name {
			t.Errorf("panicked with %q, want %q", got, name)
		}
	}
	if _, err := newGCRA(1, time.Second, []Option{s}); err == nil {
		t.Errorf("newGCRA with a Sizing: no error")
	}
}

func TestSizingOutright(t *testing.T) {
	for _, tt := range []struct {
		s    Sizing
		want string
	}{
		{Sizing{Hashes: 4}, "limits: Sizing.Slots must be >= 1, got 0"},
		{Sizing{Slots: 4}, "limits: Sizing.Hashes must be >= 1, got 0"},
		{Sizing{Hashes: 4, Slots: 8, Keys: 10}, "limits: Sizing takes Hashes and Slots or an accuracy, not both"},
		{Sizing{Hashes: 17, Slots: 8, Conservative: true}, "limits: a conservative sketch takes at most 16 hashes, got 17"},
		{Sizing{Hashes: 8, Slots: 1 << 25}, "limits: 8 hashes x 33554432 slots need more than the 1 GiB a sketch may take"},
	} {
		if h, w, err := tt.s.Dims(); err == nil || err.Error() != tt.want {
			t.Errorf("%+v.Dims() = %d, %d, %v; want %q", tt.s, h, w, err, tt.want)
		}
	}
	if h, w, err := (Sizing{Hashes: 3, Slots: 5}).Dims(); h != 3 || w != 5 || err != nil {
		t.Errorf("Dims of 3 x 5 = %d, %d, %v", h, w, err)
	}
}

// TestSizingKeepsItsPromise counts skewed random workloads in sketches sized
// for them, in both modes, and checks against exact counts that the share of
// keys over the tolerance stays within Failure. The bounds are loose, so
// the shares found are far below it except for exact counts, where the bound
// is within a factor of two of the truth.
func TestSizingKeepsItsPromise(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	const keys = 3000
	counts := make([]int64, keys)
	var events int64
	for i := range counts {
		counts[i] = 1 + int64(5000/(i+1)) + rng.Int64N(5)
		events += counts[i]
	}
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("user-%d", i)
	}
	tests := []struct {
		s         Sizing
		tolerance int64
	}{
		{Sizing{Keys: keys, Failure: 0.05}, 0},
		{Sizing{Keys: keys, Failure: 0.2}, 0},
		{Sizing{MaxOverFraction: 0.002, Failure: 0.05}, int64(0.002 * float64(events))},
		{Sizing{Events: events, MaxOver: 5}, 5},
	}
	for _, tt := range tests {
		for _, conservative := range []bool{false, true} {
			over := 0
			const trials = 2
			for range trials {
				h, w, err := tt.s.Dims()
				if err != nil {
					t.Fatal(err)
				}
				c := NewEstimator(h, w, Sizing{Conservative: conservative})
				// Increments in rounds, so that keys interleave.
				left := append([]int64(nil), counts...)
				for more := true; more; {
					more = false
					for i, n := range left {
						if n > 0 {
							d := min(n, 1+rng.Int64N(3))
							c.Incr(names[i], d)
							left[i] -= d
							more = more || left[i] > 0
						}
					}
				}
				for i, n := range counts {
					got := c.Get(names[i])
					if got < n {
						t.Fatalf("%+v: Get(%s) = %d, below the true count %d", tt.s, names[i], got, n)
					}
					if got-n > tt.tolerance {
						over++
					}
				}
			}
			failure := tt.s.Failure
			if failure == 0 {
				failure = defaultFailure
			}
			share := float64(over) / (trials * keys)
			t.Logf("%+v conservative=%v: %.2f%% of keys over %d, %.0f%% allowed", tt.s, conservative, 100*share, tt.tolerance, 100*failure)
			if share > failure {
				t.Errorf("%+v conservative=%v: %.2f%% of keys over %d, more than the %.0f%% allowed", tt.s, conservative, 100*share, tt.tolerance, 100*failure)
			}
		}
	}
}

// TestSizingRateFromKeys checks the windows a Rate gets from its keys: a
// table at 6.5 keys a line and a sketch of the same memory, or, with a
// Limit above what an entry holds, one that counts every key exactly.
func TestSizingRateFromKeys(t *testing.T) {
	for _, tt := range []struct {
		s            Sizing
		lines, slots int
	}{
		{Sizing{}, 1024, 4096},
		{Sizing{Conservative: true}, 1024, 4096},
		{Sizing{Keys: 6656}, 1024, 4096}, // the default
		{Sizing{Keys: 10_000}, 1540, 6160},
		{Sizing{Keys: 1}, 4, 16},
		{Sizing{Keys: 10_000, Limit: countMax}, 1540, 6160},
		{Sizing{Keys: 10_000, Limit: countMax + 1}, 1540, 27182}, // e*9999 = 27180.5, rounded up to whole words
	} {
		r := NewRate(time.Second, tt.s)
		w := &r.win[0]
		if got := len(w.table) / lineWords; got != tt.lines || int(w.cols) != tt.slots || len(w.sk) != 4*tt.slots/2 {
			t.Errorf("%+v: %d lines and %d words of sketch, %d counters a row, want %d and 4 x %d", tt.s, got, len(w.sk), w.cols, tt.lines, tt.slots)
		}
		if want := 2 * 8 * (tt.lines*lineWords + 4*tt.slots/2); r.Size() != want {
			t.Errorf("%+v: Size() = %d, want %d", tt.s, r.Size(), want)
		}
	}
	if got := NewRate(time.Second).Size(); got != 256<<10 {
		t.Errorf("default Rate holds %d bytes, want 256 KiB", got)
	}
	for s, want := range map[Sizing]string{
		{Keys: 10, Limit: -1}: "limits: Sizing.Limit must be >= 0, got -1",
		{Keys: -1, Limit: 5}:  "limits: Sizing.Keys must be >= 0, got -1",
		{Limit: 5}:            "limits: Sizing.Limit sizes a Rate from Keys, and takes Keys with no accuracy",
		{Keys: 10, Limit: 5, MaxOverFraction: 0.1}: "limits: Sizing.Limit sizes a Rate from Keys, and takes Keys with no accuracy",
		{Hashes: 4, Slots: 8, Limit: 5}:            "limits: Sizing takes Hashes and Slots or an accuracy, not both",
		{Keys: 1 << 40}:                            "limits: Sizing for 1099511627776 keys needs 169155635044 lines of table and 4 x 676622540176 counters of sketch, more than the 1 GiB a window may take",
	} {
		if got := mustPanic(t, func() { NewRate(time.Second, s) }); got != want {
			t.Errorf("NewRate(%+v) panicked with %q, want %q", s, got, want)
		}
	}
	if _, _, err := (Sizing{Limit: 5}).Dims(); err == nil {
		t.Errorf("Dims of a Limit without Keys: no error")
	}
}

// TestRateSizingKeepsItsPromise replays workloads of the keys a Sizing
// was given, one event at a time in shuffled order, as a limiter would see
// them, and checks that fewer than 0.1% of the keys within a limit set at
// 2, 5 and 10 times the median count are refused.
func TestRateSizingKeepsItsPromise(t *testing.T) {
	rng := rand.New(rand.NewPCG(22, 22))
	for _, tt := range []struct {
		name  string
		keys  int
		count func(i int) int64
	}{
		{"zipf", 3000, func(i int) int64 { return max(10, int64(30000/(i+1))) }},
		{"lognormal", 20_000, func(int) int64 { return max(1, int64(math.Exp(3+rng.NormFloat64()))) }},
		{"bimodal", 20_000, func(int) int64 {
			if rng.IntN(100) == 0 {
				return 1000 + rng.Int64N(1000)
			}
			return 5 + rng.Int64N(20)
		}},
	} {
		r := NewRate(time.Hour, Sizing{Keys: tt.keys})
		counts := make([]int64, tt.keys)
		var events []int32
		for i := range counts {
			counts[i] = tt.count(i)
			for range counts[i] {
				events = append(events, int32(i))
			}
		}
		rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
		hashes := make([]uint64, tt.keys)
		for i := range hashes {
			hashes[i] = r.Hash(fmt.Appendf(nil, "key-%d", i))
		}
		top := make([]int64, tt.keys)
		for _, i := range events {
			top[i] = max(top[i], r.ObserveHash(hashes[i], 1))
		}
		sorted := slices.Clone(counts)
		slices.Sort(sorted)
		median := sorted[len(sorted)/2]
		for _, m := range []int64{2, 5, 10} {
			limit := m * median
			within, refused := 0, 0
			for i, c := range counts {
				if top[i] < c {
					t.Fatalf("%s: key %d estimated %d, below its %d events", tt.name, i, top[i], c)
				}
				if c <= limit {
					within++
					if top[i] > limit {
						refused++
					}
				}
			}
			share := float64(refused) / float64(within)
			t.Logf("%s, %d keys, L = %d: %d of %d keys within it refused", tt.name, tt.keys, limit, refused, within)
			if share >= 0.001 {
				t.Errorf("%s, %d keys, L = %d (%dx the median): %.3f%% of the keys within it refused, want under 0.1%%", tt.name, tt.keys, limit, m, 100*share)
			}
		}
	}
}
