package adaptive

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitsgo/limits"
)

// TestEndWithoutDrainKeepsSlowest ends one window at once, with requests
// it admitted still inside, and one after they all completed: only the
// second sets how long the next window waits for its slowest requests
// (twice the slowest latency it saw), since the first never saw its
// slowest.
func TestEndWithoutDrainKeepsSlowest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := limits.NewGate(8)
		if err != nil {
			t.Fatal(err)
		}
		c, err := New(g, Config{})
		if err != nil {
			t.Fatal(err)
		}
		const before = int64(time.Second)
		c.slowest.Store(before)

		// Three admitted, one completed: not drained.
		held := enter(t, g, 3)
		time.Sleep(10 * time.Millisecond)
		c.Observe(10*time.Millisecond, Success)
		held[0].Release()
		c.close(c.now(), true)
		if c.closed.Load() != open {
			t.Fatal("the window did not end at once")
		}
		if got := c.slowest.Load(); got != before {
			t.Errorf("after a window that did not drain, the wait for the slowest is %v, want %v as before", time.Duration(got), time.Duration(before))
		}
		for _, p := range held[1:] {
			p.Release() // admitted before this window: counted in none
		}

		// One admitted and completed: drained.
		p, ok := g.TryEnter()
		if !ok {
			t.Fatal("gate full")
		}
		time.Sleep(20 * time.Millisecond)
		c.Observe(20*time.Millisecond, Success)
		p.Release()
		c.close(c.now(), false)
		if c.closed.Load() != open {
			t.Fatal("the drained window did not end")
		}
		if got, want := time.Duration(c.slowest.Load()), 40*time.Millisecond; got < want*7/8 || got > want*9/8 {
			t.Errorf("after a drained window, the wait for the slowest is %v, want about %v", got, want)
		}
	})
}

// fixedLaw sets the limit to itself, whatever the window.
type fixedLaw float64

func (l fixedLaw) Next(float64, *Window) float64 { return float64(l) }

// TestRiseCountsHandedPlaces raises the limit of a full gate with
// requests waiting for a place: the gate hands them the new places as the
// limit rises, and they are the next window's, counted in the requests
// it waits for before it ends. Counted in its completions but not in
// those, the window would end before its slowest requests completed, and
// read latency low.
func TestRiseCountsHandedPlaces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := limits.NewGate(2)
		if err != nil {
			t.Fatal(err)
		}
		c, err := New(g, Config{Law: fixedLaw(5), ProbeEvery: -1})
		if err != nil {
			t.Fatal(err)
		}
		held := enter(t, g, 2)
		got := make(chan *limits.Permit, 2)
		for range 2 { // (a gate lets as many wait as its limit)
			go func() {
				p, ok := g.Enter(t.Context(), time.Hour)
				if !ok {
					t.Error("a waiting request was refused")
				}
				got <- &p
			}()
		}
		synctest.Wait() // both wait
		time.Sleep(10 * time.Millisecond)
		c.Observe(10*time.Millisecond, Success)
		c.close(c.now(), true)
		if l := c.Limit(); l != 5 {
			t.Fatalf("limit %d after the window, want 5", l)
		}
		for range 2 {
			held = append(held, <-got)
		}
		if n := g.Stats().Admitted - c.admitted.Load(); n != 2 {
			t.Errorf("the next window counts %d requests admitted in it, want the 2 handed places as the limit rose", n)
		}
		for _, p := range held {
			p.Release()
		}
	})
}

// TestBaselineSamplesGrowWithConcurrency measures the first baseline of
// from a limit of 16 before a service of capacity 40: it gathers at a
// concurrency of 16 or more, and holds Samples requests for each request
// at once, up to 16 times Samples: its error, in every window until the
// next probe, costs little to narrow at a high concurrency.
func TestBaselineSamplesGrowWithConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := limits.NewGate(100)
		if err != nil {
			t.Fatal(err)
		}
		const samples = 10
		c, err := New(g, Config{Initial: 16, Window: time.Millisecond, Samples: samples})
		if err != nil {
			t.Fatal(err)
		}
		end := time.Now().Add(300 * time.Millisecond)
		var wg sync.WaitGroup
		for i := range 60 {
			wg.Go(func() {
				time.Sleep(time.Duration(i) * 97 * time.Microsecond)
				for time.Now().Before(end) {
					p, ok := g.TryEnter()
					if !ok {
						time.Sleep(time.Millisecond)
						continue
					}
					start := time.Now()
					time.Sleep(time.Duration(10+max(g.InFlight()-40, 0)) * time.Millisecond)
					c.Observe(time.Since(start), Success)
					p.Release()
				}
			})
		}
		wg.Wait()
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.baseline == nil {
			t.Fatal("no baseline after 300ms")
		}
		if n := c.baseline.Samples; n < 16*samples {
			t.Errorf("the baseline holds %d requests, want 16 times Samples, %d, at least", n, 16*samples)
		}
	})
}

// enter takes n places in g, failing t if it cannot.
func enter(t *testing.T, g *limits.Gate, n int) []*limits.Permit {
	t.Helper()
	held := make([]*limits.Permit, 0, n)
	for range n {
		p, ok := g.TryEnter()
		if !ok {
			t.Fatal("gate full")
		}
		held = append(held, &p)
	}
	return held
}
