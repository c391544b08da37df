package adaptive_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
)

func mustGate(t testing.TB, n int) *limits.Gate {
	t.Helper()
	g, err := limits.NewGate(n)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestNewErrors(t *testing.T) {
	g := mustGate(t, 10)
	for _, tc := range []struct {
		name string
		g    *limits.Gate
		cfg  adaptive.Config
	}{
		{"nil gate", nil, adaptive.Config{}},
		{"negative Min", g, adaptive.Config{Law: adaptive.AIMD{}, Min: -1}},
		{"Min above Max", g, adaptive.Config{Min: 10, Max: 5}},
		{"negative Initial, default law", g, adaptive.Config{Initial: -1}},
		{"negative Window", g, adaptive.Config{Window: -time.Second}},
		{"negative Samples", g, adaptive.Config{Samples: -1}},
		{"negative History", g, adaptive.Config{History: -1}},
	} {
		if c, err := adaptive.New(tc.g, tc.cfg); c != nil || !errors.Is(err, adaptive.ErrConfig) {
			t.Errorf("%s: New = %v, %v; want an error wrapping ErrConfig", tc.name, c, err)
		}
	}
}

// recorder is a law that records the windows it is shown and answers with
// a limit set by the test.
type recorder struct {
	mu      sync.Mutex
	windows []adaptive.Window
	next    float64
}

func (r *recorder) Next(limit float64, w *adaptive.Window) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := *w
	r.windows = append(r.windows, c)
	if r.next == 0 {
		return limit
	}
	return r.next
}

// serve admits a request into c's gate, holds it for d, and reports it.
func serve(c *adaptive.Controller, d time.Duration, o adaptive.Outcome) bool {
	p, ok := c.Gate().TryEnter()
	if !ok {
		return false
	}
	start := time.Now()
	time.Sleep(d)
	c.Observe(time.Since(start), o)
	p.Release()
	return true
}

// TestControllerWindows drives a Controller without probes by hand and
// checks what its windows hold and when they end.
func TestControllerWindows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		law := &recorder{}
		g := mustGate(t, 8)
		c, err := adaptive.New(g, adaptive.Config{Law: law, Min: 2, Max: 50, Initial: 4, Window: 100 * time.Millisecond, Samples: 10, ProbeEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		if c.Limit() != 4 || g.Stats().Max != 4 {
			t.Fatalf("limit %d, gate %d, want the initial 4", c.Limit(), g.Stats().Max)
		}
		// A request admitted before the window began counts in none.
		early, _ := g.TryEnter()
		time.Sleep(time.Millisecond)
		c = mustNew(t, g, adaptive.Config{Law: law, Min: 2, Max: 50, Initial: 4, Window: 100 * time.Millisecond, Samples: 10, ProbeEvery: -1})
		// Four workers, each serving 10ms requests, for 100ms: the window
		// then has 40 samples less the one still in progress per worker,
		// and closes; it ends when those complete. Requests admitted at
		// the instant it closes, as others complete, count in it too, up
		// to one per place: 44 at most. Worker k starts k microseconds
		// after the window, so that no two report at one instant: the
		// bubble runs the goroutines woken at one instant at once, in an
		// order it does not fix, and a report that races the call ending
		// the window may count in it without its latency.
		var wg sync.WaitGroup
		var refused atomic.Int64
		for k := range 5 { // one more than the limit: refused now and then
			wg.Go(func() {
				time.Sleep(time.Duration(k) * time.Microsecond)
				for i := range 12 {
					o := adaptive.Success
					if i == 3 {
						o = adaptive.Dropped
					}
					if !serve(c, 10*time.Millisecond, o) {
						refused.Add(1)
						time.Sleep(10 * time.Millisecond)
					}
				}
			})
		}
		time.Sleep(5 * time.Millisecond)
		c.Observe(6*time.Millisecond, adaptive.Success) // early's: stale
		early.Release()
		wg.Wait()
		law.mu.Lock()
		defer law.mu.Unlock()
		if len(law.windows) != 1 {
			t.Fatalf("%d windows, want 1", len(law.windows))
		}
		w := law.windows[0]
		if n := w.Samples + w.Dropped; w.Limit != 4 || w.MaxInFlight != 4 || n < 30 || n > 44 || w.Dropped < 1 || w.Mean() != 10*time.Millisecond || w.Baseline != nil {
			t.Errorf("window %+v, mean %v", w, w.Mean())
		}
		if w.Refused == 0 || int64(w.Refused) > refused.Load() {
			t.Errorf("window Refused %d, %d refused in all", w.Refused, refused.Load())
		}
		if d := w.End.Sub(w.Start); d != 100*time.Millisecond {
			t.Errorf("window took admissions for %v, want 100ms", d)
		}
		s := c.Stats()
		if s.Windows != 1 || s.Samples != uint64(w.Samples) || s.Dropped != uint64(w.Dropped) || s.Stale == 0 || len(s.History) != 1 || !near(s.Last.P50, 10*time.Millisecond) {
			t.Errorf("Stats %+v", s)
		}
	})
}

