package adaptive_test

import (
	"reflect"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/adaptive/internal/sim"
)

// The simulated service: 20 workers, each serving a request in 10ms on
// average (exponential), so 2,000 requests a second at most; past 20
// requests at once, they queue. The controllers are not told.
const (
	servers  = 20
	mean     = 10 * time.Millisecond
	capacity = 2000.0 // requests a second
)

// front describes what stands before the simulated service: a gate of
// Limit (none if 0), moved by a Controller of Law if Adapt, with a wait
// of Wait, adapted if AdaptWait.
type front struct {
	Limit     int
	Adapt     bool
	Law       adaptive.Law
	Wait      time.Duration
	AdaptWait bool
}

// scenario is a simulated run.
type scenario struct {
	front   front
	load    float64       // times capacity
	d       time.Duration // how long
	changes []sim.Change
	timeout time.Duration // the service's queue timeout
	seed    uint64
}

// simulate runs s in a synctest bubble of its own.
func simulate(t *testing.T, s scenario) (res *sim.Result, c *adaptive.Controller) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		var f sim.Front
		if s.front.Limit > 0 {
			f.Gate = mustGate(t, s.front.Limit)
			f.Wait = s.front.Wait
			if s.front.AdaptWait {
				f.Gate.AdaptWait(100 * time.Millisecond)
			}
			if s.front.Adapt {
				cfg := adaptive.Config{Law: s.front.Law}
				if _, ok := s.front.Law.(adaptive.AIMD); ok {
					cfg.ProbeEvery = -1
				}
				c = mustNew(t, f.Gate, cfg)
				f.Ctrl = c
			}
		}
		res = sim.Run(sim.Config{
			Seed:    s.seed + 1,
			Service: sim.Service{Servers: servers, Mean: mean, Changes: s.changes, Timeout: s.timeout},
			Load:    []sim.Phase{{Until: s.d, Rate: s.load * capacity}},
			Front:   f,
		})
	})
	return res, c
}

// unloaded returns the latency of the service at half its capacity,
// where nothing queues for long.
func unloaded(t *testing.T) sim.Summary {
	res, _ := simulate(t, scenario{load: 0.5, d: 10 * time.Second})
	return res.Summarize(0, 10*time.Second)
}

// settled returns when the limit entered [lo, hi] for good in res, not
// counting steps in which the controller measured its baseline once the
// limit was in [lo, hi], or -1 if it never did.
func settled(res *sim.Result, from time.Duration, lo, hi int) time.Duration {
	at := from
	in := false // once in [lo, hi], probes no longer count
	for _, b := range res.Buckets {
		if b.End <= from || (b.Probing && in) {
			continue
		}
		if b.Limit < lo || b.Limit > hi {
			at, in = b.End, false
		} else if !b.Probing {
			in = true
		}
	}
	if at == res.Buckets[len(res.Buckets)-1].End {
		return -1
	}
	return at - from
}

// TestSimConverges starts an adaptive gate ten times too low and ten
// times too high before a service under twice the load it can serve: the
// limit settles within 20% of the capacity in 5 seconds, and requests let
// in are served about as fast as without load, at 85% of the capacity at
// least (from too low, the first baseline may read low, and be measured
// again, at half the limit for a window or two).
func TestSimConverges(t *testing.T) {
	base := unloaded(t)
	for _, c := range []struct {
		name    string
		initial int
	}{{"10x low", servers / 10}, {"10x high", servers * 10}} {
		t.Run(c.name, func(t *testing.T) {
			res, ctrl := simulate(t, scenario{front: front{Limit: c.initial, Adapt: true}, load: 2, d: 12 * time.Second})
			at := settled(res, 0, servers*8/10, servers*12/10)
			if at < 0 || at > 5*time.Second {
				t.Errorf("the limit settled within 20%% of %d after %v, want within 5s; history %+v", servers, at, ctrl.Stats().History)
			}
			s := res.Summarize(5*time.Second, 12*time.Second)
			if s.P99 > 2*base.P99 || s.P50 > base.P50*13/10 {
				t.Errorf("admitted requests: p50 %v, p99 %v; unloaded p50 %v, p99 %v", s.P50, s.P99, base.P50, base.P99)
			}
			if s.Throughput < 0.85*capacity {
				t.Errorf("admitted %.0f requests a second, capacity %.0f", s.Throughput, capacity)
			}
			t.Logf("settled after %v; p50 %v, p99 %v (unloaded %v, %v); %.0f/s", at, s.P50, s.P99, base.P50, base.P99, s.Throughput)
		})
	}
}

