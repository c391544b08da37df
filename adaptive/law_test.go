package adaptive

import (
	"math"
	"testing"
	"time"
)

// window returns a window of n latencies spread evenly between lo and hi,
// at limit with most inside, measured against baseline, that took
// admissions for 100ms while requests arrived at twenty times the limit a
// second: at its 10ms mean latency, a demand of twice the limit, which
// the limit held back.
func window(limit, most, n int, lo, hi time.Duration, baseline *Window) *Window {
	w := &Window{Limit: limit, MaxInFlight: most, Baseline: baseline, Arrived: 20 * limit}
	w.End = w.Start.Add(100 * time.Millisecond)
	for i := range n {
		w.add(int64(lo) + int64(hi-lo)*int64(i)/int64(max(n-1, 1)))
	}
	return w
}

func TestLaws(t *testing.T) {
	base := window(5, 5, 1000, time.Millisecond, 19*time.Millisecond, nil) // mean 10ms
	fast := func(most int) *Window {
		return window(20, most, 1000, time.Millisecond, 19*time.Millisecond, base)
	}
	// Every request 5ms later: queueing half the mean.
	slow := window(20, 20, 1000, 6*time.Millisecond, 24*time.Millisecond, base)
	// Every request 1ms later: queueing a tenth of the mean.
	bit := window(20, 20, 1000, 2*time.Millisecond, 20*time.Millisecond, base)
	// Every request 2ms later: a fifth of the mean.
	bit2 := window(20, 20, 1000, 3*time.Millisecond, 21*time.Millisecond, base)
	rising := fast(20)
	rising.Rises = 3
	nearKnee := fast(20)
	nearKnee.Rises, nearKnee.Knee = 3, 30
	noBase := window(20, 20, 100, time.Millisecond, 2*time.Millisecond, nil)
	atKneeW := window(20, 20, 50, time.Millisecond, 19*time.Millisecond, base)
	atKneeW.Knee = 20
	// Half a millisecond faster than the baseline, read from 5,000
	// requests: sure of no queueing, the baseline's error included.
	atKneeSure := window(20, 20, 5000, 500*time.Microsecond, 18500*time.Microsecond, base)
	atKneeSure.Knee = 20
	dropped := fast(20)
	dropped.Dropped = 1
	// The gate refused a burst, but the load fits under the limit.
	refused := fast(20)
	refused.Refused, refused.Arrived, refused.steady = 1, 10, true
	// A burst refused at a demand just under the limit (19 of 20).
	closeRefused := fast(20)
	closeRefused.Refused, closeRefused.Arrived, closeRefused.steady = 1, 190, true
	// Slower, but the load fits under the limit: nothing to cut.
	fits := window(20, 20, 1000, 6*time.Millisecond, 24*time.Millisecond, base)
	fits.Arrived = 10

	for _, c := range []struct {
		name   string
		law    Law
		w      *Window
		lo, hi float64 // bounds of the next limit
	}{
		{"gradient without baseline holds", Gradient{}, noBase, 20, 20},
		{"gradient idle holds", Gradient{}, fast(5), 20, 20},
		{"gradient grows", Gradient{}, fast(20), 21, 21},
		{"gradient rises by burstRoom on a burst", Gradient{}, refused, 20 + burstRoom, 20 + burstRoom},
		{"gradient doubles on a burst near the limit", Gradient{}, closeRefused, 40, 40},
		{"vegas rises by burstRoom on a burst", Vegas{}, refused, 20 + burstRoom, 20 + burstRoom},
		{"gradient does not cut a load that fits", Gradient{}, fits, 20, 20},
		{"gradient grows faster after rises", Gradient{}, rising, 25, 25},
		{"gradient grows by a little near the knee", Gradient{}, nearKnee, 21, 21},
		// No queueing read from 50 requests, to within 9% of the mean: at
		// the knee, not sure of less than 1%.
		{"gradient holds at the knee unless sure", Gradient{}, atKneeW, 20, 20},
		{"gradient grows at the knee when sure", Gradient{}, atKneeSure, 21, 21},
		// To where it would queue Tolerance, reading the queueing less
		// half its error: 20 * 1.02 / (1.5 - about 0.01).
		{"gradient falls with queueing", Gradient{}, slow, 13.65, 13.8},
		// Queueing of a tenth read from 50 requests, 0.09 to within an
		// error of 0.09: a cut as if 0.05 (not to 18.5, as if 0.09).
		// Queueing of 0.095 read from 100 requests, within Tolerance plus
		// half its error (0.07 + 0.065/2), which delay's own error, 0.033,
		// understates.
		{"gradient holds on a reading within its error", Gradient{Tolerance: 0.07}, window(20, 20, 100, 2*time.Millisecond, 20*time.Millisecond, base), 20, 20},
		{"gradient cuts a noisy reading by less", Gradient{Tolerance: 0.01}, window(20, 20, 50, 2*time.Millisecond, 20*time.Millisecond, base), 19.1, 19.4},
		{"gradient at most halves", Gradient{Tolerance: 0.01}, window(20, 20, 100, 100*time.Millisecond, 200*time.Millisecond, base), 10, 10},
		{"gradient tolerates what it is told", Gradient{Tolerance: 0.2}, bit, 21, 21},
		{"gradient falls past tolerance", Gradient{Tolerance: 0.01}, bit, 18, 18.7},
		{"vegas grows", Vegas{}, fast(20), 21, 21},
		{"vegas grows faster after rises", Vegas{}, rising, 25, 25},
		{"vegas holds between alpha and beta", Vegas{}, bit2, 20, 20},
		{"vegas falls to beta", Vegas{}, slow, 17, 17.7},
		{"vegas idle holds", Vegas{}, fast(3), 20, 20},
		{"aimd grows", AIMD{}, fast(20), 21, 21},
		{"aimd idle holds", AIMD{}, fast(3), 20, 20},
		{"aimd backs off on a drop", AIMD{}, dropped, 18, 18},
		{"aimd backs off on a timeout", AIMD{Timeout: 15 * time.Millisecond, Backoff: 0.5}, fast(20), 10, 10},
		{"aimd custom increase", AIMD{Increase: 4}, fast(20), 24, 24},
		{"lowest takes the lowest", Lowest{Gradient{}, AIMD{}}, dropped, 18, 18},
		{"empty lowest holds", Lowest{}, slow, 20, 20},
		{"fixed holds", Fixed{}, slow, 20, 20},
	} {
		got := c.law.Next(20, c.w)
		if math.IsNaN(got) || got < c.lo-1e-9 || got > c.hi+1e-9 {
			t.Errorf("%s: Next(20) = %v, want in [%v, %v]", c.name, got, c.lo, c.hi)
		}
	}
	// At a limit of 2, queueing of 0.4 calls for 2*1.02/1.4, a limit of
	// 1 rounded; one request queued past a capacity of 1 would wait
	// about the whole latency, and a cut to 1 needs half of that: 0.8
	// cuts.
	for _, c := range []struct {
		shift  time.Duration
		lo, hi float64
	}{{4 * time.Millisecond, 2, 2}, {8 * time.Millisecond, 1.1, 1.2}} {
		w := window(2, 2, 1000, time.Millisecond+c.shift, 19*time.Millisecond+c.shift, base)
		if got := (Gradient{}).Next(2, w); got < c.lo || got > c.hi {
			t.Errorf("gradient at 2, %v later: Next(2) = %v, want in [%v, %v]", c.shift, got, c.lo, c.hi)
		}
	}
	one := window(1, 1, 1000, time.Millisecond, 19*time.Millisecond, base)
	if got := (Gradient{}).Next(1.2, one); got != 2.2 {
		t.Errorf("gradient from 1.2 = %v, want at least one more", got)
	}
}
