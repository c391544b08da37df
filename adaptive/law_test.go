package adaptive

import (
	"math"
	"testing"
	"time"
)

// window returns a window of n latencies spread evenly between lo and hi,
// at limit with most inside, measured against baseline.
func window(limit, most, n int, lo, hi time.Duration, baseline *Window) *Window {
	w := &Window{Limit: limit, MaxInFlight: most, Baseline: baseline}
	for i := range n {
		w.add(int64(lo) + int64(hi-lo)*int64(i)/int64(max(n-1, 1)))
	}
	return w
}

func TestLaws(t *testing.T) {
	base := window(5, 5, 1000, time.Millisecond, 19*time.Millisecond, nil) // median 10ms
	fast := func(most int) *Window {
		return window(20, most, 1000, time.Millisecond, 19*time.Millisecond, base)
	}
	// Every request 5ms later: queueing half the median.
	slow := window(20, 20, 1000, 6*time.Millisecond, 24*time.Millisecond, base)
	// Every request 1ms later: queueing a tenth of the median.
	bit := window(20, 20, 1000, 2*time.Millisecond, 20*time.Millisecond, base)
	// Every request 2ms later: a fifth of the median.
	bit2 := window(20, 20, 1000, 3*time.Millisecond, 21*time.Millisecond, base)
	rising := fast(20)
	rising.Rises = 3
	noBase := window(20, 20, 100, time.Millisecond, 2*time.Millisecond, nil)
	dropped := fast(20)
	dropped.Dropped = 1
	refused := fast(2)
	refused.Refused = 1

	for _, c := range []struct {
		name   string
		law    Law
		w      *Window
		lo, hi float64 // bounds of the next limit
	}{
		{"gradient without baseline holds", Gradient{}, noBase, 20, 20},
		{"gradient idle holds", Gradient{}, fast(5), 20, 20},
		{"gradient grows", Gradient{}, fast(20), 21, 21},
		{"gradient grows when the gate refuses", Gradient{}, refused, 21, 21},
		{"gradient grows faster after rises", Gradient{}, rising, 23.5, 24.5},
		{"gradient falls with queueing", Gradient{}, slow, 16.5, 17.5},
		{"gradient at most halves", Gradient{Tolerance: 0.01}, window(20, 20, 100, 100*time.Millisecond, 200*time.Millisecond, base), 10, 10},
		{"gradient tolerates what it is told", Gradient{Tolerance: 0.2}, bit, 21, 21},
		{"gradient falls past tolerance", Gradient{Tolerance: 0.01}, bit, 19, 19.99},
		{"vegas grows", Vegas{}, fast(20), 21, 21},
		{"vegas grows faster after rises", Vegas{}, rising, 28, 28},
		{"vegas holds between alpha and beta", Vegas{}, bit2, 20, 20},
		{"vegas falls to beta", Vegas{}, slow, 17, 18},
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
	if got := (Gradient{}).Next(1.2, fast(2)); got != 2.2 {
		t.Errorf("gradient from 1.2 = %v, want at least one more", got)
	}
}
