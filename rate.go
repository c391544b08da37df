package limits

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Rate estimates how many events each key sees per time window, in fixed
// memory: two windows' worth of counters take turns, one counting the
// current window while the other keeps the window before it.
//
// Windows lie on a fixed grid from the Rate's creation: window k covers
// [start + k*interval, start + (k+1)*interval), for every key alike, whatever
// the traffic, so ResetIn can say exactly when the current window ends.
// The first call in a new window makes it current; nothing runs in the
// background.
//
// # What counts
//
// By default, and with a Sizing from the keys expected (Sizing.Keys), a
// window counts exactly first: a lock-free table of key fingerprints and
// counts, one 64-byte cache line for each key, holds as many keys as it
// has room for, and a conservative count-min sketch in the same block of
// memory counts the keys that find their line full (see Sizing for the
// sizes). A key with an entry is counted exactly, merged only with a key
// of the same line and 16-bit fingerprint, about one pair in 10,000 keys;
// a count past 32,767 goes on in the sketch. The default's 128 KiB a
// window are exact up to 5,000 keys a window (every key has an entry with
// probability 98.5%); with 10,000 keys, 99.5% have one, and the others
// share a sketch roomy enough that no key of docs/ACCURACY.md's workloads
// within a limit set at 2 to 10 times the median count is refused.
//
// With a Sizing that gives Hashes and Slots, or an accuracy (MaxOverFraction,
// Events and MaxOver, Failure), each window is an Estimator alone, the
// count-min sketch of pingora's Rate: plain, so that Observe(key, -n) takes
// events back, unless Sizing.Conservative.
//
// # Concurrency
//
// All methods are safe for concurrent use, take no locks and allocate
// nothing. At each change of window one caller, the first to claim it, clears
// the counters that held the window before last and then publishes the new
// window; callers that arrive while it works share the work, so that a
// claimer descheduled half-way does not hold the change up. A caller whose
// clock is still in the current window counts in it and clears nothing;
// one whose clock has passed it takes part in the change to the latest
// window claimed, its own or a later one, before it counts. A completed
// window stays readable until the window after it ends. Events observed
// while a change is in progress (microseconds at the default size) are
// counted in the window that is ending or in the new one: their own, or
// the one adjacent to theirs.
//
// Counters are cleared with a compare-and-swap from the value read before
// checking that the change is still wanted, and every counter carries a
// tag that alternates from one clearing of the same counters to the next,
// however many windows without an event came between: a caller
// descheduled in the middle of the work fails its swaps when it resumes,
// whatever the new window has counted since. Counts are lost in two cases
// only. An Observe that reads the current window and is descheduled for
// longer than an interval before it counts counts into a later window, or
// into counters being cleared, where its count may also lead a caller
// descheduled in the middle of the clearing to clear a counter of the new
// window that has come back to exactly that count. And when a change
// that follows a window without an event, and so clears both windows'
// memory, is still under way as the next window begins, a caller
// descheduled in the middle of it may clear a counter of that next
// window that has come back to exactly the value it read (which, in a
// plain Rate, then reads wrong until the window ends). No count is lost
// otherwise.
//
// With intervals shorter than the time it takes to clear a window, windows
// change faster than they can be cleared and counts are only approximate; any
// interval > 0 is accepted and never causes a panic.
//
// # Accuracy
//
// Estimates are never too low while events are observed with n >= 0. A
// key with an entry in the table is counted exactly. A key counted by a
// count-min sketch is too high by at most e*N/slots with probability
// 1 - e^-hashes, where N is the number of events the sketch counted in the
// window: the error grows with the number of distinct keys per window, not
// with the rate, and a Sizing sizes the windows from the keys expected.
// Conservative update (see Estimator) over-counts about half as much as
// plain update in a crowded sketch and far less in a roomy one, but cannot
// take events back: a Rate that counts exactly first, or is conservative,
// records nothing for n <= 0.
//
// Counts saturate in a Rate that counts exactly first or is conservative:
// a key whose count its window cannot hold reads math.MaxInt64, never
// less than its true count. A conservative count-min window holds counts
// up to math.MaxInt64, as a conservative Estimator does; one that counts
// exactly first, about 2^31 a key. A plain Rate's counts wrap past
// math.MaxInt64, as a plain Estimator's do, and a key that shares a
// counter holding more than 2^62 events may read that counter's count
// rather than its smallest.
type Rate struct {
	interval     time.Duration
	start        time.Time
	seed         maphash.Seed
	win          [2]window // window k counts into win[k&1]
	exact        bool      // win's have tables (see window)
	conservative bool      // count with conservative update

	// claimed is the newest window whose change has been claimed; cur the
	// newest whose Estimator is ready, so that callers count into
	// slots[cur&1]. Both only grow; cur <= claimed.
	claimed atomic.Int64
	cur     atomic.Int64
	// cleared[s][i] is the window for which chunk i of slots[s] was last
	// zeroed, so that callers sharing a change of window skip the chunks
	// already done.
	cleared [2][]atomic.Int64
	// gen[s] is the window for which win[s] was last cleared, or is
	// being cleared, shifted left by one, and the tag of that clearing in
	// the low bit (see tagFor).
	gen [2]atomic.Int64

	// stall, nil but in tests, is called by a caller taking part in a
	// change of window between its check that the change is still wanted
	// and its first compare-and-swap on a chunk of win[slot], whose values
	// it read in seen, to play a caller descheduled there; stallRetry
	// likewise before each compare-and-swap it tries again.
	stall      func(slot int, seen *[clearChunk]int64)
	stallRetry func()
}

