package limits

import (
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestRateNeverUnderCountsUnderContention has 8 goroutines observe 3 keys,
// n from 1 to 3, on a 250us grid of a 1ms Rate, for a thousand windows.
// Time stands still within each step of the grid, and the change of window
// is made at the first step of each window, by the callers of that step;
// events of that step may be counted in the window ending (the adjacent
// one), those of the other steps are counted in their own. So an Observe
// at a later step returns at least its own n plus the events of its key
// completed at the window's later steps before it started, and, read
// between the first two steps of window w, the key's counts in w and w-1
// together are at least the events of w's first step plus those of the
// later steps of w-1. A participant in a change of window that zeroed a
// counter after the new window was published, once the counter had
// climbed back to the value it read, could break both.
func TestRateNeverUnderCountsUnderContention(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"plain 2x16", []Option{Sizing{Hashes: 2, Slots: 16}}},
		{"plain 4x8", []Option{Sizing{Hashes: 4, Slots: 8}}},
		{"conservative 2x16", []Option{Sizing{Hashes: 2, Slots: 16, Conservative: true}}},
		{"default", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				underCountRun(t, NewRate(time.Millisecond, tc.opts...), func(int64) bool { return true })
			})
		})
		// Windows without an event, one to four in a row: the change after
		// them clears both windows' counters, and a tag taken from the
		// window's number would be the same as before after three.
		t.Run(tc.name+" idle", func(t *testing.T) {
			const events = "xxx.xx..xx...xx....x" // over and over
			synctest.Test(t, func(t *testing.T) {
				underCountRun(t, NewRate(time.Millisecond, tc.opts...), func(w int64) bool {
					return events[w%int64(len(events))] == 'x'
				})
			})
		})
	}
}

// underCountRun is TestRateNeverUnderCountsUnderContention for one Rate,
// made in the test's bubble, with events in the windows w for which
// active(w) holds.
func underCountRun(t *testing.T, r *Rate, active func(w int64) bool) {
	const (
		windows = 1000
		keys    = 3
		burst   = 2 // Observes per goroutine and step
	)
	names := [keys]string{"k0", "k1", "k2"}
	// first[w%4][k] and later[w%4][k] count the events of key k completed
	// in window w at its first step and at the later ones; a window's
	// slots are reset, at its second step, for window w+2.
	var first, later [4][keys]atomic.Int64
	var bad atomic.Int64
	fail := func(format string, args ...any) {
		if bad.Add(1) <= 3 {
			t.Errorf(format, args...)
		}
	}
	var wg sync.WaitGroup
	start := time.Now()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 19))
			for s := range 4 * windows {
				sleepTo(start, time.Duration(s)*250*time.Microsecond)
				w, _ := r.position()
				if !active(w) {
					continue
				}
				for range burst {
					k := rng.IntN(keys)
					n := 1 + rng.Int64N(3)
					if s%4 == 0 {
						r.Observe(names[k], n)
						first[w%4][k].Add(n)
						continue
					}
					before := later[w%4][k].Load()
					if got := r.Observe(names[k], n); got < before+n {
						fail("window %d: Observe(k%d, %d) = %d after %d events completed at its later steps", w, k, n, got, before)
					}
					later[w%4][k].Add(n)
				}
			}
		})
	}
	// The checker runs between the first two steps of each window.
	wg.Go(func() {
		for w := range int64(windows) {
			sleepTo(start, time.Duration(w)*time.Millisecond+100*time.Microsecond)
			for k := range keys {
				var c RateComponents
				r.RateWith(names[k], func(rc RateComponents) float64 { c = rc; return 0 })
				want := first[w%4][k].Load()
				if w > 0 && active(w-1) {
					want += later[(w-1)%4][k].Load()
				}
				if c.Curr+c.Prev < want {
					fail("window %d: k%d counts %d and %d in windows %d and %d, want at least %d together", w, k, c.Curr, c.Prev, w, w-1, want)
				}
				first[(w+2)%4][k].Store(0)
				later[(w+2)%4][k].Store(0)
			}
		}
	})
	wg.Wait()
	if n := bad.Load(); n > 0 {
		t.Errorf("%d under-counts in %d windows", n, windows)
	}
}