func mustNew(t testing.TB, g *limits.Gate, cfg adaptive.Config) *adaptive.Controller {
	t.Helper()
	c, err := adaptive.New(g, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestControllerBounds checks that the limit a law asks for is clamped to
// [Min, Max], and that NaN keeps the limit.
func TestControllerBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		law := &recorder{next: 1000}
		g := mustGate(t, 4)
		c := mustNew(t, g, adaptive.Config{Law: law, Min: 2, Max: 6, Window: time.Millisecond, Samples: 1, ProbeEvery: -1})
		for _, want := range []int{6, 2, 2} {
			serve(c, 2*time.Millisecond, adaptive.Success)
			if got := g.Stats().Max; got != want || c.Limit() != want {
				t.Errorf("gate %d, limit %d, want %d", got, c.Limit(), want)
			}
			law.mu.Lock()
			switch law.next {
			case 1000:
				law.next = -5
			default:
				law.next = 0 / zero
			}
			law.mu.Unlock()
		}
	})
}

var zero = 0.0

// near reports whether d is within the histogram's resolution of want.
func near(d, want time.Duration) bool {
	return d >= want*7/8 && d <= want*9/8
}

// primes are 40 primes above 400, in nanoseconds.
var primes = func() (p []time.Duration) {
	for n := 401; len(p) < 40; n += 2 {
		prime := true
		for d := 3; d*d <= n; d += 2 {
			prime = prime && n%d != 0
		}
		if prime {
			p = append(p, time.Duration(n))
		}
	}
	return p
}()

// probeRun drives c's gate with 40 callers for d, each retrying a
// millisecond after a refusal (caller i starting at primes[i] and
// retrying primes[i] later: service times being whole milliseconds, no
// two callers act at the same instant, whose order the bubble does not
// fix, while none has been refused 400 times), against a service of capacity 10: past 10
// inside, each request takes a millisecond longer for each one more.
func probeRun(c *adaptive.Controller, capacity int, d time.Duration) {
	g := c.Gate()
	service := func(inside int) time.Duration {
		return time.Duration(10+max(inside-capacity, 0)) * time.Millisecond
	}
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			time.Sleep(primes[i])
			for time.Now().Before(end) {
				p, ok := g.TryEnter()
				if !ok {
					time.Sleep(time.Millisecond + primes[i])
					continue
				}
				start := time.Now()
				time.Sleep(service(g.InFlight()))
				c.Observe(time.Since(start), adaptive.Success)
				p.Release()
			}
		})
	}
	wg.Wait()
}

// probeLimits returns the limits set after the windows that measured
// the baseline, in order.
func probeLimits(s adaptive.Stats) []int {
	var probes []int
	for _, h := range s.History {
		if h.Probe {
			probes = append(probes, h.Limit)
		}
	}
	return probes
}

