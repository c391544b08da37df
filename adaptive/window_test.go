package adaptive

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestBuckets(t *testing.T) {
	prev := -1
	for _, ns := range []int64{0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 1000, 1 << 20, 1<<20 + 1, 1<<42 - 1} {
		i := bucketOf(ns)
		if i < prev {
			t.Errorf("bucketOf(%d) = %d, below the bucket of a smaller latency, %d", ns, i, prev)
		}
		prev = i
		lo, width := bucketBounds(i)
		if float64(ns) < lo || float64(ns) >= lo+width {
			t.Errorf("bucketOf(%d) = %d, which holds [%v, %v)", ns, i, lo, lo+width)
		}
		if i >= sub && width > lo/sub {
			t.Errorf("bucket %d is %v wide from %v: more than 1/%d", i, width, lo, sub)
		}
	}
	for _, ns := range []int64{-5, 1 << 42, math.MaxInt64} {
		if i := bucketOf(ns); i < 0 || i >= nBuckets {
			t.Errorf("bucketOf(%d) = %d, out of [0, %d)", ns, i, nBuckets)
		}
	}
}

// TestQuantile compares Window's quantiles, read from its histogram, with
// the exact ones of the latencies it was given.
func TestQuantile(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	// Within a bucket, latencies are taken as spread evenly: the error is
	// at most the bucket's width, and small where latencies spread.
	for _, dist := range []struct {
		name string
		tol  float64
		draw func() int64
	}{
		{"exponential 10ms", 0.02, func() int64 { return int64(rng.ExpFloat64() * 10e6) }},
		{"uniform 1-2ms", 1.0 / sub, func() int64 { return int64(1e6 + rng.Float64()*1e6) }},
		{"fixed 20ms", 1.0 / sub, func() int64 { return 20e6 }},
	} {
		var w Window
		var all []int64
		var sum int64
		for range 10_000 {
			ns := dist.draw()
			w.add(ns)
			all = append(all, ns)
			sum += ns
		}
		slices.Sort(all)
		for _, q := range []float64{0.1, 0.5, 0.9, 0.99} {
			exact := float64(all[int(q*float64(len(all)))])
			got := float64(w.Quantile(q))
			if math.Abs(got-exact) > dist.tol*exact {
				t.Errorf("%s: Quantile(%v) = %v, exact %v", dist.name, q, time.Duration(got), time.Duration(exact))
			}
		}
		if got, want := w.Mean(), time.Duration(sum/int64(len(all))); got != want {
			t.Errorf("%s: Mean = %v, want %v", dist.name, got, want)
		}
	}
	var empty Window
	if empty.Quantile(0.5) != 0 || empty.Mean() != 0 || empty.Above(time.Second) != 0 {
		t.Error("an empty window has latencies")
	}
}

func TestAbove(t *testing.T) {
	var w Window
	for _, ms := range []int64{1, 2, 5, 10, 50, 100} {
		w.add(ms * 1e6)
	}
	for _, c := range []struct {
		d    time.Duration
		want int
	}{{0, 6}, {time.Millisecond / 2, 6}, {3 * time.Millisecond, 4}, {20 * time.Millisecond, 2}, {time.Second, 0}} {
		if got := w.Above(c.d); got != c.want {
			t.Errorf("Above(%v) = %d, want %d", c.d, got, c.want)
		}
	}
}

// add counts a latency of ns nanoseconds into the window, as a Controller
// does for each request reported as Success.
func (w *Window) add(ns int64) {
	w.Samples++
	w.sum += ns
	w.hist[bucketOf(ns)]++
}

// TestDelayError draws pairs of windows from the same service, of n and
// 4n requests, and compares the spread of delay's shift between them,
// which is noise only, with the errors delay and delayBound give: the
// first, which takes the four shifts it weighs as independent (they are
// read from the same requests), understates it, by a third; the second
// does not, and overstates it by less than half.
func TestDelayError(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, dist := range []struct {
		name string
		draw func() int64
	}{
		{"exponential", func() int64 { return int64(rng.ExpFloat64() * 20e6) }},
		{"lognormal", func() int64 { return int64(20e6 * math.Exp(0.5*rng.NormFloat64()-0.125)) }},
		{"uniform", func() int64 { return int64(20e6 * (0.8 + 0.4*rng.Float64())) }},
		{"bimodal", func() int64 {
			if rng.Float64() < 0.8 {
				return int64(20e6 * (0.4 + 0.2*rng.Float64()))
			}
			return int64(20e6 * (2.6 + 0.8*rng.Float64()))
		}},
	} {
		for _, n := range []int{50, 200} {
			const pairs = 1000
			var ss, errs, bounds float64
			for range pairs {
				var hi, lo Window
				for range n {
					hi.add(dist.draw())
				}
				for range 4 * n {
					lo.add(dist.draw())
				}
				d, e := delay(&hi, &lo)
				d2, b := delayBound(&hi, &lo)
				if d2 != d {
					t.Fatalf("%s: delayBound's shift %v, delay's %v", dist.name, d2, d)
				}
				ss += d * d
				errs += e
				bounds += b
			}
			spread := math.Sqrt(ss / pairs)
			e, b := errs/pairs/spread, bounds/pairs/spread
			if e > 0.85 {
				t.Errorf("%s, %d requests: delay's error is %.2f times the spread of its shift, want it understated", dist.name, n, e)
			}
			if b < 1 || b > 1.5 {
				t.Errorf("%s, %d requests: delayBound's error is %.2f times the spread of its shift, want 1 to 1.5", dist.name, n, b)
			}
		}
	}
}