// TestRateLateZeroingAfterPublish plays the interleaving behind the
// under-counts of TestRateNeverUnderCountsUnderContention: a caller taking
// part in a change of window reads a chunk of counters, checks that the
// change is still wanted, and stalls; another caller makes the change and
// publishes the new window, whose events bring a counter back to the
// value the first caller read; the first caller resumes. It must not zero
// the live count.
func TestRateLateZeroingAfterPublish(t *testing.T) {
	for _, mode := range rateModes {
		t.Run(mode.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := beforeChange(mode.new)
				resume := stallChange(r, func(int, *[clearChunk]int64) bool { return true }) // the change to window 2
				for i := range 5 {
					got := r.Observe("a", 1)
					if got < int64(i+1) {
						t.Fatalf("window 2: Observe(a) = %d after %d events", got, i+1)
					}
				}
				resume()
				want := int64(5)
				if r.cur.Load() != 2 {
					t.Fatalf("window = %d after the change, want 2", r.cur.Load())
				}
				// Events observed while the change was held up may have been
				// counted in window 1, the one ending; none may be lost.
				var c RateComponents
				r.RateWith("a", func(rc RateComponents) float64 { c = rc; return 0 })
				if got := c.Curr + c.Prev - 1; got < want {
					t.Errorf("after the late caller resumed: a counts %d in window 2 and %d in window 1 (1 before the change), %d events lost", c.Curr, c.Prev, want-got)
				}
			})
		})
	}
}

// TestRateRetryZeroingAfterPublish plays another interleaving of a change
// of window: a caller clearing a chunk finds a counter moved since it read
// it, checks that the change is still wanted, and stalls before it tries
// again; another caller makes the change and publishes the new window,
// and counts events in it; the first caller resumes. It must not zero
// those events, as it would by reading the counter again after its check.
func TestRateRetryZeroingAfterPublish(t *testing.T) {
	for _, mode := range rateModes {
		t.Run(mode.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := beforeChange(mode.new)
				const k = 2
				w := &r.win[k&1]
				cells := w.cells[:min(clearChunk, len(w.cells))]
				// What the caller read: a's counter, holding window 0's
				// events, has moved since.
				var seen [clearChunk]int64
				moved := 0
				for n := range cells {
					seen[n] = cells[n].Load()
					if seen[n] != w.blank(n, r.tagOf(0)) {
						seen[n] ^= 1 << 20
						moved++
					}
				}
				if moved == 0 {
					t.Fatal("no counter holds a's events")
				}
				const events = 3
				r.stallRetry = func() {
					r.stallRetry = nil // only the first retry stalls
					for range events {
						r.Observe("a", 1) // makes the change to window 2, and counts in it
					}
				}
				r.claimed.Store(k)
				t0, _ := r.tagFor(k&1, k)
				r.swap(k, k, cells, &seen, w.blank(0, t0))
				if r.cur.Load() != k {
					t.Fatalf("window %d, want %d", r.cur.Load(), k)
				}
				if got := r.Peek("a"); got < events {
					t.Errorf("a counts %d in window 2 after %d events", got, events)
				}
			})
		})
	}
}

// beforeChange returns a one-chunk Rate of one second made by mk, with 5
// events of "a" in window 0, held by Estimator 0, and 1 in window 1, its
// clock 2s on, in window 2, not yet changed to. Call it in a bubble.
func beforeChange(mk func(iv time.Duration, hashes, slots int) *Rate) *Rate {
	r := mk(time.Second, 1, 8)
	for range 5 {
		r.Observe("a", 1)
	}
	time.Sleep(time.Second)
	r.Observe("a", 1)
	time.Sleep(time.Second)
	return r
}

// TestRateStaleClearAfterIdleWindows plays a change of window after three
// windows without an event, when the Estimator (or table) that counts the
// new window last counted the window four before it: a caller taking
// part in the change reads a chunk holding that old window's counts,
// checks that the change is still wanted, and stalls; another caller
// makes the change, publishes it and counts as many events of the same
// key as the old window had; the first caller resumes. Its swap must
// fail, as the counters carry a tag other than the one it read, though
// window 4's tag by the window's number would be window 0's.
func TestRateStaleClearAfterIdleWindows(t *testing.T) {
	for _, mode := range allRateModes() {
		t.Run(mode.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := mode.new(time.Second, 1, 8)
				const events = 5
				for range events {
					r.Observe("a", 1) // window 0, counted in win[0]
				}
				time.Sleep(4 * time.Second) // windows 1 to 3 see nothing; window 4 counts in win[0]
				// The change to window 4 stalls at the chunk that holds a's
				// counts of window 0.
				resume := stallChange(r, func(slot int, seen *[clearChunk]int64) bool {
					return slot == 0 && *seen != [clearChunk]int64{}
				})
				for i := range events {
					if got := r.Observe("a", 1); got != int64(i+1) {
						t.Fatalf("window 4: Observe(a) = %d after %d events", got, i+1)
					}
				}
				resume()
				if r.cur.Load() != 4 {
					t.Fatalf("window = %d after the change, want 4", r.cur.Load())
				}
				if got := r.Peek("a"); got < events {
					t.Errorf("a counts %d in window 4 after %d events: the late caller cleared them", got, events)
				}
			})
		})
	}
}

