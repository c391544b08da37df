package limits

import (
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// twin returns an Estimator that places every key in the same cells as e,
// with counters of its own, so that two modes can be compared on one stream.
func twin(e *Estimator) *Estimator {
	return &Estimator{seed: e.seed, slots: e.slots, rows: e.rows, cells: make([]atomic.Int64, len(e.cells))}
}

// counter is what the never-under-counts tests need of either mode.
type counter interface {
	Incr(key string, delta int64) int64
	Get(key string) int64
}

// modes returns a plain and a conservative sketch of the given size.
func modes(hashes, slots int) []struct {
	name string
	c    counter
} {
	return []struct {
		name string
		c    counter
	}{
		{"plain", NewEstimator(hashes, slots)},
		{"conservative", NewEstimator(hashes, slots, Sizing{Conservative: true})},
	}
}

func TestNewConservativePanics(t *testing.T) {
	tests := []struct {
		name string
		f    func()
		want string
	}{
		{"zero hashes", func() { NewEstimator(0, 8, Sizing{Conservative: true}) }, "limits: hashes must be >= 1, got 0"},
		{"17 hashes", func() { NewEstimator(17, 8, Sizing{Conservative: true}) }, "limits: a conservative sketch takes at most 16 hashes, got 17"},
		{"zero slots", func() { NewEstimator(4, 0, Sizing{Conservative: true}) }, "limits: slots must be >= 1, got 0"},
		{"rate, zero interval", func() { NewRate(0, Sizing{Hashes: 4, Slots: 8, Conservative: true}) }, "limits: interval must be > 0, got 0s"},
		{"rate, 17 hashes", func() { NewRate(time.Second, Sizing{Hashes: 17, Slots: 8, Conservative: true}) }, "limits: a conservative sketch takes at most 16 hashes, got 17"},
		{"sized, tiny failure", func() { NewRate(time.Second, Sizing{Keys: 10, Failure: 1e-9, Conservative: true}) }, "limits: a conservative sketch takes at most 16 hashes, got 21"},
		{"rate sized, invalid", func() { NewRate(time.Second, Sizing{Keys: -1, Conservative: true}) }, "limits: Sizing.Keys must be >= 0, got -1"},
		{"inflight", func() { NewInflight(Sizing{Conservative: true}) }, "limits: an Inflight cannot be conservative: its counts go down"},
		{"estimator sized", func() { NewEstimator(4, 8, Sizing{Keys: 10}) }, "limits: NewEstimator takes its size as arguments, not from a Sizing (see Sizing.Dims)"},
	}
	for _, tt := range tests {
		if got := mustPanic(t, tt.f); got != tt.want {
			t.Errorf("%s: panic %q, want %q", tt.name, got, tt.want)
		}
	}
	NewEstimator(16, 1, Sizing{Conservative: true}) // the largest allowed
}

func TestConservativeEstimatorBasics(t *testing.T) {
	c := NewEstimator(4, 4096, Sizing{Conservative: true})
	steps := []struct {
		key   string
		delta int64
		want  int64
	}{
		{"a", 3, 3},
		{"a", 2, 5},
		{"", 7, 7}, // the empty key is a key like any other
		{"a", 0, 5},
		{"a", -4, 5}, // counts cannot be taken back: ignored
		{"b", -1, 0},
		{"b", 1, 1},
	}
	for _, s := range steps {
		if got := c.Incr(s.key, s.delta); got != s.want {
			t.Errorf("Incr(%q, %d) = %d, want %d", s.key, s.delta, got, s.want)
		}
	}
	if got := c.Get("a"); got != 5 {
		t.Errorf("Get(a) = %d, want 5", got)
	}
	if got := c.GetHash(c.Hash([]byte("a"))); got != 5 {
		t.Errorf("GetHash(Hash(a)) = %d, want 5", got)
	}
	if got := c.IncrHash(c.Hash([]byte("a")), 1); got != 6 {
		t.Errorf("IncrHash(HashString(a), 1) = %d, want 6", got)
	}
	c.Reset()
	for _, k := range []string{"a", "", "b"} {
		if got := c.Get(k); got != 0 {
			t.Errorf("Get(%q) after Reset = %d, want 0", k, got)
		}
	}
	if got, want := c.Size(), 4*4096*8; got != want {
		t.Errorf("Size() = %d, want %d", got, want)
	}
}

// TestConservativeOnlyRaisesToTheMinimum checks the update rule on two keys
// that share one cell: the second key's increment leaves the shared cell,
// already above its count, alone.
func TestConservativeOnlyRaisesToTheMinimum(t *testing.T) {
	c := NewEstimator(1, 1, Sizing{Conservative: true}) // one cell: every key shares it
	c.Incr("a", 10)
	if got := c.Incr("b", 3); got != 13 {
		t.Errorf("one cell: Incr(b, 3) = %d, want 13", got)
	}
	// In two rows, find keys a and b that share a's row-0 cell but not its
	// row-1 cell.
	c = NewEstimator(2, 64, Sizing{Conservative: true})
	ha := c.Hash([]byte("a"))
	var hb uint64
	for i := 0; ; i++ {
		hb = c.Hash([]byte(fmt.Sprint(i)))
		e := c
		if e.cell(e.rows[0], hb) == e.cell(e.rows[0], ha) && e.cell(e.rows[1], hb) != e.cell(e.rows[1], ha) {
			break
		}
	}
	c.IncrHash(ha, 10)
	if got := c.IncrHash(hb, 3); got != 3 {
		t.Errorf("IncrHash(b, 3) = %d, want 3: b's row-1 cell is its own", got)
	}
	if got := c.GetHash(ha); got != 10 {
		t.Errorf("GetHash(a) = %d, want 10: the shared cell held 10, more than b's 3", got)
	}
	plain := NewEstimator(1, 1)
	plain.Incr("a", 10)
	if got := plain.Incr("b", 3); got != 13 {
		t.Errorf("plain one cell: Incr(b, 3) = %d, want 13", got)
	}
}

// TestConservativeNeverUnderCounts compares both modes, in sketches small
// enough to collide often, with exact counts, and checks that conservative
// estimates are never above plain ones placed alike.
func TestConservativeNeverUnderCounts(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, size := range [][2]int{{1, 8}, {2, 16}, {4, 64}, {3, 1000}, {16, 32}} {
		c := NewEstimator(size[0], size[1], Sizing{Conservative: true})
		p := twin(c)
		exact := map[string]int64{}
		lower := false
		for i := range 20000 {
			k := fmt.Sprintf("k%d", rng.IntN(500))
			d := rng.Int64N(5)
			exact[k] += d
			got, plain := c.Incr(k, d), p.Incr(k, d)
			if got < exact[k] || plain < exact[k] {
				t.Fatalf("%dx%d step %d: Incr(%s, %d) = %d conservative, %d plain, below the true count %d", size[0], size[1], i, k, d, got, plain, exact[k])
			}
			if got > plain {
				t.Fatalf("%dx%d step %d: Incr(%s, %d) = %d conservative, above the plain %d", size[0], size[1], i, k, d, got, plain)
			}
			lower = lower || got < plain
		}
		for k, want := range exact {
			got, plain := c.Get(k), p.Get(k)
			if got < want || got > plain {
				t.Fatalf("%dx%d: Get(%s) = %d conservative, %d plain, true count %d", size[0], size[1], k, got, plain, want)
			}
		}
		// With one row the two modes agree: a key's only cell is its minimum.
		if !lower && size[0] > 1 && size[1] < 100 {
			t.Errorf("%dx%d: conservative never below plain; the update rule is not being exercised", size[0], size[1])
		}
	}
}

// TestConcurrentNeverUnderCounts runs many goroutines on few keys in a small
// sketch, in both modes. Each Incr must report at least every event of its
// key whose Incr returned before it began, plus its own: a lost update
// shows up as a lower count.
func TestConcurrentNeverUnderCounts(t *testing.T) {
	const keys = 40
	for _, m := range modes(3, 16) {
		var done [keys]atomic.Int64 // events of each key whose Incr returned
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 11))
				for range 3000 {
					i := rng.IntN(keys)
					d := rng.Int64N(3) + 1
					before := done[i].Load()
					if got := m.c.Incr(fmt.Sprintf("k%d", i), d); got < before+d {
						t.Errorf("%s: Incr(k%d, %d) = %d, below the %d counted before it began plus its own", m.name, i, d, got, before)
						return
					}
					done[i].Add(d)
				}
			})
		}
		wg.Wait()
		for i := range keys {
			if got, want := m.c.Get(fmt.Sprintf("k%d", i)), done[i].Load(); got < want {
				t.Errorf("%s: Get(k%d) = %d, below the true count %d", m.name, i, got, want)
			}
		}
	}
}

