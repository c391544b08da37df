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

// constrained reports whether the limit held the load back in the window
// w: the gate was full, and the demand (the arrival rate times the mean
// latency) was at least the limit. Otherwise the load fits under the
// limit, and cutting it would only refuse requests.
func constrained(w *Window) bool {
	return w.MaxInFlight >= w.Limit && w.Demand() >= float64(w.Limit)
}

// drained reports whether the window w came right after a cut, at a new
// limit: requests admitted early in it still waited behind the queue of
// the limit before, and it reads queueing that the cut already
// removed.
func drained(w *Window) bool {
	return !w.steady && w.Rises == 0 && w.Knee > w.Limit
}

// atKnee reports whether limit, rounded, is at or past the limit where
// the law last found queueing (Window.Knee), if it did. To grow past it,
// Gradient must be about sure of no queueing, the queueing it reads plus
// half its error at most half of Tolerance: past a capacity of C
// requests, C+1 is a reading of noise away at small C, and a reading low
// by chance in one window of a hundred would take the limit there. A
// limit held reads its windows together, more precisely each time,
// until one is sure, but the baseline's own error stays in every
// reading: a capacity that grew may be found only once the next probe
// measures the baseline again (TestCapacityGrowthLog).
func atKnee(limit float64, w *Window) bool {
	return w.Knee > 0 && math.Round(limit) >= float64(w.Knee)
}

// grow returns the limit after a window that calls for more: at or
// above half the limit where queueing was last found (Window.Knee), a
// thirty-second more, but at least one, so that a limit near the capacity
// moves by about one request; otherwise (below it, with none found, or
// past it), a thirty-second more, then twice as much more for each window
// in a row that grew, up to doubling, so that a limit far too low finds
// the capacity in a few windows, and one that a window read low by
// chance took just past the knee moves on by little (by a sixteenth, a
// limit of 200 leaves the 10% about its capacity in two windows).
func grow(limit float64, w *Window) float64 {
	rises := min(w.Rises, 5)
	if w.Knee > 0 && 2*limit >= float64(w.Knee) {
		rises = 0
	}
	return limit + max(1, limit*math.Ldexp(1, rises-5))
}

// burstRoom is the fewest places a limit that refused the bursts of a
// load well under it rises by. The bursts of a steady load need room
// above the capacity in requests, not in a multiple of it: with C
// workers busy a share rho of the time, the chance that C+j requests are
// inside falls as rho to the power j, whatever C is, so that at 0.7 times
// the capacity 24 places more than C see a burst that fills them in
// about one request in 10,000.
const burstRoom = 24

// lightShare is the demand, as a share of the limit, under which a
// window's load is well under its limit (see burst).
const lightShare = 0.9

// burst returns the next limit after a window w in which the limit did
// not hold the load back: higher if the gate refused requests anyway
// (bursts above a load that fits, which a higher limit lets through at
// little cost in latency), by burstRoom places or twice as high, the
// higher, with a demand under lightShare of the limit or no baseline
// yet, and twice as high with a demand closer to it; the same otherwise,
// while the gate may have been filling, when the demand reads low, or
// once requests wait as long as they are served, as they do near the
// capacity. Before a baseline, the demand is read from the first
// requests the service has seen, at a small limit a few dozen, and may
// read a load well under the limit above lightShare of it (a load of 0.7
// times the capacity, at a limit of 6, did in one run of twenty in
// TestCapacityLightLoadStart): a doubling then leaves a limit of a few
// requests refusing the bursts of that load for another window.
func burst(limit float64, w *Window) float64 {
	if w.Refused == 0 || w.MaxInFlight < w.Limit || w.filling {
		return limit
	}
	// The baseline, or before there is one, the window after which the
	// limit began to rise.
	b := w.Baseline
	if b == nil {
		b = w.prev
	}
	if b != nil && b.Samples > 0 && w.Samples > 0 {
		if d, _ := delay(w, b); d > float64(b.Mean()) {
			return limit
		}
	}
	if w.Baseline == nil || w.Demand() < lightShare*float64(w.Limit) {
		return max(2*limit, limit+burstRoom)
	}
	return 2 * limit
}

// Gradient is a law that reads queueing from latency. A request that
// queues is late by the time it waited, and so are the fastest requests,
// which otherwise vary least: the shift of a low quantile of the window's
// latency (DefaultQuantile) from the baseline's, the latency measured at
// low concurrency, is the time spent queueing, read as a fraction of the
// baseline's mean latency.
//
// The law moves the limit only while the limit holds the load back (the
// gate was full, and the demand, Window.Demand, reached the limit): then,
// with queueing at most half of Tolerance (and, at or past the limit
// where it last found queueing, that plus half its sampling error), the
// limit grows (by a thirty-second, then twice as much more for each
// window in a row that grew, up to doubling; see grow); with more than
// Tolerance plus half its sampling error, it falls in proportion to the
// queueing read less that half error, by at most half (and lowers the
// gate's limit L only with queueing of 1/(2(L-1)) at least, half what a
// request queued past a capacity of L-1 waits); in between, it holds.
// While the load fits under the limit, the law never cuts it, and raises
// it when the gate refused a burst anyway. Past the capacity C of a
// service with a fixed number of workers, the wait grows with the
// requests queued, about their number over C service times each
// (Little's law), so the limit settles within one request of C at small
// C, and within a few percent at large C (docs/CAPACITY.md).
//
// The zero Gradient is usable: DefaultTolerance and DefaultQuantile.
type Gradient struct {
	// Tolerance is the queueing the law accepts, as a fraction of the
	// baseline's mean latency, beyond the window's sampling error; 0
	// means DefaultTolerance, and values below 0 mean 0.
	Tolerance float64
	// Quantile, if set, is the one latency quantile whose shift is read,
	// as a fraction; 0 reads the shifts of the mean and of the quantiles
	// DefaultQuantile, 0.25 and 0.5, each weighed by its precision.
	Quantile float64
}