// TestRateLateClaimAfterIdleWindow plays a caller that reads the clock at
// the end of a window that follows one without an event, and finds, on
// its way to claim the change to its window, that another caller has
// claimed the next window already; that other caller is descheduled
// before it starts the change, which then clears both windows' counters.
// The first caller's event must not be counted into counters that the
// change clears, but in the new window or the one before.
func TestRateLateClaimAfterIdleWindow(t *testing.T) {
	for _, mode := range allRateModes() {
		t.Run(mode.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := mode.new(time.Second, 1, 8)
				r.Observe("b", 1) // window 0; window 1 sees nothing
				time.Sleep(1500 * time.Millisecond)
				// The first caller reads window 0 as current and then its
				// clock in window 1, just before another caller's clock
				// reads window 2: that caller claims it, and is descheduled.
				r.claimed.Store(2)
				r.Observe("a", 1)
				time.Sleep(time.Second)
				r.flip(2) // the descheduled caller resumes
				var c RateComponents
				r.RateWith("a", func(rc RateComponents) float64 { c = rc; return 0 })
				if r.cur.Load() != 2 || c.Curr+c.Prev != 1 {
					t.Errorf("window %d: a counts %d in it and %d in the window before, want 1 in all", r.cur.Load(), c.Curr, c.Prev)
				}
			})
		})
	}
}

// allRateModes returns rateModes and the exact-first default, which
// ignores hashes and slots.
func allRateModes() []struct {
	name string
	new  func(iv time.Duration, hashes, slots int) *Rate
} {
	return append(rateModes[:len(rateModes):len(rateModes)], struct {
		name string
		new  func(iv time.Duration, hashes, slots int) *Rate
	}{"exact", func(iv time.Duration, _, _ int) *Rate { return NewRate(iv) }})
}

// stallChange has a caller observe "b", which starts the change of window
// r's clock calls for, and stall in it at the first chunk of win[slot],
// read in seen, for which at holds; it returns once the caller is
// stalled, with a function that lets it resume and waits for its Observe
// to return.
func stallChange(r *Rate, at func(slot int, seen *[clearChunk]int64) bool) (resume func()) {
	stalled, resumed := make(chan struct{}), make(chan struct{})
	r.stall = func(slot int, seen *[clearChunk]int64) {
		if !at(slot, seen) {
			return
		}
		r.stall = nil // only the first caller stalls
		close(stalled)
		<-resumed
	}
	done := make(chan struct{})
	go func() {
		r.Observe("b", 1)
		close(done)
	}()
	<-stalled
	return func() {
		close(resumed)
		<-done
	}
}

// TestRateOverlappingChanges plays two changes of window under way at
// once: the change to window 2 is claimed by a caller descheduled before
// it starts; the clock reaches window 3, whose change, from window 1,
// clears the memory of both windows 3 and 2, and its caller stalls at
// window 2's; the first caller resumes and publishes window 2, which
// counts an event; the second resumes. It must not clear window 2's
// memory, now current: that event is window 3's Prev.
func TestRateOverlappingChanges(t *testing.T) {
	for _, mode := range allRateModes() {
		t.Run(mode.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := mode.new(time.Second, 1, 8)
				r.Observe("a", 1) // window 0
				time.Sleep(time.Second)
				r.Observe("a", 1) // window 1
				time.Sleep(time.Second)
				r.claimed.Store(2) // by a caller descheduled at once
				time.Sleep(time.Second)
				// The change to window 3 stalls in win[0], window 2's memory.
				resume := stallChange(r, func(slot int, _ *[clearChunk]int64) bool { return slot == 0 })
				r.flip(2) // the first caller resumes
				if r.cur.Load() != 2 {
					t.Fatalf("window %d, want 2", r.cur.Load())
				}
				// A caller that read window 2 as current and its clock in it.
				countIn(r, "a", 2)
				resume()
				var c RateComponents
				r.RateWith("a", func(rc RateComponents) float64 { c = rc; return 0 })
				if r.cur.Load() != 3 || c.Prev < 1 {
					t.Errorf("window %d: a counts %d in it and %d in window 2, want 1 there", r.cur.Load(), c.Curr, c.Prev)
				}
			})
		})
	}
}

// countIn counts an event of key in window k, as Observe does for a
// caller that read k as the current window and its clock in k.
func countIn(r *Rate, key string, k int64) {
	h, w := maphash.String(r.seed, key), &r.win[k&1]
	if r.exact {
		w.observe(h, 1)
		return
	}
	w.add(h, 1, r.tagOf(k), r.conservative)
}