// RateComponents is what RateWith passes to its function: the counts of one
// key in the latest completed window and in the current one. Its zero value
// is a key with no events.
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

// Proportional estimates the per-second rate over the last interval, a
// sliding window: the current window's count plus the share of the previous
// window's count that still falls within one interval of now, assuming the
// previous window's events were spread evenly. It returns
// (Prev*(1-Fraction) + Curr) / Interval.Seconds(), and is meant for RateWith.
func (c RateComponents) Proportional() float64 {
	return (float64(c.Prev)*(1-c.Fraction) + float64(c.Curr)) / c.Interval.Seconds()
}

// NewRate returns a Rate with windows of the given interval. Without a
// Sizing, or with the zero Sizing (Conservative or not), each window
// counts exactly first (see Rate) in 128 KiB: a table of 1,024 lines, room
// for 16,384 keys, and a 4 x 4096 conservative sketch of 32-bit counters;
// 256 KiB in all, the memory of the former default, two conservative
// sketches of 4 x 4096. With 10,000 keys a window, fewer than 0.1% of the
// keys within a limit set at 2, 5 or 10 times the median key's count are
// refused on Zipf, uniform, bimodal and lognormal workloads, where the
// former default refused up to 8% (docs/ACCURACY.md). A Sizing from the
// keys sizes such windows for more keys; one with hashes and slots, or an
// accuracy, selects count-min windows (see Sizing):
//
//	limits.NewRate(time.Minute, limits.Sizing{Keys: 50_000})
//	limits.NewRate(time.Minute, limits.Sizing{Hashes: 4, Slots: 4096}) // pingora's windows, plain, to take events back with Observe(key, -n)
//
// It panics if interval <= 0, if the Sizing is not valid (check one read
// from configuration with Sizing.Dims first), or if an option does not
// apply to a Rate.
func NewRate(interval time.Duration, opts ...Option) *Rate {
	if interval <= 0 {
		panic(fmt.Sprintf("limits: interval must be > 0, got %v", interval))
	}
	var o options
	if err := collect(&o, opts, optSizing, "a Rate"); err != nil {
		panic("limits: " + err.Error())
	}
	lines, hashes, slots := o.sizing.rateSize()
	r := &Rate{interval: interval, seed: maphash.MakeSeed(), exact: lines > 0, conservative: o.sizing.Conservative || lines > 0}
	r.win[0] = newWindow(lines, hashes, slots, r.conservative, r.seed)
	r.win[1] = newWindow(lines, hashes, slots, r.conservative, r.seed)
	// Window 0 counts in win[0], cleared with tag 0 as made; its Prev,
	// window -1, is win[1], cleared with tag 1.
	r.win[1].fill(1)
	r.gen[1].Store(-1<<1 | 1)
	chunks := (len(r.win[0].cells) + clearChunk - 1) / clearChunk
	r.cleared[0] = make([]atomic.Int64, chunks)
	r.cleared[1] = make([]atomic.Int64, chunks)
	r.start = time.Now()
	return r
}

// The default windows of a Rate, 128 KiB each: a table of 1,024 lines,
// room for 16,384 keys in 64 KiB, and a 4 x 4096 conservative sketch of
// 32-bit counters, 64 KiB.
const defaultRateLines = 1024

var defaultRateSketch = [2]int{4, 4096}

// Interval returns the length of r's windows.
func (r *Rate) Interval() time.Duration { return r.interval }

// Size returns the memory held by r's counters, in bytes: 256 KiB by
// default.
func (r *Rate) Size() int { return 8 * (len(r.win[0].cells) + len(r.win[1].cells)) }

