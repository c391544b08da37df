package adaptive

import (
	"math"
	"time"
)

// Law decides a gate's next limit from the window just ended. A Controller
// calls Next with the lock that serialises windows held, so a Law need not
// be safe for concurrent use; the laws of this package are values that
// keep no state, and may be shared.
type Law interface {
	// Next returns the limit to set after the window w, in which the limit
	// was limit. The Controller rounds it to the nearest whole number and
	// clamps it to [Min, Max]; NaN or an infinity keeps limit.
	Next(limit float64, w *Window) float64
}

// busy reports whether the limit held the load back in the window w, so
// that raising it may help: the gate refused someone, or at least half
// the places were taken.
func busy(limit float64, w *Window) bool {
	return w.Refused > 0 || float64(w.MaxInFlight) >= limit/2
}

// Gradient is a law that reads queueing from latency. A request that
// queues is late by the time it waited, and so are the fastest requests,
// which otherwise vary least: the shift of a low quantile of the window's
// latency (DefaultQuantile) from the baseline's, the latency measured at
// low concurrency, is the time spent queueing. While it is at most
// Tolerance times the baseline's median latency, the limit grows, and
// grows faster the more windows in a row it has grown, so that a limit far
// too low finds the capacity in a few windows; past it, the limit falls in
// proportion, by at most half a window. Past the capacity C of a service
// with a fixed number of workers, the wait grows with limit/C (Little's
// law), so the limit settles a little above C: in the simulation of
// docs/CAPACITY.md, about 10% above it.
//
// The zero Gradient is usable: DefaultTolerance and DefaultQuantile.
type Gradient struct {
	// Tolerance is the queueing the law accepts, as a fraction of the
	// baseline's median latency; 0 means DefaultTolerance, and values
	// below 0 mean 0.
	Tolerance float64
	// Quantile is the latency quantile whose shift is read, as a
	// fraction; 0 means DefaultQuantile.
	Quantile float64
}

// Next implements Law.
func (g Gradient) Next(limit float64, w *Window) float64 {
	ratio, ok := latencyRatio(w, g.Quantile)
	if !ok {
		return limit
	}
	tol := g.Tolerance
	if tol == 0 {
		tol = DefaultTolerance
	}
	tol = 1 + max(tol, 0)
	// Move halfway, on a logarithmic scale, to where the latency would be
	// Tolerance times the baseline, by at most half per window; while
	// latency is no higher than the baseline, twice as far for each
	// window in a row that rose, so that a limit far too low soon finds
	// the capacity.
	room := tol / ratio
	exp := 0.5
	if room >= 1 {
		if !busy(limit, w) {
			return limit
		}
		if ratio <= 1 {
			exp = math.Ldexp(exp, min(w.Rises, 8))
		}
		return max(limit*min(math.Pow(room, exp), 2), limit+1)
	}
	return limit * max(math.Pow(room, exp), 0.5)
}

// latencyRatio returns the ratio of w's latency to the baseline's, taken
// as the baseline's median plus the shift of the quantile q (0 means
// DefaultQuantile), if both are known.
func latencyRatio(w *Window, q float64) (float64, bool) {
	if w.Baseline == nil || w.Samples == 0 {
		return 0, false
	}
	if q == 0 {
		q = DefaultQuantile
	}
	b := w.Baseline
	med := float64(b.Quantile(0.5))
	if med <= 0 {
		return 0, false
	}
	return max(1+float64(w.Quantile(q)-b.Quantile(q))/med, 0.01), true
}

// Vegas is a law that estimates how many requests are queued, in the
// manner of TCP Vegas: with latency L at limit N and the baseline B, about
// N*(1-B/L) requests wait rather than being served, L read as in
// Gradient. Fewer than Alpha, the limit grows (by one, then two, four...
// while it keeps growing); more than Beta, it falls to where Beta would
// wait, by at most half; in between, it holds. It settles between C+Alpha
// and C+Beta for a capacity of C requests, so it suits services whose
// capacity is large against Beta.
//
// The zero Vegas is usable: Alpha 2, Beta 4, DefaultQuantile.
type Vegas struct {
	// Alpha and Beta bound the requests the law lets queue; 0 means 2 and
	// 4 (or Alpha, if larger).
	Alpha, Beta float64
	// Quantile is the latency quantile read, as in Gradient.
	Quantile float64
}

// Next implements Law.
func (v Vegas) Next(limit float64, w *Window) float64 {
	ratio, ok := latencyRatio(w, v.Quantile)
	if !ok {
		return limit
	}
	alpha, beta := v.Alpha, v.Beta
	if alpha == 0 {
		alpha = 2
	}
	if beta == 0 {
		beta = max(4, alpha)
	}
	queued := limit * (1 - 1/ratio)
	switch {
	case queued < alpha:
		if !busy(limit, w) {
			return limit
		}
		return limit + math.Ldexp(1, min(w.Rises, 16))
	case queued > beta:
		return max(limit-(queued-beta), limit/2)
	}
	return limit
}

// AIMD is a law driven by failures rather than latency: a window in which
// a request was reported Dropped, or took longer than Timeout, multiplies
// the limit by Backoff; a window without, in which the limit held the load
// back, adds Increase. It needs no baseline (set Config.ProbeEvery < 0),
// and suits a service whose overload shows as errors or timeouts rather
// than as slower answers.
//
// The zero AIMD is usable: Backoff 0.9, Increase 1, no Timeout.
type AIMD struct {
	// Backoff is the factor applied after a window with a failure, in
	// (0, 1); 0 means 0.9.
	Backoff float64
	// Increase is added after a window without; 0 means 1.
	Increase float64
	// Timeout, if positive, counts a request that succeeded in more than
	// Timeout as a failure.
	Timeout time.Duration
}

// Next implements Law.
func (a AIMD) Next(limit float64, w *Window) float64 {
	failed := w.Dropped > 0 || (a.Timeout > 0 && w.Above(a.Timeout) > 0)
	if failed {
		b := a.Backoff
		if b <= 0 || b >= 1 {
			b = 0.9
		}
		return limit * b
	}
	if !busy(limit, w) {
		return limit
	}
	inc := a.Increase
	if inc <= 0 {
		inc = 1
	}
	return limit + inc
}

// Lowest is a law that asks each of its laws and takes the lowest answer,
// such as Lowest{Gradient{}, AIMD{}} to heed both latency and failures.
// An empty Lowest keeps the limit.
type Lowest []Law

// Next implements Law.
func (l Lowest) Next(limit float64, w *Window) float64 {
	if len(l) == 0 {
		return limit
	}
	next := math.Inf(1)
	for _, law := range l {
		next = min(next, law.Next(limit, w))
	}
	return next
}

// Fixed is a law that never changes the limit: with it, a Controller only
// measures, and its Stats show the latency and queueing of a fixed gate
// (set Config.ProbeEvery < 0, or the probes will lower the limit to
// measure the baseline).
type Fixed struct{}

// Next implements Law.
func (Fixed) Next(limit float64, _ *Window) float64 { return limit }
