package limits

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"
)

// inTable reports whether key hash h has an entry below countMax in the
// table of window k of r: its count there is then exact, merged only with
// the keys of the same line and fingerprint.
func inTable(r *Rate, h uint64, k int64) bool {
	w := &r.win[k&1]
	first, fp := w.lineOf(h)
	for i := range lineWords {
		v := uint64(w.table[first+uint64(i)].Load())
		for _, shift := range [2]uint{0, halfBits} {
			switch e := v >> shift & halfMask; e >> fpShift {
			case 0:
				return false
			case fp:
				return e&countMax < countMax
			}
		}
	}
	return false
}

// TestRateExactFirstAgainstModel drives a Rate with a small table (8 lines,
// 128 entries) and 300 keys, so that lines fill and keys go to the sketch,
// from 8 goroutines at once, both racing each change of window and within
// windows, against a locked map. Events observed as a window starts may be
// counted in the window ending, so at quiet moments it checks, for every
// key, that each window holds at least the events observed within it, and
// that the two windows together hold at least all of their events; and,
// for a key with an entry in both windows, exactly the events of the keys
// that share its line and fingerprint.
func TestRateExactFirstAgainstModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			iv      = time.Second
			keys    = 300
			windows = 8
		)
		r := NewRate(iv, Sizing{Keys: 40})
		if got := len(r.win[0].table) / lineWords; got != 8 {
			t.Fatalf("Sizing{Keys: 40} gives %d lines, want 8", got)
		}
		names := make([]string, keys)
		groups := map[[2]uint64][]int{} // keys by line and fingerprint
		hashes := make([]uint64, keys)
		for i := range names {
			names[i] = fmt.Sprintf("user-%d", i)
			hashes[i] = r.Hash([]byte(names[i]))
			first, fp := r.win[0].lineOf(hashes[i])
			groups[[2]uint64{first, fp}] = append(groups[[2]uint64{first, fp}], i)
		}
		group := func(i int) []int {
			first, fp := r.win[0].lineOf(hashes[i])
			return groups[[2]uint64{first, fp}]
		}
		// start[w][i] and inside[w][i]: events of key i observed as window
		// w starts, racing its change, and within it.
		var mu sync.Mutex
		start := make([][]int64, windows)
		inside := make([][]int64, windows)
		burst := func(w int, into [][]int64, seed uint64) {
			into[w] = make([]int64, keys)
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(seed, uint64(g)))
					for range 200 {
						i := rng.IntN(keys)
						if rng.IntN(4) == 0 {
							i = rng.IntN(20) // some keys much heavier
						}
						n := 1 + rng.Int64N(3)
						if got := r.Observe(names[i], n); got < n {
							t.Errorf("window %d: Observe(%s, %d) = %d", w, names[i], n, got)
						}
						mu.Lock()
						into[w][i] += n
						mu.Unlock()
					}
				})
			}
			wg.Wait()
		}
		exact := 0
		check := func(w int) {
			for i := range keys {
				var c RateComponents
				r.RateWith(names[i], func(rc RateComponents) float64 { c = rc; return 0 })
				if c.Curr < inside[w][i] {
					t.Errorf("window %d: %s counts %d, below the %d observed within it", w, names[i], c.Curr, inside[w][i])
				}
				want := start[w][i] + inside[w][i]
				var prevInside int64
				if w > 0 {
					want += start[w-1][i] + inside[w-1][i]
					prevInside = inside[w-1][i]
				}
				if c.Prev < prevInside {
					t.Errorf("window %d: %s counted %d in window %d, below the %d observed within it", w, names[i], c.Prev, w-1, prevInside)
				}
				if c.Prev+c.Curr < want {
					t.Errorf("window %d: %s counts %d and %d, below the %d observed in windows %d and %d", w, names[i], c.Prev, c.Curr, want, w-1, w)
				}
				if w == 0 || !inTable(r, hashes[i], int64(w)) || !inTable(r, hashes[i], int64(w-1)) {
					continue
				}
				exact++
				want = 0
				for _, j := range group(i) {
					want += start[w][j] + inside[w][j] + start[w-1][j] + inside[w-1][j]
				}
				if c.Prev+c.Curr != want {
					t.Errorf("window %d: %s, in the table, counts %d and %d, want %d together", w, names[i], c.Prev, c.Curr, want)
				}
			}
		}
		t0 := time.Now()
		for w := range windows {
			sleepTo(t0, time.Duration(w)*iv)
			burst(w, start, uint64(2*w))
			sleepTo(t0, time.Duration(w)*iv+iv/2)
			burst(w, inside, uint64(2*w+1))
			sleepTo(t0, time.Duration(w)*iv+3*iv/4)
			check(w)
		}
		// Most keys have entries; the others went to the sketch.
		if exact < keys || exact == keys*(windows-1) {
			t.Errorf("%d checks of keys with entries, of %d: the table is not being filled as designed", exact, keys*(windows-1))
		}
		t.Logf("%d of %d checks exact", exact, keys*(windows-1))
	})
}