// TestConcurrentOneKeyExact has goroutines increment a single key at once.
// With no other key in the sketch no estimate may be too high either, so the
// final count must be exact: two increments that built on the same old count
// would leave it short.
func TestConcurrentOneKeyExact(t *testing.T) {
	for _, m := range modes(4, 64) {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range 8 {
			wg.Go(func() {
				<-start
				for i := range 2000 {
					m.c.Incr("hot", int64(1+(g+i)%3))
				}
			})
		}
		close(start)
		wg.Wait()
		want := int64(0)
		for g := range 8 {
			for i := range 2000 {
				want += int64(1 + (g+i)%3)
			}
		}
		if got := m.c.Get("hot"); got != want {
			t.Errorf("%s: Get(hot) = %d after concurrent increments, want %d", m.name, got, want)
		}
	}
}

func TestConservativeSaturates(t *testing.T) {
	c := NewEstimator(2, 8, Sizing{Conservative: true})
	if got := c.Incr("k", math.MaxInt64-1); got != math.MaxInt64-1 {
		t.Fatalf("Incr(MaxInt64-1) = %d", got)
	}
	for _, d := range []int64{1, 1, math.MaxInt64} {
		if got := c.Incr("k", d); got != math.MaxInt64 {
			t.Errorf("Incr(k, %d) near the top = %d, want MaxInt64", d, got)
		}
	}
	if got := c.Get("k"); got != math.MaxInt64 {
		t.Errorf("Get after saturating = %d, want MaxInt64", got)
	}
}

