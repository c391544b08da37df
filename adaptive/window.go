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
	// Samples counts the requests that completed with Success, whose
	// latency the window holds; Dropped and Ignored those reported so.
	Samples, Dropped, Ignored int
	// Rises counts the windows just before this one, in a row, after which
	// the limit rose: a law may grow faster the longer it has grown.
	Rises int
	// Baseline is the window measured at low concurrency that tells how
	// fast requests are served without queueing, or nil if the Controller
	// has none yet (or does not probe). Its own Baseline is nil.
	Baseline *Window

	sum  int64 // nanoseconds, of the Samples
	hist [nBuckets]uint32
}

// Mean returns the mean latency of the requests that completed with
// Success, or 0 if there were none.
func (w *Window) Mean() time.Duration {
	if w.Samples == 0 {
		return 0
	}
	return time.Duration(w.sum / int64(w.Samples))
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
