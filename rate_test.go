package limits

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestNewRatePanics(t *testing.T) {
	tests := []struct {
		name string
		f    func()
		want string
	}{
		{"zero interval", func() { NewRate(0) }, "limits: interval must be > 0, got 0s"},
		{"negative interval", func() { NewRate(-time.Second) }, "limits: interval must be > 0, got -1s"},
		{"zero hashes", func() { NewRate(time.Second, Sizing{Hashes: 0, Slots: 8}) }, "limits: Sizing.Hashes must be >= 1, got 0"},
		{"zero slots", func() { NewRate(time.Second, Sizing{Hashes: 4, Slots: 0}) }, "limits: Sizing.Slots must be >= 1, got 0"},
	}
	for _, tt := range tests {
		if got := mustPanic(t, tt.f); got != tt.want {
			t.Errorf("%s: panic %q, want %q", tt.name, got, tt.want)
		}
	}
}

// sleepTo sleeps until d after start, in a synctest bubble.
func sleepTo(start time.Time, d time.Duration) {
	time.Sleep(time.Until(start.Add(d)))
}

// TestRateFixedGrid checks that windows start at multiples of the interval
// from creation, not at whichever call comes first in a new window.
func TestRateFixedGrid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const iv = time.Second
		start := time.Now()
		r := NewRate(iv)
		sleepTo(start, 200*time.Millisecond)
		r.Observe("k", 1)
		sleepTo(start, 1500*time.Millisecond)
		r.Observe("k", 2) // window 1
		sleepTo(start, 2100*time.Millisecond)
		if got := r.Observe("k", 4); got != 4 { // first call in window 2
			t.Errorf("Observe at 2.1s = %d, want 4", got)
		}
		if got := r.ResetIn(); got != 900*time.Millisecond {
			t.Errorf("ResetIn at 2.1s = %v, want 900ms: window 2 ends at 3.0s", got)
		}
		if got := r.Rate("k"); got != 2 {
			t.Errorf("Rate at 2.1s = %v, want 2 (window 1)", got)
		}
		sleepTo(start, 2999*time.Millisecond)
		if got := r.Observe("k", 1); got != 5 {
			t.Errorf("Observe at 2.999s = %d, want 5: still window 2", got)
		}
		if got := r.ResetIn(); got != time.Millisecond {
			t.Errorf("ResetIn at 2.999s = %v, want 1ms", got)
		}
		sleepTo(start, 3000*time.Millisecond)
		if got := r.Peek("k"); got != 0 {
			t.Errorf("Peek at 3.0s = %d, want 0: window 3 has begun", got)
		}
		if got := r.Rate("k"); got != 5 {
			t.Errorf("Rate at 3.0s = %v, want 5 (window 2)", got)
		}
		if got := r.ResetIn(); got != iv {
			t.Errorf("ResetIn at 3.0s = %v, want %v", got, iv)
		}
	})
}

func TestRateAfterIdleWindows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRate(time.Second)
		r.Observe("k", 10)
		time.Sleep(time.Second)
		r.Observe("k", 20)
		if got := r.Rate("k"); got != 10 {
			t.Errorf("Rate after one window = %v, want 10", got)
		}
		time.Sleep(2 * time.Second) // windows 2 and 3 idle so far
		var c RateComponents
		r.RateWith("k", func(rc RateComponents) float64 { c = rc; return 0 })
		if c.Prev != 0 || c.Curr != 0 {
			t.Errorf("after an idle window: Prev %d, Curr %d, want 0, 0", c.Prev, c.Curr)
		}
		if got := r.Rate("k"); got != 0 {
			t.Errorf("Rate after an idle window = %v, want 0", got)
		}
		time.Sleep(5 * time.Second)
		// Both Estimators held stale counts; the first call clears both.
		if got := r.Observe("k", 1); got != 1 {
			t.Errorf("Observe after idle windows = %d, want 1", got)
		}
		if got := r.Rate("k"); got != 0 {
			t.Errorf("Rate after idle windows = %v, want 0", got)
		}
		time.Sleep(time.Second)
		if got := r.Rate("k"); got != 1 {
			t.Errorf("Rate one window later = %v, want 1", got)
		}
		time.Sleep(time.Second)
		if got := r.Observe("k", 0); got != 0 {
			t.Errorf("Observe(k, 0) two windows later = %d, want 0", got)
		}
	})
}