// TestConservativeRateWindows runs a conservative Rate through a change of
// window: the new window starts from zero, the completed one reads in full,
// and n <= 0 records nothing.
func TestConservativeRateWindows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := NewRate(time.Second, Sizing{Hashes: 4, Slots: 256, Conservative: true})
		steps := []struct {
			n, want int64
		}{{3, 3}, {2, 5}, {0, 5}, {-5, 5}}
		for _, s := range steps {
			if got := r.Observe("k", s.n); got != s.want {
				t.Errorf("Observe(k, %d) = %d, want %d", s.n, got, s.want)
			}
		}
		time.Sleep(time.Second)
		if got := r.Observe("k", 1); got != 1 {
			t.Errorf("Observe in window 1 = %d, want 1", got)
		}
		if got := r.Rate("k"); got != 5 {
			t.Errorf("Rate in window 1 = %v, want 5", got)
		}
		time.Sleep(3 * time.Second) // both Estimators now hold stale counts
		if got := r.Observe("k", 2); got != 2 {
			t.Errorf("Observe after idle windows = %d, want 2", got)
		}
		if got := r.Rate("k"); got != 0 {
			t.Errorf("Rate after idle windows = %v, want 0", got)
		}
		if got, want := r.Size(), 2*4*256*8; got != want {
			t.Errorf("Size = %d, want %d", got, want)
		}
	})
}