// TestControllerProbes checks the baseline measurement of a limit too
// high: no probe before a window in which the limit held the load back
// (two, the first filling the gate), then one window per step at half
// the concurrency while latency falls, the baseline gathered at the
// concurrency above the one where it stopped falling (no slower, and below
// one past the capacity), the limit back to where the
// probes found queueing, and the next probe after ProbeEvery.
func TestControllerProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		law := &recorder{}
		g := mustGate(t, 100)
		c := mustNew(t, g, adaptive.Config{Law: law, Initial: 40, Window: time.Millisecond, Samples: 10, ProbeEvery: time.Second, History: 100})
		if got := g.Stats().Max; got != 40 || c.Stats().Probing {
			t.Fatalf("gate %d, probing %v; want 40 and no probe before the load is seen", got, c.Stats().Probing)
		}
		probeRun(c, 10, 400*time.Millisecond)
		s := c.Stats()
		if s.Probes != 1 || !near(s.Baseline, 10*time.Millisecond) {
			t.Fatalf("after the first probe: %+v", s)
		}
		// At 20: 20ms; at 10: 10ms, lower, so at 5: 10ms, no slower at
		// 10, so the baseline, gathered at 10 until it holds 40 requests;
		// then the limit back to 40, but no higher than 20, which the
		// probes found past the capacity.
		probes := probeLimits(s)
		if len(probes) < 4 || probes[0] != 10 || probes[1] != 5 || probes[len(probes)-1] != 20 {
			t.Errorf("limits after probe windows %v, want [10 5 10... 20]", probes)
		}
		for _, p := range probes[2 : len(probes)-1] {
			if p != 10 {
				t.Errorf("limits after probe windows %v, want [10 5 10... 20]", probes)
				break
			}
		}
		law.mu.Lock()
		if len(law.windows) == 0 || law.windows[len(law.windows)-1].Baseline == nil || !near(law.windows[len(law.windows)-1].Baseline.Quantile(0.5), 10*time.Millisecond) {
			t.Errorf("the law saw no baseline: %d windows, Stats %+v", len(law.windows), s)
		}
		law.mu.Unlock()
		probeRun(c, 10, time.Second)
		if s := c.Stats(); s.Probes != 2 {
			t.Errorf("%d probes after a second, want 2", s.Probes)
		}
	})
}

// TestControllerProbeTooLow checks the first baseline measurement of a
// limit too low: one probe step at half the limit, which finds latency no
// lower and does not halve again, then a climb, doubling the limit,
// until latency rises.
func TestControllerProbeTooLow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := mustGate(t, 100)
		c := mustNew(t, g, adaptive.Config{Initial: 8, Window: time.Millisecond, Samples: 10, History: 100})
		probeRun(c, 30, 300*time.Millisecond)
		s := c.Stats()
		probes := probeLimits(s)
		// Windows at 8, 8 (steady), then 4 (not faster), then climbing:
		// 16, 32, and on until latency rises.
		if len(probes) < 2 || probes[0] != 16 || probes[1] != 32 {
			t.Errorf("limits after probe windows %v, want [16 32 ...]", probes)
		}
		for _, h := range s.History {
			if h.Limit < 4 {
				t.Errorf("a probe went below half the limit, with nothing to compare: %+v", s.History)
				break
			}
		}
		if s.Probes != 1 || !near(s.Baseline, 10*time.Millisecond) || s.Limit < 30 {
			t.Errorf("after the first probe: limit %d, baseline %v, %d probes; history %+v", s.Limit, s.Baseline, s.Probes, s.History)
		}
	})
}

// TestControllerAllocs checks that Observe allocates nothing, windows
// ending included.
func TestControllerAllocs(t *testing.T) {
	g := mustGate(t, 8)
	c := mustNew(t, g, adaptive.Config{Window: time.Nanosecond, Samples: 10, ProbeEvery: -1})
	allocs := testing.AllocsPerRun(1000, func() {
		p, _ := g.TryEnter()
		c.Observe(0, adaptive.Success)
		p.Release()
	})
	if allocs != 0 {
		t.Errorf("TryEnter, Observe and Release allocate %v times per run, want 0", allocs)
	}
	if s := c.Stats(); s.Windows == 0 {
		t.Errorf("no window ended: %+v", s)
	}
}