func TestRateComponents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		r := NewRate(2 * time.Second)
		r.Observe("k", 6)
		sleepTo(start, 2500*time.Millisecond)
		r.Observe("k", 3)
		r.Observe("other", 100)
		var got RateComponents
		r.RateWith("k", func(c RateComponents) float64 { got = c; return 0 })
		want := RateComponents{Prev: 6, Curr: 3, Interval: 2 * time.Second, Fraction: 0.25}
		if got != want {
			t.Errorf("components at 2.5s = %+v, want %+v", got, want)
		}
		// (6*(1-0.25) + 3) / 2
		if p := r.RateWith("k", RateComponents.Proportional); p != 3.75 {
			t.Errorf("Proportional = %v, want 3.75", p)
		}
		if p := r.Peek("k"); p != 3 {
			t.Errorf("Peek = %d, want 3", p)
		}
	})
}

// TestRatePingora9010 replays pingora-limits' test_observe_rate_custom_90_10.
func TestRatePingora9010(t *testing.T) {
	weighted := func(c RateComponents) float64 {
		return (float64(c.Prev)*0.1 + float64(c.Curr)*0.9) / c.Interval.Seconds()
	}
	synctest.Test(t, func(t *testing.T) {
		r := NewRate(time.Second)
		if got := r.Observe("k", 3); got != 3 {
			t.Errorf("Observe = %d, want 3", got)
		}
		if got := r.Observe("k", 2); got != 5 {
			t.Errorf("Observe = %d, want 5", got)
		}
		if got := r.RateWith("k", weighted); got != 5*0.9 {
			t.Errorf("second 0: %v, want %v", got, 5*0.9)
		}
		time.Sleep(time.Second)
		if got := r.Observe("k", 4); got != 4 {
			t.Errorf("Observe in second 1 = %d, want 4", got)
		}
		if got := r.RateWith("k", weighted); got != 5*0.1+4*0.9 {
			t.Errorf("second 1: %v, want %v", got, 5*0.1+4*0.9)
		}
		time.Sleep(time.Second)
		if got := r.RateWith("k", weighted); got != 4*0.1 {
			t.Errorf("second 2: %v, want %v", got, 4*0.1)
		}
		time.Sleep(time.Second)
		if got := r.RateWith("k", weighted); got != 0 {
			t.Errorf("second 3: %v, want 0", got)
		}
	})
}

// TestRatePingoraProportional replays pingora-limits'
// test_observe_rate_custom_proportional. pingora compares within 0.15, as
// its clock moves; in a synctest bubble the values are exact.
func TestRatePingoraProportional(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRate(time.Second)
		check := func(when string, got, want float64) {
			t.Helper()
			if got != want {
				t.Errorf("%s: %v, want %v", when, got, want)
			}
		}
		check("observe", float64(r.Observe("k", 3)), 3)
		check("observe", float64(r.Observe("k", 2)), 5)
		check("second 0 proportional", r.RateWith("k", RateComponents.Proportional), 5)
		time.Sleep(500 * time.Millisecond)
		check("second 0.5 proportional", r.RateWith("k", RateComponents.Proportional), 5)
		check("second 0.5 rate", r.Rate("k"), 0)
		time.Sleep(500 * time.Millisecond)
		check("observe", float64(r.Observe("k", 4)), 4)
		check("second 1 proportional", r.RateWith("k", RateComponents.Proportional), 9)
		time.Sleep(750 * time.Millisecond)
		check("second 1.75 proportional", r.RateWith("k", RateComponents.Proportional), 5*0.25+4)
		time.Sleep(250 * time.Millisecond)
		check("second 2 proportional", r.RateWith("k", RateComponents.Proportional), 4)
		check("second 2 rate", r.Rate("k"), 4)
		time.Sleep(500 * time.Millisecond)
		check("second 2.5 proportional", r.RateWith("k", RateComponents.Proportional), 4.0/2)
		check("second 2.5 rate", r.Rate("k"), 4)
		time.Sleep(time.Second)
		check("second 3.5 proportional", r.RateWith("k", RateComponents.Proportional), 0)
	})
}

// TestRateStaleCallerNeverClears plays the interleaving in which pingora
// clears a completed window: a caller that read the clock before another
// changed the window comes back late. Here it can neither change the window
// again nor clear anything.
func TestRateStaleCallerNeverClears(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRate(time.Second)
		r.Observe("k", 5)
		time.Sleep(time.Second)
		r.Observe("k", 3) // changes to window 1
		for _, stale := range []time.Duration{500 * time.Millisecond, time.Second, 1900 * time.Millisecond} {
			r.advance(stale) // read the clock then, before that change
			if got := r.Rate("k"); got != 5 {
				t.Errorf("after a late advance(%v): Rate = %v, want 5", stale, got)
			}
			if got := r.Peek("k"); got != 3 {
				t.Errorf("after a late advance(%v): Peek = %d, want 3", stale, got)
			}
		}
		if c, f := r.cur.Load(), r.claimed.Load(); c != 1 || f != 1 {
			t.Errorf("window = %d (claimed %d), want 1", c, f)
		}
	})
}

