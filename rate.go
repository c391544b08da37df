package limits

import (
	"fmt"
	"hash/maphash"
	"sync/atomic"
	"time"
)

// Rate estimates how many events each key sees per time window, in fixed
// memory: two Estimators take turns, one counting the current window while
// the other keeps the window before it.
//
// Windows lie on a fixed grid from the Rate's creation: window k covers
// [start + k*interval, start + (k+1)*interval), for every key alike, whatever
// the traffic, so ResetIn can say exactly when the current window ends.
// The first call in a new window makes it current; nothing runs in the
// background.
//
// # Concurrency
//
// All methods are safe for concurrent use, take no locks and allocate
// nothing. At each change of window one caller, the first to claim it, clears
// the Estimator that held the window before last and then publishes the new
// window; callers that read the clock earlier can neither claim the change
// nor clear anything. A completed window stays readable until the window
// after it ends. Events observed while a change is in progress (a few
// microseconds at the default size) are counted in the window that is ending,
// the one adjacent to theirs; when a change follows two or more idle windows
// and clears both Estimators, an event racing with it may be lost. No count
// is lost otherwise.
//
// With intervals shorter than the time it takes to clear an Estimator, windows
// change faster than they can be cleared and counts are only approximate; any
// interval > 0 is accepted and never causes a panic.
//
// # Accuracy
//
// Counts are count-min estimates (see Estimator): never too low while events
// are observed with n >= 0, and too high by at most e*N/slots with
// probability 1 - e^-hashes, where N is the number of events in the window.
// The error grows with the number of distinct keys per window, not with the
// rate: NewRateSized sizes the windows from the keys expected (see Sizing).
// A conservative Rate (NewConservativeRate) counts with conservative update
// (see ConservativeEstimator): in the same memory and for a little more time
// per call, it over-counts about half as much in a crowded sketch and far
// less in a roomy one, but cannot take events back.
type Rate struct {
	interval     time.Duration
	start        time.Time
	seed         maphash.Seed
	slots        [2]*Estimator // window k counts into slots[k&1]
	conservative bool          // count with incrConservative

	// claimed is the newest window whose change has been claimed; cur the
	// newest whose Estimator is ready, so that callers count into
	// slots[cur&1]. Both only grow; cur <= claimed.
	claimed atomic.Int64
	cur     atomic.Int64
}

// RateComponents is what RateWith passes to its function: the counts of one
// key in the latest completed window and in the current one.
type RateComponents struct {
	// Prev is the key's count in the latest completed window, or 0 if that
	// window ended more than one interval ago.
	Prev int64
	// Curr is the key's count so far in the current window.
	Curr int64
	// Interval is the length of a window.
	Interval time.Duration
	// Fraction is how much of the current window has passed, in [0, 1).
	Fraction float64
}

// ProportionalRate estimates the per-second rate over the last interval, a
// sliding window: the current window's count plus the share of the previous
// window's count that still falls within one interval of now, assuming the
// previous window's events were spread evenly. It returns
// (Prev*(1-Fraction) + Curr) / Interval.Seconds(), and is meant for RateWith.
func ProportionalRate(c RateComponents) float64 {
	return (float64(c.Prev)*(1-c.Fraction) + float64(c.Curr)) / c.Interval.Seconds()
}

// NewRate returns a Rate with windows of the given interval, each counted by
// an Estimator of 4 hashes x 1024 slots (64 KiB in all). It panics if
// interval <= 0.
func NewRate(interval time.Duration) *Rate {
	return NewRateSize(interval, 4, 1024)
}

// NewRateSize returns a Rate whose two Estimators have the given hashes and
// slots (see NewEstimator). It panics if interval <= 0, hashes < 1 or
// slots < 1.
func NewRateSize(interval time.Duration, hashes, slots int) *Rate {
	return newRate(interval, hashes, slots, false)
}