// Next implements Law.
func (g Gradient) Next(limit float64, w *Window) float64 {
	if !constrained(w) {
		return burst(limit, w)
	}
	b := w.Baseline
	if b == nil || w.Samples == 0 || b.Mean() <= 0 {
		return limit
	}
	tol := g.Tolerance
	if tol == 0 {
		tol = DefaultTolerance
	}
	tol = max(tol, 0)
	// The delay, as a fraction of the baseline's mean latency, and its
	// sampling error (delayBound's, which does not understate it): a
	// window of few requests reads it less surely, and the law holds
	// until it is sure.
	d, e := delayBound(w, b)
	if g.Quantile != 0 {
		d, e = shift(w, b, g.Quantile)
	}
	mean := float64(b.Mean())
	queued, noise := d/mean, e/mean
	switch {
	case queued <= tol/2 && (!atKnee(limit, w) || queued+noise/2 <= tol/2):
		return grow(limit, w)
	case queued <= tol+noise/2 || drained(w):
		return limit
	}
	// Past the capacity, latency grows with the limit (Little's law):
	// move to where it would be Tolerance above the baseline, reading the
	// queueing less half its error (near the capacity, where the reading
	// is mostly noise, a cut of its full size would walk the limit down,
	// window after window), by at most half, but not below the requests
	// in service, which a baseline read too low would otherwise cut
	// through.
	next := max(limit*max((1+tol)/(1+queued-noise/2), 0.5), min(w.serving(), limit))
	if l := math.Round(limit); l >= 2 && math.Round(next) < l && queued-noise/2 <= 1/(2*(l-1)) {
		// A cut that takes the gate's limit L one lower says the capacity
		// is L-1 at most, and past it at L a request waits whenever the
		// gate is full, until one of the L-1 inside completes: about
		// 1/(L-1) of the latency. Queueing read at less than half that
		// is the noise of the window or of the baseline (at a limit of
		// 2, the capacity of a small service, such a cut halves what it
		// serves).
		return limit
	}
	return next
}

// Vegas is a law that estimates how many requests are queued, in the
// manner of TCP Vegas: requests that wait W on average more than the
// baseline's mean latency B, at limit N, are N*W/(B+W) of those inside
// (Little's law), W read as the shift of a low quantile of latency, as in
// Gradient. The estimate is the limit times the delay's relative error
// wide, several requests at a limit of hundreds, and the law reads it
// less its standard error: unless sure of Alpha queued, the limit grows
// (as Gradient's does); sure of more than Beta, it falls to where Beta
// would wait, by at most half; in between, it holds. (Cutting on every
// reading past Beta would walk a large limit down below the capacity, one
// noisy window after another.) As Gradient, it moves the limit only while
// the limit holds the load back. It settles between about C+Alpha and
// C+Beta for a capacity of C requests, plus that standard error, so it
// suits services whose capacity is large against Beta.
//
// The zero Vegas is usable: Alpha 2, Beta 4, DefaultQuantile.
type Vegas struct {
	// Alpha and Beta bound the requests the law lets queue; 0 means 2 and
	// 4 (or Alpha, if larger).
	Alpha, Beta float64
	// Quantile, if set, is the one latency quantile read, as in
	// Gradient.
	Quantile float64
}

// Next implements Law.
func (v Vegas) Next(limit float64, w *Window) float64 {
	if !constrained(w) {
		return burst(limit, w)
	}
	if w.Baseline == nil || w.Samples == 0 || w.Baseline.Mean() <= 0 {
		return limit
	}
	alpha, beta := v.Alpha, v.Beta
	if alpha == 0 {
		alpha = 2
	}
	if beta == 0 {
		beta = max(4, alpha)
	}
	wait, e := delay(w, w.Baseline)
	if v.Quantile != 0 {
		wait, e = shift(w, w.Baseline, v.Quantile)
	}
	wait = max(wait, 0)
	base := float64(w.Baseline.Mean()) + wait
	queued, noise := limit*wait/base, limit*e/base
	switch {
	case queued-noise < alpha:
		return grow(limit, w)
	case queued-noise > beta && !drained(w):
		return max(limit-(queued-noise-beta), limit/2, min(w.serving(), limit))
	}
	return limit
}

// AIMD is a law driven by failures rather than latency: a window in which
// a request was reported Dropped, or took longer than Timeout, multiplies
// the limit by Backoff; a window without, in which the limit held the
// load back, adds Increase. It needs no baseline (set Config.ProbeEvery <
// 0), and suits a service whose overload shows as errors or timeouts
// rather than as slower answers: it settles where overload starts to
// fail requests, a little above the capacity with a service that fails
// requests queued past a timeout. A service that only slows down under
// overload never fails one, and under sustained overload AIMD raises the
// limit to Max; pair it with a latency law (Lowest{Gradient{}, AIMD{}})
// or give it a Timeout.
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
	if !constrained(w) && (w.Refused == 0 || w.MaxInFlight < w.Limit) {
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