// TestConservativeZipfAccuracy counts the workload of the accuracy report,
// 10,000 keys where key i gets max(10, 100000/(i+1)) events, shuffled, in
// both modes placed alike. It guards what conservative update buys there:
// about half the mean over-count at 4 x 1024 (measured 0.48 of plain), and
// more keys exact at 4 x 8192 (about 85% against 75%).
func TestConservativeZipfAccuracy(t *testing.T) {
	const n = 10000
	counts := make([]int64, n)
	var stream []int32
	for i := range counts {
		counts[i] = max(10, int64(100000/(i+1)))
		for range counts[i] {
			stream = append(stream, int32(i))
		}
	}
	rand.New(rand.NewPCG(7, 7)).Shuffle(len(stream), func(i, j int) { stream[i], stream[j] = stream[j], stream[i] })
	measure := func(slots int) (plainMean, consMean float64, plainExact, consExact int) {
		c := NewEstimator(4, slots, Sizing{Conservative: true})
		p := twin(c)
		hs := make([]uint64, n)
		for i := range hs {
			hs[i] = c.Hash(fmt.Appendf(nil, "client-%06d", i))
		}
		for _, i := range stream {
			c.IncrHash(hs[i], 1)
			p.IncrHash(hs[i], 1)
		}
		for i, h := range hs {
			po, co := p.GetHash(h)-counts[i], c.GetHash(h)-counts[i]
			if co < 0 || co > po {
				t.Fatalf("4x%d: key %d over-counted by %d conservative, %d plain", slots, i, co, po)
			}
			plainMean += float64(po) / n
			consMean += float64(co) / n
			plainExact += int(b2i(po == 0))
			consExact += int(b2i(co == 0))
		}
		return
	}
	pm, cm, _, _ := measure(1024)
	t.Logf("4x1024: mean over-count %.1f plain, %.1f conservative", pm, cm)
	if cm > 0.6*pm {
		t.Errorf("4x1024: conservative mean over-count %.1f, more than 0.6 of the plain %.1f", cm, pm)
	}
	_, _, pe, ce := measure(8192)
	t.Logf("4x8192: %d keys exact plain, %d conservative", pe, ce)
	if ce <= pe {
		t.Errorf("4x8192: %d keys exact conservative, not more than the plain %d", ce, pe)
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func TestConservativeAllocs(t *testing.T) {
	c := NewEstimator(4, 1024, Sizing{Conservative: true})
	r := NewRate(time.Second, Sizing{Hashes: 4, Slots: 1024, Conservative: true})
	b := []byte("client-000123")
	allocs := testing.AllocsPerRun(1000, func() {
		c.Incr("client-000123", 1)
		c.IncrHash(c.Hash(b), 2)
		c.Get("client-000123")
		r.Observe("client-000123", 1)
		r.Rate("client-000123")
		r.Peek("client-000123")
	})
	if allocs != 0 {
		t.Errorf("conservative Incr, Get, Observe, Rate and Peek allocate %v times per run, want 0", allocs)
	}
}

// TestConservativeRateSaturates observes counts up to math.MaxInt64 in
// four windows of a Rate, so in both of its memories under both tags. A
// conservative count-min Rate reads each count exactly up to
// math.MaxInt64, and stays there, as a conservative Estimator does; the
// default Rate, which counts exactly first, saturates sooner, and so reads
// math.MaxInt64 throughout.
func TestConservativeRateSaturates(t *testing.T) {
	for _, c := range []struct {
		name string
		s    Sizing
	}{
		{"1x1", Sizing{Hashes: 1, Slots: 1, Conservative: true}},
		{"4x4096", Sizing{Hashes: 4, Slots: 4096, Conservative: true}},
		{"default", Sizing{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := NewRate(time.Second, c.s)
				bad := false // report the first window that fails only
				for w := range 4 {
					var sum int64
					for _, n := range []int64{1 << 62, math.MaxInt64 - 1<<62, 1, math.MaxInt64} {
						if n > math.MaxInt64-sum {
							sum = math.MaxInt64
						} else {
							sum += n
						}
						got := r.Observe("a", n)
						if got < sum || r.exact && got != math.MaxInt64 || !r.exact && got != sum {
							t.Errorf("window %d: Observe(a, %d) = %d, true count %d", w, n, got, sum)
							bad = true
						}
					}
					if got := r.Peek("a"); got != math.MaxInt64 {
						t.Errorf("window %d: Peek(a) = %d, want MaxInt64", w, got)
						bad = true
					}
					time.Sleep(time.Second)
					var prev int64
					r.RateWith("a", func(c RateComponents) float64 { prev = c.Prev; return 0 })
					if prev != math.MaxInt64 {
						t.Errorf("window %d once completed: Prev = %d, want MaxInt64", w, prev)
						bad = true
					}
					if bad {
						return
					}
				}
			})
		})
	}
}

