package adaptive

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Latencies are counted in a histogram of buckets that split each power of
// two of nanoseconds in eight: a bucket is at most 12.5% wider than its
// lower bound, and percentiles are interpolated within it. Latencies of
// 2^42ns (73 minutes) and more share the last bucket.
const (
	subBits  = 3
	sub      = 1 << subBits
	maxExp   = 42
	nBuckets = (maxExp-subBits+1)*sub + sub
)

// bucketOf returns the bucket of a latency of ns nanoseconds.
func bucketOf(ns int64) int {
	if ns < sub {
		return int(max(ns, 0))
	}
	e := bits.Len64(uint64(ns)) - 1
	i := (e-subBits+1)*sub + int(ns>>(e-subBits)&(sub-1))
	return min(i, nBuckets-1)
}

// bucketBounds returns the lowest latency of bucket i and its width, in
// nanoseconds.
func bucketBounds(i int) (lo, width float64) {
	if i < sub {
		return float64(i), 1
	}
	e := i/sub + subBits - 1
	s := i % sub
	w := math.Ldexp(1, e-subBits)
	return float64(sub+s) * w, w
}

// liveHist is the histogram of the window being collected, added to
// concurrently.
type liveHist [nBuckets]atomic.Uint32

// Window is what a Controller saw of one window: the requests admitted
// while it was open, reported by Observe once complete. A Law decides the
// next limit from it. A Window is valid only during the call it is passed
// to.
type Window struct {
	// Start and End bound the time the window took admissions.
	Start, End time.Time
	// Limit is the gate's maximum during the window.
	Limit int
	// MaxInFlight is the most requests inside the gate seen as requests
	// completed: well under Limit, the limit was not what held the load
	// back, and a law should not raise it.
	MaxInFlight int
	// Refused counts the requests the gate refused during the window
	// (shed or given up waiting).
	Refused int
	// Arrived counts the requests that came to the gate while the window
	// took admissions, admitted or refused.
	Arrived int
	// Samples counts the requests that completed with Success, whose
	// latency the window holds; Dropped and Ignored those reported so.
	Samples, Dropped, Ignored int
	// Rises counts the windows just before this one, in a row, after which
	// the limit rose: a law may grow faster the longer it has grown.
	Rises int
	// Knee is the limit of the last window after which the limit fell,
	// where the law (or a baseline probe) last found queueing, or 0 if
	// none has: a law may grow fast below half of it, and carefully near
	// it.
	Knee int
	// Baseline is the window measured at low concurrency that tells how
	// fast requests are served without queueing, or nil if the Controller
	// has none yet (or does not probe). Its own Baseline is nil.
	Baseline *Window

	sum      int64 // nanoseconds, of the Samples
	admitted int   // requests admitted while the window took admissions
	// steady is set by the Controller when the window measured the gate
	// as it stands at its limit, not filling.
	steady bool
	// filling is set by the Controller when the window is the first at
	// its limit, after the start or a probe, and saw few more requests than
	// its limit: the gate may have been filling from empty.
	filling bool
	// first is set by the Controller on the first window after the start
	// or a probe.
	first bool
	// prev is the window after which the limit began to rise, if the
	// Controller has one: a burst reads latency against it before a
	// baseline.
	prev *Window
	took time.Duration // taking admissions, if not End - Start
	hist [nBuckets]uint32
}

// extend adds the window w, which followed b at the same limit, to b:
// b then holds both, as a window of admissions of as long as both.
func (b *Window) extend(w *Window) {
	b.took = b.admitting() + w.admitting()
	b.End = w.End
	b.MaxInFlight = max(b.MaxInFlight, w.MaxInFlight)
	b.Refused += w.Refused
	b.Arrived += w.Arrived
	b.admitted += w.admitted
	b.Rises, b.Knee, b.Baseline = w.Rises, w.Knee, w.Baseline
	b.merge(w)
}

// admitting returns how long w took admissions.
func (w *Window) admitting() time.Duration {
	if w.took > 0 {
		return w.took
	}
	return w.End.Sub(w.Start)
}

// Mean returns the mean latency of the requests that completed with
// Success, or 0 if there were none.
func (w *Window) Mean() time.Duration {
	if w.Samples == 0 {
		return 0
	}
	return time.Duration(w.sum / int64(w.Samples))
}

// Demand returns the requests that would have been inside the gate at
// once, on average, had it admitted every request that arrived while the
// window took admissions, at the window's mean latency (Little's law): the
// arrival rate times the mean latency, or 0 if the window saw none. Below
// Limit, the load fits under the limit, and refusals come from bursts; at
// or above it, the limit is what holds the load back.
func (w *Window) Demand() float64 {
	d := w.admitting()
	if d <= 0 || w.Samples == 0 {
		return 0
	}
	return float64(w.Arrived) / d.Seconds() * w.Mean().Seconds()
}