// NewRateSized returns a Rate whose windows are sized by s, with s.Keys and
// s.Events counted per window (see Sizing.Dims). It panics if interval <= 0
// or s is not valid.
func NewRateSized(interval time.Duration, s Sizing) *Rate {
	hashes, slots := s.mustDims()
	return newRate(interval, hashes, slots, false)
}

// NewConservativeRate returns a Rate that counts with conservative update,
// in windows of hashes x slots (see ConservativeEstimator). It is a Rate like
// any other, with two differences: estimates are lower (never too low, and
// never above a plain Rate's), and Observe ignores n <= 0, as a conservative
// sketch cannot take events back. Observe costs a little more (see the
// package benchmarks). It panics if interval <= 0, hashes < 1, hashes > 16
// or slots < 1.
func NewConservativeRate(interval time.Duration, hashes, slots int) *Rate {
	return newRate(interval, hashes, slots, true)
}

// NewConservativeRateSized is NewConservativeRate with windows sized by s,
// as in NewRateSized. It panics if interval <= 0, s is not valid, or s asks
// for more than 16 hashes.
func NewConservativeRateSized(interval time.Duration, s Sizing) *Rate {
	hashes, slots := s.mustDims()
	return newRate(interval, hashes, slots, true)
}

// newRate returns a Rate of the given size and mode.
func newRate(interval time.Duration, hashes, slots int, conservative bool) *Rate {
	if interval <= 0 {
		panic(fmt.Sprintf("limits: interval must be > 0, got %v", interval))
	}
	r := &Rate{interval: interval, seed: maphash.MakeSeed(), conservative: conservative}
	est := newEstimator
	if conservative {
		est = newConservative
	}
	r.slots[0] = est(hashes, slots, r.seed)
	r.slots[1] = est(hashes, slots, r.seed)
	r.start = time.Now()
	return r
}

// Interval returns the length of r's windows.
func (r *Rate) Interval() time.Duration { return r.interval }

// Size returns the memory held by r's counters, in bytes.
func (r *Rate) Size() int { return r.slots[0].Size() + r.slots[1].Size() }

// Hash returns the hash of key that the Hash variants of r's methods take,
// for keys held as bytes.
func (r *Rate) Hash(key []byte) uint64 { return maphash.Bytes(r.seed, key) }

// HashString is Hash for a string key: compute it once to make several
// calls for the same key.
func (r *Rate) HashString(key string) uint64 { return maphash.String(r.seed, key) }

// Observe records n events for key in the current window and returns the
// key's count in that window so far, this call included. An event that races
// with a change of window is counted in, and reported for, the window that is
// ending (see Rate).
//
// n == 0 records nothing and returns the current count. A negative n takes
// back events observed before; estimates may then be too low. A conservative
// Rate (NewConservativeRate) records nothing for any n <= 0.
func (r *Rate) Observe(key string, n int64) int64 {
	return r.ObserveHash(r.HashString(key), n)
}

// ObserveHash is Observe for a key already hashed with Hash or HashString.
func (r *Rate) ObserveHash(h uint64, n int64) int64 {
	d := r.elapsed()
	c := r.cur.Load()
	// The clock is still in window c (or, read before another caller moved
	// on, in an earlier one) unless it is a full interval past c's start;
	// c*interval cannot overflow, as the clock once read that much.
	if d-time.Duration(c)*r.interval >= r.interval {
		r.advance(int64(d / r.interval))
		c = r.cur.Load()
	}
	if r.conservative {
		return r.slots[c&1].incrConservative(h, n)
	}
	return r.slots[c&1].IncrHash(h, n)
}

// Rate returns key's rate over the latest completed window, in events per
// second: its count in that window divided by the interval. It returns 0 when
// the key saw nothing then, or when that window ended more than an interval
// ago.
func (r *Rate) Rate(key string) float64 {
	return r.RateWithHash(r.HashString(key), windowRate)
}

// RateWith returns fn applied to key's counts in the current and latest
// completed windows, for rate estimates of the caller's choosing (see
// ProportionalRate). It changes nothing.
func (r *Rate) RateWith(key string, fn func(RateComponents) float64) float64 {
	return r.RateWithHash(r.HashString(key), fn)
}