// TestWindowTable checks the table's mechanics on one window: claims in
// order, counts, a full line sending keys to the sketch, a merge of two
// keys with one fingerprint, and the spill of a count past 32,767.
func TestWindowTable(t *testing.T) {
	r := NewRate(time.Hour, Sizing{Keys: 1}) // 4 lines
	w := &r.win[0]
	if p := uintptr(unsafe.Pointer(&w.table[0])); p%64 != 0 {
		t.Errorf("table at %#x, not on a cache line", p)
	}
	// Hashes of one line with distinct fingerprints.
	line := func(fp uint64) uint64 { return fp << 48 } // line 0: low 32 bits 0
	for i := range uint64(16) {
		if got := w.observe(line(i+1), int64(i+1)); got != int64(i+1) {
			t.Fatalf("observe(key %d, %d) = %d", i, i+1, got)
		}
	}
	for i := range uint64(16) {
		if got := w.get(line(i + 1)); got != int64(i+1) {
			t.Errorf("get(key %d) = %d, want %d", i, got, i+1)
		}
		if !inTable(r, line(i+1), 0) {
			t.Errorf("key %d not in the table", i)
		}
	}
	// The line is full: the 17th key is counted in the sketch.
	if got := w.observe(line(17), 5); got < 5 {
		t.Errorf("observe(key 17, 5) = %d, below 5", got)
	}
	if inTable(r, line(17), 0) {
		t.Errorf("key 17 in a full line")
	}
	if got := w.get(line(17)); got < 5 {
		t.Errorf("get(key 17) = %d, below 5", got)
	}
	// Another hash with key 3's line and fingerprint shares its entry.
	if got := w.observe(line(3)|1<<20, 2); got != 5 {
		t.Errorf("observe of a key merged with key 2 = %d, want 3+2", got)
	}
	// A count past what an entry holds spills into the sketch.
	h := line(1)
	if got := w.observe(h, countMax); got != countMax+1 {
		t.Errorf("observe(key 0, %d) = %d, want %d", countMax, got, countMax+1)
	}
	if got := w.get(h); got != countMax+1 {
		t.Errorf("get(key 0) = %d, want %d", got, countMax+1)
	}
	if got := w.observe(h, math.MaxInt64); got != math.MaxInt64 {
		t.Errorf("observe(key 0, MaxInt64) = %d, want it saturated", got)
	}
	if got := w.observe(h, 0); got != math.MaxInt64 {
		t.Errorf("get(key 0) = %d after saturation", got)
	}
	// n <= 0 counts nothing.
	if got := w.observe(line(2), -5); got != 2 {
		t.Errorf("observe(key 1, -5) = %d, want 2", got)
	}
}

// TestProbeMask checks the search of a line for a fingerprint against
// probeWords, the same in Go a word at a time, and against the entries
// one by one, on lines of random entries drawn from a few fingerprints,
// empty ones among them.
func TestProbeMask(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var line [lineWords]atomic.Int64
	for range 20_000 {
		fps := [4]uint64{0, 1 + rng.Uint64N(0xffff), 1 + rng.Uint64N(0xffff), 0xffff}
		for i := range line {
			var v uint64
			for _, shift := range [2]uint{0, halfBits} {
				e := fps[rng.IntN(4)]<<fpShift | rng.Uint64N(1<<fpShift)
				v |= e << shift
			}
			line[i].Store(int64(v))
		}
		fp := fps[1+rng.IntN(3)]
		var want uint32
		for e := range 2 * lineWords {
			if f := uint64(line[e/2].Load()) >> entryOf(e) >> fpShift & 0xffff; f == fp || f == 0 {
				want |= 1 << (2*e + 1)
			}
		}
		got, words := probeMask(&line, fp), probeWords(&line, fp)
		// Only the first entry found counts: probeWords may flag the high
		// entry of a word wrongly when its low one is flagged.
		first := func(m uint32) int { return bits.TrailingZeros32(m) }
		if got != want {
			t.Fatalf("probeMask = %#x, want %#x (fp %#x)", got, want, fp)
		}
		if first(words) != first(want) {
			t.Fatalf("probeWords = %#x, first %d, want first of %#x (fp %#x)", words, first(words), want, fp)
		}
	}
}