// Quantile returns the latency that a fraction q of the requests that
// completed with Success did not exceed, such as Quantile(0.99) for the
// 99th percentile, or 0 if there were none; q is clamped to [0, 1]. It
// reads a histogram whose buckets are 12.5% wide at most: the error is
// below that, and about 1% where latencies spread over many buckets.
func (w *Window) Quantile(q float64) time.Duration {
	var total int
	for _, n := range w.hist {
		total += int(n)
	}
	if total == 0 {
		return 0
	}
	rank := min(max(q, 0), 1) * float64(total)
	seen := 0.0
	for i, n := range w.hist {
		if n == 0 {
			continue
		}
		if seen+float64(n) >= rank {
			lo, width := bucketBounds(i)
			return time.Duration(lo + width*(rank-seen)/float64(n))
		}
		seen += float64(n)
	}
	lo, width := bucketBounds(nBuckets - 1)
	return time.Duration(lo + width)
}

// serving returns how many requests were in service at once, on average,
// not counting those queued: the rate of admissions times the baseline's
// mean latency (Little's law), or 0 without a baseline. Past the
// capacity, it is the capacity; below, the limit.
func (w *Window) serving() float64 {
	d := w.admitting()
	if d <= 0 || w.Baseline == nil {
		return 0
	}
	return float64(w.admitted) / d.Seconds() * w.Baseline.Mean().Seconds()
}

// quantileErr returns the standard error of w.Quantile(q), in
// nanoseconds, as the order statistics of w.Samples requests spread: the
// sampling error of the fraction q, times the spread of latency around
// the quantile, read from w itself.
func (w *Window) quantileErr(q float64) float64 {
	if w.Samples == 0 {
		return 0
	}
	lo, hi := max(q-0.05, 0), min(q+0.05, 1)
	spread := float64(w.Quantile(hi)-w.Quantile(lo)) / (hi - lo)
	return math.Sqrt(q*(1-q)/float64(w.Samples)) * spread
}

// shift returns how much later hi's quantile q was than lo's, and the
// standard error of that difference, in nanoseconds.
func shift(hi, lo *Window, q float64) (d, err float64) {
	d = float64(hi.Quantile(q) - lo.Quantile(q))
	return d, math.Hypot(hi.quantileErr(q), lo.quantileErr(q))
}

// meanErr returns the standard error of w.Mean(), in nanoseconds, from
// the spread of w's histogram.
func (w *Window) meanErr() float64 {
	if w.Samples == 0 {
		return 0
	}
	mean := float64(w.Mean())
	var ss, n float64
	for i, k := range w.hist {
		if k == 0 {
			continue
		}
		lo, width := bucketBounds(i)
		d := lo + width/2 - mean
		ss += float64(k) * d * d
		n += float64(k)
	}
	return math.Sqrt(ss/n) / math.Sqrt(float64(w.Samples))
}

// delayQuantiles are the quantiles whose shift delay reads, with the
// mean.
var delayQuantiles = [...]float64{0.1, 0.25, 0.5}

// delay returns how much later hi's requests were than lo's, and the
// standard error of that, in nanoseconds: the shifts of the mean and of
// the quantiles delayQuantiles, each weighed by its precision. When
// every request waits, every one of them shifts by the wait; which reads
// it most surely depends on the shape of latency (the low quantiles for
// a long tail, the mean for a narrow one), and the weights pick it from
// the windows themselves. The error treats the four shifts as
// independent, which they are not (they are read from the same
// requests): it may be up to half the true one; see delayBound.
func delay(hi, lo *Window) (d, err float64) {
	d, err, _ = delays(hi, lo)
	return d, err
}

// delayBound returns delay's shift with an error that does not count on
// the shifts being independent: their errors' mean, weighed as the shifts
// are, which is at least the true error of the weighed shift.
func delayBound(hi, lo *Window) (d, err float64) {
	d, _, err = delays(hi, lo)
	return d, err
}

// delays returns delay's shift, its error with the shifts independent,
// and the bound on it of delayBound.
func delays(hi, lo *Window) (d, err, bound float64) {
	floor := 1e-3 * float64(max(lo.Mean(), 1))
	var sum, wsum, esum float64
	add := func(v, e float64) {
		e = max(e, floor)
		sum += v / (e * e)
		wsum += 1 / (e * e)
		esum += 1 / e
	}
	add(float64(hi.Mean()-lo.Mean()), math.Hypot(hi.meanErr(), lo.meanErr()))
	for _, q := range delayQuantiles {
		add(shift(hi, lo, q))
	}
	return sum / wsum, 1 / math.Sqrt(wsum), esum / wsum
}

// Above returns the number of requests that completed with Success in
// more than d, counted to the resolution of the histogram: a request
// within 12.5% of d may be counted either way.
func (w *Window) Above(d time.Duration) int {
	if d <= 0 {
		return w.Samples
	}
	n := 0
	for i := bucketOf(int64(d)) + 1; i < nBuckets; i++ {
		n += int(w.hist[i])
	}
	return n
}