// TestControllerConcurrent runs many goroutines through an adaptive gate
// and checks the gate's guarantees: never more inside than the limit, and
// exact counters.
func TestControllerConcurrent(t *testing.T) {
	g := mustGate(t, 8)
	g.AdaptWait(time.Millisecond)
	c := mustNew(t, g, adaptive.Config{Min: 2, Max: 16, Window: 200 * time.Microsecond, Samples: 20, ProbeEvery: 5 * time.Millisecond})
	var inside, most atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 200 {
				p, ok := g.Enter(context.Background(), 50*time.Microsecond)
				if !ok {
					continue
				}
				start := time.Now()
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Duration(n) * 10 * time.Microsecond)
				inside.Add(-1)
				c.Observe(time.Since(start), adaptive.Success)
				p.Release()
			}
		})
	}
	wg.Wait()
	s := c.Stats()
	if most.Load() > 16 || s.Gate.Peak > 16 || s.Gate.InFlight != 0 {
		t.Errorf("%d inside at once, gate %+v", most.Load(), s.Gate)
	}
	if total := s.Gate.Admitted + s.Gate.Shed + s.Gate.TimedOut; total != 32*200 {
		t.Errorf("admitted %d + shed %d + timed out %d = %d, want %d", s.Gate.Admitted, s.Gate.Shed, s.Gate.TimedOut, total, 32*200)
	}
	if s.Limit < 2 || s.Limit > 16 || s.Windows == 0 {
		t.Errorf("Stats %+v", s)
	}
}

// TestControllerIgnored checks that a request reported Ignored completes
// its window without its latency counting.
func TestControllerIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		law := &recorder{}
		g := mustGate(t, 8)
		c := mustNew(t, g, adaptive.Config{Law: law, Window: time.Millisecond, Samples: 2, ProbeEvery: -1})
		// The second request a microsecond after the first, so that they
		// do not report at one instant, in an order the bubble does not
		// fix: a report racing the call that ends the window may count in
		// it without its latency.
		var wg sync.WaitGroup
		wg.Go(func() { serve(c, 10*time.Millisecond, adaptive.Success) })
		wg.Go(func() {
			time.Sleep(time.Microsecond)
			serve(c, 10*time.Millisecond, adaptive.Success)
		})
		wg.Go(func() { serve(c, time.Millisecond, adaptive.Ignored) })
		wg.Wait()
		law.mu.Lock()
		defer law.mu.Unlock()
		if len(law.windows) != 1 {
			t.Fatalf("%d windows, want 1", len(law.windows))
		}
		if w := law.windows[0]; w.Samples != 2 || w.Ignored != 1 || w.Dropped != 0 || w.Mean() != 10*time.Millisecond {
			t.Errorf("window %+v, mean %v", w, w.Mean())
		}
		if s := c.Stats(); s.Samples != 2 || s.Ignored != 1 {
			t.Errorf("Stats %+v", s)
		}
	})
}