// RateWithHash is RateWith for a key already hashed with Hash or HashString.
func (r *Rate) RateWithHash(h uint64, fn func(RateComponents) float64) float64 {
	return fn(r.components(h))
}

// Peek returns key's count in the current window so far, without observing
// anything or changing window.
func (r *Rate) Peek(key string) int64 {
	return r.PeekHash(r.HashString(key))
}

// PeekHash is Peek for a key already hashed with Hash or HashString.
func (r *Rate) PeekHash(h uint64) int64 {
	return r.components(h).Curr
}

// ResetIn returns the time left until the current window ends, in
// (0, interval]: when counts start again from zero.
func (r *Rate) ResetIn() time.Duration {
	_, into := r.position()
	return r.interval - into
}

// windowRate is the rate Rate reports: the latest completed window's count
// per second.
func windowRate(c RateComponents) float64 {
	return float64(c.Prev) / c.Interval.Seconds()
}

// position returns the index of the window the clock is in and how far into
// it the clock is.
func (r *Rate) position() (k int64, into time.Duration) {
	d := r.elapsed()
	k = int64(d / r.interval)
	return k, d - time.Duration(k)*r.interval
}

// elapsed returns the time since r was created.
func (r *Rate) elapsed() time.Duration {
	d := time.Since(r.start)
	if d < 0 { // only a clock without monotonic reading can step back
		d = 0
	}
	return d
}

// advance makes window k current, unless another caller has claimed k or a
// later window. Only the caller whose claim succeeds clears anything.
func (r *Rate) advance(k int64) {
	f := r.claimed.Load()
	for {
		if k <= f {
			return
		}
		if r.claimed.CompareAndSwap(f, k) {
			break
		}
		f = r.claimed.Load()
	}
	// Window f is the newest one that has an Estimator. Estimator k&1 holds
	// window k-2 or older, no longer needed; if window k-1 came after f, it
	// saw nothing and its Estimator must read zero as well.
	if !r.clear(k, k&1) {
		return
	}
	if k-1 > f && !r.clear(k, (k-1)&1) {
		return
	}
	for c := r.cur.Load(); c < k; c = r.cur.Load() {
		if r.cur.CompareAndSwap(c, k) {
			return
		}
	}
}

// clearChunk is how many counters clear zeroes between two checks that its
// change of window is still the newest for that Estimator.
const clearChunk = 64

// clear zeroes Estimator slot for the change to window k. It stops, returning
// false, once a change to window k+2 or later has been claimed: that change
// owns the Estimator now, and it may already be counting a live window.
func (r *Rate) clear(k, slot int64) bool {
	cells := r.slots[slot].cells
	for i := 0; i < len(cells); i += clearChunk {
		if r.claimed.Load() >= k+2 {
			return false
		}
		for j := i; j < min(i+clearChunk, len(cells)); j++ {
			cells[j].Store(0)
		}
	}
	return true
}

// components reads key h's counts in the current and latest completed
// windows. A read that overlaps a change of window is retried, so that it
// never reports an Estimator that was being cleared.
func (r *Rate) components(h uint64) RateComponents {
	rc := RateComponents{Interval: r.interval}
	for range 4 {
		k, into := r.position()
		f := r.claimed.Load()
		c := r.cur.Load()
		// The window to report: the clock's, unless another caller has
		// already claimed or published a later one.
		w := max(k, f, c)
		rc.Fraction = 0
		if w == k {
			rc.Fraction = float64(into) / float64(r.interval)
		}
		rc.Prev, rc.Curr = 0, 0
		switch w {
		case c: // no change in progress
			rc.Curr = r.slots[c&1].GetHash(h)
			rc.Prev = r.slots[(c-1)&1].GetHash(h)
		case c + 1: // window c just completed; window w has no Estimator yet
			rc.Prev = r.slots[c&1].GetHash(h)
		}
		if r.claimed.Load() == f {
			break
		}
	}
	return rc
}