// Hash returns the hash of a key held as bytes, for ObserveHash:
// ObserveHash(r.Hash(b), n) counts the same key as Observe(string(b), n),
// without converting b to a string, which would allocate.
func (r *Rate) Hash(key []byte) uint64 { return maphash.Bytes(r.seed, key) }

// Observe records n events for key in the current window and returns the
// key's count in that window so far, this call included. An event that races
// with a change of window is counted in, and reported for, the window that is
// ending (see Rate).
//
// n == 0 records nothing and returns the current count. A Rate that
// counts exactly first (the default) or is conservative records nothing
// for any n <= 0, as it cannot take events back; a plain one (count-min
// windows without Conservative) takes back events observed before for a
// negative n, and its estimates may then be too low.
func (r *Rate) Observe(key string, n int64) int64 {
	return r.ObserveHash(maphash.String(r.seed, key), n)
}

// ObserveHash is Observe for a key hashed with Hash.
func (r *Rate) ObserveHash(h uint64, n int64) int64 {
	c := r.cur.Load()
	d := r.elapsed()
	// The clock is still in window c (or, read before another caller moved
	// on, in an earlier one) unless it is a full interval past c's start;
	// c*interval cannot overflow, as the clock once read that much.
	if d-time.Duration(c)*r.interval >= r.interval {
		r.advance(d)
		c = r.cur.Load()
	}
	w := &r.win[c&1]
	if r.exact {
		return w.observe(h, n)
	}
	return w.add(h, n, r.tagOf(c), r.conservative)
}

// get returns key hash h's estimate in window k, held by r.win[k&1].
func (r *Rate) get(h uint64, k int64) int64 {
	w := &r.win[k&1]
	if r.exact {
		return w.get(h)
	}
	return w.read(h, r.tagOf(k), r.conservative)
}

// tagOf returns the tag of the counters of window k, current or latest
// completed: that of the latest clearing of win[k&1], which was for k.
func (r *Rate) tagOf(k int64) int64 { return r.gen[k&1].Load() & 1 }

// tagFor returns the tag with which win[slot] is cleared for window k,
// and false if a later window has claimed win[slot] since. The first
// caller to ask for k sets it, the other of the tag of the slot's
// clearing before, so that callers sharing the change agree: a slot's
// counters never carry the tag they carried before their latest
// clearing, whatever the windows skipped between, and so never hold a
// value that a caller descheduled in the middle of the clearing read
// (see zero).
func (r *Rate) tagFor(slot int, k int64) (int64, bool) {
	for {
		g := r.gen[slot].Load()
		switch {
		case g>>1 == k:
			return g & 1, true
		case g>>1 > k:
			return 0, false
		}
		t := 1 - g&1
		if r.gen[slot].CompareAndSwap(g, k<<1|t) {
			return t, true
		}
	}
}

// Rate returns key's rate over the latest completed window, in events per
// second: its count in that window divided by the interval. It returns 0 when
// the key saw nothing then, or when that window ended more than an interval
// ago.
func (r *Rate) Rate(key string) float64 {
	return windowRate(r.components(maphash.String(r.seed, key)))
}

// RateWith returns fn applied to key's counts in the current and latest
// completed windows, for rate estimates of the caller's choosing (see
// RateComponents.Proportional). It changes nothing.
func (r *Rate) RateWith(key string, fn func(RateComponents) float64) float64 {
	return fn(r.components(maphash.String(r.seed, key)))
}