// TestRateStalledClaimer plays a change of window whose claimer stops before
// zeroing anything: the next caller does the work and publishes the window,
// so the window's events are counted in it and not lost at the next change.
func TestRateStalledClaimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		r := NewRate(time.Second)
		r.Observe("k", 5)
		sleepTo(start, time.Second)
		r.claimed.Store(1) // claimed window 1, then descheduled
		sleepTo(start, 1100*time.Millisecond)
		if got := r.Observe("k", 3); got != 3 {
			t.Errorf("after the stalled claim: Observe = %d, want 3 (in window 1)", got)
		}
		if c := r.cur.Load(); c != 1 {
			t.Errorf("window = %d, want 1", c)
		}
		r.flip(1) // the claimer wakes up: nothing left to do
		if got := r.Peek("k"); got != 3 {
			t.Errorf("after the claimer resumed: Peek = %d, want 3", got)
		}
		sleepTo(start, 2*time.Second)
		if got := r.Rate("k"); got != 3 {
			t.Errorf("Rate of window 1 = %v, want 3", got)
		}
	})
}

// TestRateFlipSharedWork has a caller zero only part of the chunks of a
// change, as if descheduled, and checks that the next caller zeroes the rest
// and that the stale counts are gone.
func TestRateFlipSharedWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRate(time.Second, Sizing{Hashes: 2, Slots: 512})
		for i := range 1000 {
			r.Observe(fmt.Sprintf("k%d", i), 7) // window 0
		}
		time.Sleep(time.Second)
		r.Observe("x", 0) // window 1
		time.Sleep(time.Second)
		// Window 2 reuses Estimator 0, still holding window 0's counts.
		r.claimed.Store(2)
		for i := 0; i < len(r.cleared[0]); i += 2 {
			r.cleared[0][i].Store(2) // marked done, but never zeroed: a lie
		}
		r.Observe("x", 0) // finishes the change
		stale := 0
		for i := range 1000 {
			if r.Peek(fmt.Sprintf("k%d", i)) != 0 {
				stale++
			}
		}
		// The chunks marked done were skipped; the others were zeroed.
		if stale == 0 || stale == 1000 {
			t.Errorf("%d keys kept window 0's counts; want some (the chunks marked done) but not all", stale)
		}
		for i := range r.cleared[0] {
			if got := r.cleared[0][i].Load(); got != 2 {
				t.Fatalf("chunk %d cleared for window %d, want 2", i, got)
			}
		}
	})
}

// TestRateLateZeroingSparesLiveCounts plays a caller that read a chunk of
// counters for a change of window, checked that the change was wanted, and
// was descheduled until the Estimator held a completed window: when it
// resumes, its swaps fail and the window's counts survive.
func TestRateLateZeroingSparesLiveCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRate(time.Second, Sizing{Hashes: 2, Slots: 256})
		keys := make([]string, 300)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%d", i)
			r.Observe(keys[i], 5) // window 0, Estimator 0
		}
		time.Sleep(time.Second)
		r.Observe("x", 0) // window 1
		time.Sleep(time.Second)
		// The late caller reads a chunk of Estimator 0 for the change to 2.
		var seen [clearChunk]int64
		cells := r.win[0].cells[:clearChunk]
		for n := range cells {
			seen[n] = cells[n].Load()
		}
		r.Observe("x", 0) // another caller makes the change
		for _, k := range keys {
			r.Observe(k, 3) // window 2
		}
		time.Sleep(time.Second)
		r.Observe("x", 0) // window 3: window 2 is the completed one
		before := make([]float64, len(keys))
		for i, k := range keys {
			if before[i] = r.Rate(k); before[i] < 3 {
				t.Fatalf("Rate(%s) = %v, below the 3 observed", k, before[i])
			}
		}
		r.swap(2, 2, cells, &seen, r.win[0].blank(0, r.tagOf(2)))
		for i, k := range keys {
			if got := r.Rate(k); got != before[i] {
				t.Errorf("Rate(%s) = %v after the late caller resumed, was %v", k, got, before[i])
			}
		}
	})
}