// TestControllerWait checks the wait Enter lets a request wait for a
// place: none before any request is reported; the mean latency, whatever
// the limit, until the first window ends; then twice the time in which a
// place frees with the gate full, the mean latency over the limit (here
// 10ms over 4), at most the mean latency (at a limit of 1); capped by
// Config.Wait, or none with Config.Wait < 0; and that Enter waits it, and
// no longer.
func TestControllerWait(t *testing.T) {
	for _, c := range []struct {
		limit int
		cfg   time.Duration
		want  time.Duration
	}{
		{4, 0, 5 * time.Millisecond},
		{1, 0, 10 * time.Millisecond},
		{4, 2 * time.Millisecond, 2 * time.Millisecond},
		{4, -1, 0},
	} {
		synctest.Test(t, func(t *testing.T) {
			g := mustGate(t, c.limit)
			ctrl := mustNew(t, g, adaptive.Config{Law: adaptive.Fixed{}, ProbeEvery: -1, Window: time.Millisecond, Samples: 40, Wait: c.cfg})
			if got := ctrl.Wait(); got != 0 {
				t.Fatalf("limit %d: wait %v before any request, want 0", c.limit, got)
			}
			p, _ := ctrl.Enter(context.Background())
			time.Sleep(10 * time.Millisecond)
			ctrl.Observe(10*time.Millisecond, adaptive.Success)
			p.Release()
			first := 10 * time.Millisecond
			if c.cfg != 0 {
				first = max(min(first, c.cfg), 0)
			}
			if got := ctrl.Wait(); got != first {
				t.Errorf("limit %d, Config.Wait %v: wait %v in the first window, want %v", c.limit, c.cfg, got, first)
			}
			// c.limit callers, each serving a request of 10ms after the
			// other, for a second.
			var wg sync.WaitGroup
			for i := range c.limit {
				wg.Go(func() {
					time.Sleep(primes[i]) // no two callers at one instant
					for range 100 {
						p, ok := ctrl.Enter(context.Background())
						if !ok {
							t.Error("a caller was refused with a place of its own")
							return
						}
						time.Sleep(10 * time.Millisecond)
						ctrl.Observe(10*time.Millisecond, adaptive.Success)
						p.Release()
					}
				})
			}
			wg.Wait()
			if got := ctrl.Wait(); got < c.want*7/8 || got > c.want*9/8 {
				t.Errorf("limit %d, Config.Wait %v: wait %v, want %v", c.limit, c.cfg, got, c.want)
			}
			// The gate full, a request waits Wait, then is refused.
			held := make([]limits.Permit, c.limit)
			for i := range held {
				held[i], _ = g.TryEnter()
			}
			start := time.Now()
			if _, ok := ctrl.Enter(context.Background()); ok {
				t.Error("let in with the gate full")
			}
			if waited := time.Since(start); waited != ctrl.Wait() {
				t.Errorf("refused after %v, want after the wait, %v", waited, ctrl.Wait())
			}
			for i := range held {
				held[i].Release()
			}
		})
	}
}

// TestControllerEarlyWindow starts a Controller, at a limit of 2, before a
// load that fits under it but for one burst, which the gate refuses in
// part: without a baseline, the window closes as soon as it has Window's
// length and four times the limit in samples, rather than Samples, so that
// the law can raise a limit that refuses the bursts of a light load
// sooner. Without the burst, the window waits for its Samples.
func TestControllerEarlyWindow(t *testing.T) {
	for _, burst := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			law := &recorder{}
			g := mustGate(t, 2)
			c := mustNew(t, g, adaptive.Config{Law: law, Max: 50, Window: 100 * time.Millisecond, Samples: 50})
			refused := 0
			if burst {
				var held [3]limits.Permit
				var ok [3]bool
				for i := range held {
					if held[i], ok[i] = g.TryEnter(); !ok[i] {
						refused++
					}
				}
				time.Sleep(10 * time.Millisecond)
				for i := range held {
					if ok[i] {
						c.Observe(10*time.Millisecond, adaptive.Success)
						held[i].Release()
					}
				}
			}
			// Then one request at a time, 10ms each, 10ms apart: a
			// demand of half a request.
			for range 60 {
				serve(c, 10*time.Millisecond, adaptive.Success)
				time.Sleep(10 * time.Millisecond)
			}
			law.mu.Lock()
			defer law.mu.Unlock()
			if len(law.windows) == 0 {
				t.Fatal("no window ended")
			}
			w := law.windows[0]
			d := w.End.Sub(w.Start)
			switch {
			case burst && (refused != 1 || w.Refused != 1 || w.Samples >= 50 || w.Samples < 8 || d < 100*time.Millisecond || d > 200*time.Millisecond):
				t.Errorf("after a burst refused in part (%d): first window %+v, open %v; want it closed after 100ms, with 8 to 49 samples", refused, w, d)
			case !burst && (w.Refused != 0 || w.Samples < 50):
				t.Errorf("without refusals: first window %+v; want its 50 samples", w)
			}
		})
	}
}