// TestSimStaticTooHigh shows what a fixed gate set twice too high costs:
// requests wait for as long as they are served, and without a gate the
// wait grows without bound.
func TestSimStaticTooHigh(t *testing.T) {
	base := unloaded(t)
	res, _ := simulate(t, scenario{front: front{Limit: 2 * servers}, load: 2, d: 8 * time.Second})
	s := res.Summarize(2*time.Second, 8*time.Second)
	if s.P50 < 2*base.P50 || s.Mean < base.Mean*18/10 {
		t.Errorf("gate at 2x the capacity: p50 %v, mean %v; unloaded %v, %v", s.P50, s.Mean, base.P50, base.Mean)
	}
	res, _ = simulate(t, scenario{load: 2, d: 4 * time.Second})
	early, late := res.Summarize(0, time.Second/2), res.Summarize(3*time.Second/2, 2*time.Second)
	if late.P50 < time.Second/2 || late.P50 < 3*early.P50 {
		t.Errorf("no gate: p50 %v of requests that came in the first half second, %v in the fourth; want growing past 500ms", early.P50, late.P50)
	}
}

// TestSimAdaptWait compares a fixed 5ms wait with one the gate adapts:
// at capacity both absorb bursts that a gate without a wait refuses; under
// overload the adapted one refuses most at once, where the fixed one
// makes most refusals wait (all but those that find as many waiting as
// the gate admits).
func TestSimAdaptWait(t *testing.T) {
	const wait = 5 * time.Millisecond
	refusedAtOnce := func(res *sim.Result, from, to time.Duration) float64 {
		n, fast := 0, 0
		for _, q := range res.Requests {
			if q.Arrive >= from && q.Arrive < to && !q.Admitted {
				n++
				if q.Wait == 0 {
					fast++
				}
			}
		}
		return float64(fast) / float64(max(n, 1))
	}
	share := func(s sim.Summary) float64 { return float64(s.Refused) / float64(s.Arrived) }
	noWait, _ := simulate(t, scenario{front: front{Limit: servers}, load: 1, d: 6 * time.Second})
	fixed, _ := simulate(t, scenario{front: front{Limit: servers, Wait: wait}, load: 1, d: 6 * time.Second})
	adapted, _ := simulate(t, scenario{front: front{Limit: servers, Wait: wait, AdaptWait: true}, load: 1, d: 6 * time.Second})
	n, f, a := share(noWait.Summarize(time.Second, 6*time.Second)), share(fixed.Summarize(time.Second, 6*time.Second)), share(adapted.Summarize(time.Second, 6*time.Second))
	if a > n/2 || a > f+0.01 {
		t.Errorf("at capacity, refused: %.1f%% without a wait, %.1f%% with a fixed one, %.1f%% with an adapted one", 100*n, 100*f, 100*a)
	}
	fixed, _ = simulate(t, scenario{front: front{Limit: servers, Wait: wait}, load: 2, d: 6 * time.Second})
	adapted, _ = simulate(t, scenario{front: front{Limit: servers, Wait: wait, AdaptWait: true}, load: 2, d: 6 * time.Second})
	if f, a := refusedAtOnce(fixed, time.Second, 6*time.Second), refusedAtOnce(adapted, time.Second, 6*time.Second); f > 0.5 || a < 0.8 {
		t.Errorf("at twice the capacity, refused at once: %.1f%% with a fixed wait, %.1f%% with an adapted one", 100*f, 100*a)
	}
}

// TestSimDeterministic runs a scenario twice.
func TestSimDeterministic(t *testing.T) {
	s := scenario{front: front{Limit: servers, Adapt: true, Wait: time.Millisecond, AdaptWait: true}, load: 2, d: 3 * time.Second, seed: 7}
	a, _ := simulate(t, s)
	b, _ := simulate(t, s)
	if !reflect.DeepEqual(a.Buckets, b.Buckets) {
		t.Error("two runs of one scenario differ")
	}
}