// TestRateCompletedWindowKept checks, at many instants of a window, that the
// window before it still reads in full.
func TestRateCompletedWindowKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRate(100 * time.Millisecond)
		want := int64(0)
		for w := range 5 {
			n := int64(0)
			for range 10 {
				n += int64(w + 1)
				if got := r.Observe("k", int64(w+1)); got != n {
					t.Fatalf("window %d: Observe = %d, want %d", w, got, n)
				}
				if got := r.Rate("k"); got != float64(want)*10 {
					t.Fatalf("window %d: Rate = %v, want %v", w, got, float64(want)*10)
				}
				time.Sleep(10 * time.Millisecond)
			}
			want = n
		}
	})
}

// rateModel is a locked reference for Rate: exact counts per window, with
// the same grid.
type rateModel struct {
	mu     sync.Mutex
	start  time.Time
	iv     time.Duration
	counts map[int64]map[string]int64
}

func newRateModel(iv time.Duration) *rateModel {
	return &rateModel{start: time.Now(), iv: iv, counts: map[int64]map[string]int64{}}
}

func (m *rateModel) window() int64 { return int64(time.Since(m.start) / m.iv) }

func (m *rateModel) observe(k string, n int64) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.window()
	if m.counts[w] == nil {
		m.counts[w] = map[string]int64{}
	}
	m.counts[w][k] += n
	return m.counts[w][k]
}

func (m *rateModel) get(w int64, k string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts[w][k]
}

// rateModes are the constructors of a Rate of each mode, for the tests that
// both must pass.
var rateModes = []struct {
	name string
	new  func(iv time.Duration, hashes, slots int) *Rate
}{
	{"plain", func(iv time.Duration, hashes, slots int) *Rate {
		return NewRate(iv, Sizing{Hashes: hashes, Slots: slots})
	}},
	{"conservative", func(iv time.Duration, hashes, slots int) *Rate {
		return NewRate(iv, Sizing{Hashes: hashes, Slots: slots, Conservative: true})
	}},
}

// TestRateAgainstModel drives a Rate and the reference with the same random
// sequence of calls and pauses, and compares every answer.
func TestRateAgainstModel(t *testing.T) {
	for seed := range uint64(10) {
		mode := rateModes[seed%2]
		synctest.Test(t, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			iv := time.Duration(1+rng.IntN(1000)) * time.Millisecond
			r := mode.new(iv, 4, 1024)
			m := newRateModel(iv)
			for i := range 2000 {
				k := fmt.Sprintf("k%d", rng.IntN(20))
				switch rng.IntN(4) {
				case 0:
					time.Sleep(time.Duration(rng.Int64N(int64(iv) * 3 / 2)))
				case 1:
					n := rng.Int64N(10)
					if got, want := r.Observe(k, n), m.observe(k, n); got != want {
						t.Fatalf("%s seed %d step %d: Observe(%s, %d) = %d, want %d", mode.name, seed, i, k, n, got, want)
					}
				default:
					w := m.window()
					var c RateComponents
					r.RateWith(k, func(rc RateComponents) float64 { c = rc; return 0 })
					if c.Prev != m.get(w-1, k) || c.Curr != m.get(w, k) {
						t.Fatalf("%s seed %d step %d: %s: Prev %d Curr %d, want %d %d", mode.name, seed, i, k, c.Prev, c.Curr, m.get(w-1, k), m.get(w, k))
					}
					if got, want := r.Rate(k), float64(m.get(w-1, k))/iv.Seconds(); got != want {
						t.Fatalf("%s seed %d step %d: Rate(%s) = %v, want %v", mode.name, seed, i, k, got, want)
					}
				}
			}
		})
	}
}

// TestRateConcurrentAgainstModel has many goroutines observe within each
// window and compares the totals with the reference.
func TestRateConcurrentAgainstModel(t *testing.T) {
	for _, mode := range rateModes {
		synctest.Test(t, func(t *testing.T) {
			testRateConcurrentAgainstModel(t, mode.name, mode.new(time.Second, 4, 4096))
		})
	}
}

// testRateConcurrentAgainstModel is TestRateConcurrentAgainstModel for one
// Rate, made in the test's bubble.
func testRateConcurrentAgainstModel(t *testing.T, mode string, r *Rate) {
	const iv = time.Second
	m := newRateModel(iv)
	for w := range 4 {
		r.Observe("k0", 0) // start the window before the workers race
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), uint64(w)))
				for range 500 {
					k := fmt.Sprintf("k%d", rng.IntN(10))
					n := rng.Int64N(4)
					r.Observe(k, n)
					m.observe(k, n)
				}
			})
		}
		wg.Wait()
		for i := range 10 {
			k := fmt.Sprintf("k%d", i)
			if got, want := r.Peek(k), m.get(int64(w), k); got != want {
				t.Errorf("%s window %d: Peek(%s) = %d, want %d", mode, w, k, got, want)
			}
			if got, want := r.Rate(k), float64(m.get(int64(w-1), k)); got != want {
				t.Errorf("%s window %d: Rate(%s) = %v, want %v", mode, w, k, got, want)
			}
		}
		time.Sleep(iv)
	}
}