// TestConservativeRateNearTopAgainstReference observes random counts near
// the top of the range for a few keys in small conservative Rates, where
// keys share counters, through six windows, against a reference: a
// conservative sketch over the same placement of keys, in counters that
// saturate at math.MaxInt64. Every estimate is the reference's, and never
// below the key's true count, saturated.
func TestConservativeRateNearTopAgainstReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 62))
	keys := []string{"a", "b", "c", "d", "e", "f"}
	addSat := func(a, b int64) int64 {
		if b > math.MaxInt64-a {
			return math.MaxInt64
		}
		return a + b
	}
	for _, dims := range [][2]int{{1, 1}, {2, 3}, {3, 4}, {4, 64}} {
		t.Run(fmt.Sprintf("%dx%d", dims[0], dims[1]), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := NewRate(time.Second, Sizing{Hashes: dims[0], Slots: dims[1], Conservative: true})
				type ref struct {
					cells map[uint64]int64 // the reference's counters, by index
					truth map[string]int64
				}
				// The cells of key k in window w, placed as the Rate places them.
				cellsOf := func(w int64, k string) []uint64 {
					e := r.win[w&1].sketch
					h := maphash.String(r.seed, k)
					var idx []uint64
					for _, row := range e.rows {
						idx = append(idx, e.cell(row, h))
					}
					return idx
				}
				estimate := func(m ref, w int64, k string) int64 {
					est := int64(math.MaxInt64)
					for _, i := range cellsOf(w, k) {
						est = min(est, m.cells[i])
					}
					return est
				}
				var prev ref
				for w := range int64(6) {
					cur := ref{map[uint64]int64{}, map[string]int64{}}
					for range 200 {
						k := keys[rng.IntN(len(keys))]
						var n int64
						switch rng.IntN(6) {
						case 0:
							n = rng.Int64N(1000)
						case 1:
							n = 1<<62 - rng.Int64N(1000)
						case 2:
							n = math.MaxInt64 - estimate(cur, w, k) - 500 + rng.Int64N(1000)
						case 3:
							n = math.MaxInt64 - rng.Int64N(1000)
						default:
							n = rng.Int64N(math.MaxInt64 / 4)
						}
						want := estimate(cur, w, k)
						if n > 0 {
							// Conservative update: raise the key's cells below its new
							// estimate to it.
							want = addSat(want, n)
							for _, i := range cellsOf(w, k) {
								cur.cells[i] = max(cur.cells[i], want)
							}
							cur.truth[k] = addSat(cur.truth[k], n)
						}
						if got := r.Observe(k, n); got != want || got < cur.truth[k] {
							t.Fatalf("window %d: Observe(%s, %d) = %d, want %d (true count %d)", w, k, n, got, want, cur.truth[k])
						}
					}
					for _, k := range keys {
						var c RateComponents
						r.RateWith(k, func(rc RateComponents) float64 { c = rc; return 0 })
						if want := estimate(cur, w, k); c.Curr != want {
							t.Errorf("window %d: Curr of %s = %d, want %d", w, k, c.Curr, want)
						}
						if w > 0 {
							if want := estimate(prev, w-1, k); c.Prev != want {
								t.Errorf("window %d: Prev of %s = %d, want %d", w, k, c.Prev, want)
							}
						}
					}
					prev = cur
					time.Sleep(time.Second)
				}
			})
		})
	}
}