// Peek returns key's count in the current window so far, without observing
// anything or changing window.
func (r *Rate) Peek(key string) int64 {
	return r.components(maphash.String(r.seed, key)).Curr
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

// advance is called by an observer whose clock, d after r's creation, has
// passed the current window. It claims the clock's window k, unless another
// caller has, and then takes part in the change to the window claimed, k
// or a later one, until it is published. (Counting in the current window
// while a later one's change is under way could count into the counters
// it clears: that change follows a window without an event, so it clears
// both windows'.)
func (r *Rate) advance(d time.Duration) {
	k := int64(d / r.interval)
	for f := r.claimed.Load(); k > f; f = r.claimed.Load() {
		if r.claimed.CompareAndSwap(f, k) {
			break
		}
	}
	// A change superseded while this caller took part in it leaves the
	// work to the later one, which it then joins.
	for f := r.claimed.Load(); ; {
		r.flip(f)
		g := r.claimed.Load()
		if g == f {
			return
		}
		f = g
	}
}

// flip makes window k current: it zeroes Estimator k&1, which holds window
// k-2 or older, and, if the window before k is newer than the current one
// and so saw nothing, the other Estimator as well; then it publishes k.
//
// Every caller that finds the change unpublished does this work with the
// others, chunk by chunk, each from a random chunk and skipping the chunks
// already zeroed. Each goes over every chunk before publishing, zeroing
// again any chunk not marked done, so the change completes as soon as any
// one caller runs through it, whoever else was descheduled half-way.
func (r *Rate) flip(k int64) {
	if !r.wanted(k, k) {
		// Done, or superseded by a change that clears the same memory: a
		// caller that took its tags now could give them the tag that
		// memory already carries (see tagFor).
		return
	}
	c := r.cur.Load()
	chunks := len(r.cleared[0])
	total := chunks
	var tags [2]int64 // for win[k&1], and for win[(k-1)&1] if cleared too
	var ok bool
	if tags[0], ok = r.tagFor(int(k&1), k); !ok {
		return
	}
	if k-1 > c {
		total *= 2
		if tags[1], ok = r.tagFor(int((k-1)&1), k-1); !ok {
			return
		}
	}
	from := rand.IntN(total)
	for j := range total {
		i := (from + j) % total
		slot, as, t := k&1, k, tags[0]
		if i >= chunks {
			slot, as, t, i = (k-1)&1, k-1, tags[1], i-chunks
		}
		if r.cleared[slot][i].Load() == k {
			continue
		}
		w := &r.win[slot]
		cells := w.cells[i*clearChunk : min((i+1)*clearChunk, len(w.cells))]
		var seen [clearChunk]int64
		for n := range cells {
			seen[n] = cells[n].Load()
		}
		if !r.zero(k, as, int(slot), cells, &seen, w.blank(i*clearChunk, t)) {
			if as < k && r.wanted(k, k) {
				// Window k-1 was published meanwhile, by the change to it
				// that was under way, or a change to k+1 was claimed: the
				// change to k leaves k-1's memory to them.
				continue
			}
			return
		}
		r.cleared[slot][i].Store(k)
	}
	for ; c < k; c = r.cur.Load() {
		if r.cur.CompareAndSwap(c, k) {
			return
		}
	}
}

// clearChunk is how many counters make one chunk of the work of a change of
// window.
const clearChunk = 32

// wanted reports whether the change to window k still needs to clear the
// memory of window as, k or k-1: window as has not been published, and no
// change to as+2 or later, which would clear the same memory for a later
// window, has been claimed. (A change to k-1 under way as the change to
// k is claimed may publish k-1 before the change to k has cleared its
// memory, and that memory is then current; and a change to k+1 clears
// k-1's memory for itself.)
func (r *Rate) wanted(k, as int64) bool {
	return r.cur.Load() < as && r.claimed.Load() < as+2
}

// zero sets each of cells, of win[slot], to z, its value once cleared,
// for the change to window k, with a compare-and-swap from seen, the
// values read before checking that the change is still wanted. A caller
// descheduled after that check, resuming once the slot counts a window,
// thus fails its swaps: every counter carries the tag of its slot's
// latest clearing (see window and tagFor), and this clearing's tag
// differs from that of the one before, whose counts the caller read. A
// counter that moved for another reason (a caller that read the current
// window and was descheduled for an interval counting into it) is read
// again, as long as the change is still wanted. cells hold window as, k
// or k-1, once cleared. It returns false if it stopped because the change
// no longer is (see wanted).
func (r *Rate) zero(k, as int64, slot int, cells []atomic.Int64, seen *[clearChunk]int64, z int64) bool {
	if !r.wanted(k, as) {
		return false
	}
	if r.stall != nil {
		r.stall(slot, seen)
	}
	return r.swap(k, as, cells, seen, z)
}

// swap is zero past its first check. A counter read again is read before
// the check that the change is still wanted: a value read after window as
// was published may hold its events, which the swap would then zero,
// while one read before holds none: it is the window's before, or z, or z
// plus the events of a caller descheduled for an interval (see Rate).
func (r *Rate) swap(k, as int64, cells []atomic.Int64, seen *[clearChunk]int64, z int64) bool {
	for n := range cells {
		for v := seen[n]; v != z && !cells[n].CompareAndSwap(v, z); {
			v = cells[n].Load()
			if !r.wanted(k, as) {
				return false
			}
			if r.stallRetry != nil {
				r.stallRetry()
			}
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
			rc.Curr = r.get(h, c)
			rc.Prev = r.get(h, c-1)
		case c + 1: // window c just completed; window w has no Estimator yet
			rc.Prev = r.get(h, c)
		}
		if r.claimed.Load() == f {
			break
		}
	}
	return rc
}