// TestRateShortIntervals uses intervals down to a nanosecond; pingora
// truncates them to milliseconds and divides by zero below one.
func TestRateShortIntervals(t *testing.T) {
	for _, iv := range []time.Duration{time.Nanosecond, 7 * time.Nanosecond, time.Microsecond, 500 * time.Microsecond} {
		synctest.Test(t, func(t *testing.T) {
			r := NewRate(iv)
			r.Observe("k", 3)
			time.Sleep(iv)
			r.Observe("k", 1)
			if got, want := r.Rate("k"), 3/iv.Seconds(); got != want {
				t.Errorf("interval %v: Rate = %v, want %v", iv, got, want)
			}
			if got := r.RateWith("k", RateComponents.Proportional); math.IsNaN(got) || math.IsInf(got, 0) {
				t.Errorf("interval %v: Proportional = %v", iv, got)
			}
			if got := r.ResetIn(); got != iv {
				t.Errorf("interval %v: ResetIn = %v", iv, got)
			}
		})
	}
}

// TestRateStressFromCreation runs 8 goroutines on a 10ms Rate from the moment
// it is created, the case in which pingora panics in most threads, and checks
// every answer for sanity.
func TestRateStressFromCreation(t *testing.T) {
	r := NewRate(10 * time.Millisecond)
	deadline := time.Now().Add(150 * time.Millisecond)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			k := fmt.Sprintf("k%d", g%3)
			for time.Now().Before(deadline) {
				if got := r.Observe(k, 1); got < 1 {
					t.Errorf("Observe(%s, 1) = %d", k, got)
					return
				}
				if got := r.Rate(k); got < 0 || math.IsNaN(got) {
					t.Errorf("Rate(%s) = %v", k, got)
					return
				}
				if got := r.ResetIn(); got <= 0 || got > 10*time.Millisecond {
					t.Errorf("ResetIn = %v", got)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestRateSteadyLoadNeverReadsZero keeps one key busy from several goroutines
// while a reader samples Rate every millisecond. Whenever the reference says
// the latest completed window saw events, Rate must not read 0: that is what
// a window cleared before its time looks like.
func TestRateSteadyLoadNeverReadsZero(t *testing.T) {
	// In a bubble, so that a loaded machine changes nothing: eight writers
	// observe at their own cadences, waking together at window changes as
	// often as not, and a reader samples at steps that fall on every offset
	// into a window, window changes included.
	synctest.Test(t, func(t *testing.T) {
		const iv = 10 * time.Millisecond
		r := NewRate(iv)
		var seen [1024]atomic.Int64 // events per window, by the writers' clocks
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 8 {
			step := time.Duration(40+w*23) * time.Microsecond
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					k, _ := r.position()
					seen[k%1024].Add(1)
					r.Observe("hot", 1)
					time.Sleep(step)
				}
			})
		}
		time.Sleep(3 * iv) // warm up
		checked := 0
		for i := range 400 {
			before, _ := r.position()
			got := r.Rate("hot")
			after, _ := r.position()
			// A sample taken within one window reports the one before it.
			if before == after && seen[(before-1)%1024].Load() >= 20 {
				checked++
				if got == 0 {
					t.Errorf("window %d: Rate read 0 after %d events in window %d", before, seen[(before-1)%1024].Load(), before-1)
				}
			}
			time.Sleep(time.Duration(700+i%7*100) * time.Microsecond)
		}
		close(stop)
		wg.Wait()
		if checked < 390 {
			t.Errorf("only %d of 400 samples could be checked", checked)
		}
	})
}

func TestRateAllocs(t *testing.T) {
	r := NewRate(time.Second)
	allocs := testing.AllocsPerRun(1000, func() {
		r.Observe("client-000123", 1)
		r.Rate("client-000123")
		r.RateWith("client-000123", RateComponents.Proportional)
		r.Peek("client-000123")
	})
	if allocs != 0 {
		t.Errorf("Observe, Rate, RateWith and Peek allocate %v times per run, want 0", allocs)
	}
}
