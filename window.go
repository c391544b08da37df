package limits

import (
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"math/rand/v2"
	"sync/atomic"
	"unsafe"
)

// window is the memory that counts one window of a Rate. A Rate built
// without a size counts exactly first: a table of key fingerprints and
// counts holds as many keys as it has room for, one cache line per key,
// and a conservative count-min sketch in the same block counts the keys
// that find no room in their line. A Rate given hashes and slots counts in
// a sketch alone, as pingora's does.
//
// # The table
//
// The table is made of lines of 8 words, 64 bytes, each word holding two
// entries of 32 bits: a 16-bit fingerprint of the key (0 for an empty
// entry), the window's tag bit, and a 15-bit count. A key's hash picks its
// line and its fingerprint, from different bits; Observe reads that line
// only, finds the key's entry or claims the first empty one with a
// compare-and-swap on its word, and raises the count with another. Entries
// are claimed in order and only a change of window empties them, so a key
// absent before the first empty entry of its line is not in the table. Two
// keys of one line with the same fingerprint share an entry, and their
// counts add up: an over-count, never a lost count. A count that would pass
// 32,767 stays there and the excess goes to the sketch, which then adds to
// the estimate; a key that finds its line full is counted in the sketch.
//
// Four bytes an entry, rather than eight for a 32-bit fingerprint and
// count, put 16 keys in a line rather than 8, and twice the keys in the
// same memory: the default's 64 KiB of table hold 16,384 entries rather
// than 8,192, fewer than 10,000 keys. With 10,000 keys in its 1,024 lines,
// 9.8 to a line on average, 0.45% of the keys find their line of 16 full;
// in lines of 8, 23% would. A 16-bit fingerprint merges a new key with
// one of the others of its line with probability under 16/65,535.
//
// # Speed
//
// Past the table's capacity most keys find their line full and are
// counted in the sketch, and a call does both the table's work and the
// sketch's: so both are cheap. The line is searched for the key's
// fingerprint, or an empty entry, in one pass of SSE2 compares on amd64
// (probeMask), without a branch per entry. The sketch has four rows, whose
// columns come from two multiplies of the key's hash (double hashing)
// rather than two per row, and it raises the counters below the key's new
// estimate without a branch per row. A window's 128 KiB stay in a core's
// cache, so Observe asks for nothing ahead: prefetching its five lines
// cost more than it saved.
//
// # Tags
//
// Every counter of a window carries a tag in a bit above its count: bit
// 15 of each entry, bit 31 of each 32-bit counter of the sketch next to a
// table, bit 63 of a counter of a conservative Estimator, whose counts are
// never negative, and bit 62 of a plain one's. Each clearing of a window's
// memory for a new window sets the other tag than the clearing before
// (Rate.tagFor), so a counter of the live window never holds a value a
// caller clearing it read from the window it held before, be it window
// k-2 or, after windows without an event, an older one: a caller that
// resumes late from clearing fails its compare-and-swap, whatever the
// live count has climbed to. (A tag taken from the window's number, k>>1
// & 1, would match again after three windows without an event.)
type window struct {
	cells []atomic.Int64 // every counter, table first: what a change of window clears
	table []atomic.Int64 // lines of lineWords words; empty without a table
	lines uint64         // len(table) / lineWords

	// With a table, the sketch is tableRows rows of cols counters of 32
	// bits, two a word, over cells[len(table):] (sk); without one, an
	// Estimator over cells.
	sk     []atomic.Int64
	cols   uint64 // counters a row
	seeds  [2]uint64
	sketch *Estimator
	tagBit uint // the bit of sketch's counters that holds the tag
}

const (
	lineWords = 8 // words in a line of the table, 64 bytes

	halfBits  = 32
	halfMask  = 1<<halfBits - 1
	countBits = 15
	countMax  = 1<<countBits - 1 // the largest count an entry holds
	fpShift   = countBits + 1    // an entry's fingerprint sits above its tag

	// A counter of the sketch of a window with a table is a half word too:
	// a 31-bit count under the tag bit, 31.
	cellMax = 1<<31 - 1

	// tableRows is the number of rows of the sketch of a window with a
	// table.
	tableRows = 4

	// The tag bits of a counter of an Estimator under a Rate without a
	// table. A conservative one's counts are never negative: its tag
	// takes the sign bit, and counts saturate at math.MaxInt64 under it,
	// as in a conservative Estimator. A plain one's counter is its tag
	// plus its count, which wraps as an Estimator's does.
	conservativeTagBit = 63
	plainTagBit        = 62
)

// newWindow returns the memory of one window: a table of the given number
// of lines followed by a tableRows x slots sketch of 32-bit counters (hashes
// must then be tableRows), or, with no lines, a hashes x slots Estimator,
// conservative or plain; keys are hashed with seed.
func newWindow(lines, hashes, slots int, conservative bool, seed maphash.Seed) window {
	if lines == 0 {
		e := newEstimator(hashes, slots, seed)
		w := window{cells: e.cells, sketch: e, tagBit: plainTagBit}
		if conservative {
			w.tagBit = conservativeTagBit
		}
		return w
	}
	if hashes != tableRows {
		panic(fmt.Sprintf("limits: the sketch of a table has %d rows, not %d", tableRows, hashes))
	}
	n := lines*lineWords + hashes*slots/2
	// Lines start on 64-byte boundaries, so that each is one cache line.
	all := make([]atomic.Int64, n+lineWords)
	off := int((64 - uintptr(unsafe.Pointer(&all[0]))%64) % 64 / 8)
	w := window{cells: all[off : off+n : off+n], lines: uint64(lines), cols: uint64(slots)}
	w.table = w.cells[:lines*lineWords]
	w.sk = w.cells[lines*lineWords:]
	w.seeds = [2]uint64{rand.Uint64(), rand.Uint64()}
	return w
}

// blank returns the value of cell i of w once cleared with tag t, 0 or 1.
func (w *window) blank(i int, tag int64) int64 {
	t := uint64(tag)
	switch {
	case w.sketch != nil:
		return int64(t << w.tagBit)
	case i < len(w.table):
		return int64(t<<countBits | t<<(halfBits+countBits))
	default:
		return int64(t<<31 | t<<63)
	}
}

// fill sets every counter of w to its value once cleared with tag t, for
// a window nobody else can see yet.
func (w *window) fill(t int64) {
	for i := range w.cells {
		w.cells[i].Store(w.blank(i, t))
	}
}

// lineOf returns the index of the first word of key hash h's line, and
// the fingerprint of h, never 0.
func (w *window) lineOf(h uint64) (first uint64, fp uint64) {
	fp = h >> (64 - 16)
	if fp == 0 {
		fp = 1
	}
	return (uint64(uint32(h)) * w.lines >> 32) * lineWords, fp
}

// entryOf returns the shift of entry e in its word.
func entryOf(e int) uint { return uint(e&1) * halfBits }

// Masks of the two entries of a word, for probing a line a word at a
// time without SSE2: their fingerprints, and the lowest and highest bit
// of each fingerprint.
const (
	fpMask = 0xffff<<(halfBits+fpShift) | 0xffff<<fpShift
	fpLow  = 1<<(halfBits+fpShift) | 1<<fpShift
	fpHigh = fpLow << 15
)

// probeWords is probeMask in Go, a word at a time, for processors without
// an assembly version. It stops at the first word with an entry holding
// fp or empty, and so sets the bit of the first such entry, perhaps of
// the word's high entry after it, and none after that word.
func probeWords(line *[lineWords]atomic.Int64, fp uint64) uint32 {
	pat := fp<<(halfBits+fpShift) | fp<<fpShift
	for i := range lineWords {
		x := uint64(line[i].Load())
		// The highest bit of a fingerprint's field is set in z if the
		// field is zero (an empty entry) or equal to fp, and in the high
		// entry only perhaps if the low one is: a borrow out of a zero
		// low field can flag the high one, which is never the first.
		e, m := x&fpMask, (x^pat)&fpMask
		if z := (e-fpLow)&^e&fpHigh | (m-fpLow)&^m&fpHigh; z != 0 {
			return uint32(z>>(fpShift+15-1)&2|z>>(halfBits+fpShift+15-3)&8) << (4 * i)
		}
	}
	return 0
}

// observe counts n > 0 events of key hash h in w, which has a table, and
// returns the key's estimate; n <= 0 counts nothing.
func (w *window) observe(h uint64, n int64) int64 {
	if n <= 0 {
		return w.get(h)
	}
	first, fp := w.lineOf(h)
	line := (*[lineWords]atomic.Int64)(w.table[first : first+lineWords])
	for {
		// The first entry that holds fp or is empty; as entries are
		// claimed in order, a key without an entry before the line's
		// first empty one has none.
		m := probeMask(line, fp)
		if m == 0 {
			return w.sketchAdd(h, n) // a full line without the key: the common case past the table's capacity
		}
		i := bits.TrailingZeros32(m) / 2
		v := uint64(line[i/2].Load())
		shift := entryOf(i)
		e := v >> shift & halfMask
		if f := e >> fpShift; f != fp && f != 0 {
			continue // claimed by another key since the search
		}
		c := int64(e & countMax)
		nc := int64(countMax)
		if n < countMax-c {
			nc = c + n
		}
		// The entry's tag bit stays as the change of window set it.
		ne := fp<<fpShift | e&(1<<countBits) | uint64(nc)
		if ne != e && !line[i/2].CompareAndSwap(int64(v), int64(v&^(halfMask<<shift)|ne<<shift)) {
			continue // the word moved: probe again
		}
		if nc == countMax {
			return w.spill(h, n-(nc-c))
		}
		return nc
	}
}

// spill counts n >= 0 events, in w's sketch, of a key whose entry is
// full, and returns its estimate: the entry's count plus the sketch's.
func (w *window) spill(h uint64, n int64) int64 {
	s := w.sketchAdd(h, n)
	if s == math.MaxInt64 {
		return s
	}
	return countMax + s
}

// get returns key hash h's estimate in w, which has a table.
func (w *window) get(h uint64) int64 {
	first, fp := w.lineOf(h)
	line := (*[lineWords]atomic.Int64)(w.table[first : first+lineWords])
	for {
		m := probeMask(line, fp)
		if m == 0 {
			return w.sketchAdd(h, 0)
		}
		i := bits.TrailingZeros32(m) / 2
		e := uint64(line[i/2].Load()) >> entryOf(i) & halfMask
		switch e >> fpShift {
		case 0:
			return 0 // not in the table, and so not in the sketch
		case fp:
			if c := int64(e & countMax); c < countMax {
				return c
			}
			return w.spill(h, 0)
		}
		// claimed by another key since the search: look again
	}
}

// cellAt returns counter p of a sketch from its word v.
func cellAt(v, p uint64) uint64 { return v >> (p & 1 * halfBits) & cellMax }

// sketchAdd adds n to key hash h in the sketch of w, which has a table,
// with conservative update, and returns the sketch's estimate; n <= 0
// adds nothing. A counter saturates at cellMax; a key whose counters all
// have is estimated at math.MaxInt64, as its count is not known.
func (w *window) sketchAdd(h uint64, n int64) int64 {
	// The index of each row's counter, from the sketch's first: counter
	// p is half p&1 of word p>>1. The rows' columns come from two hashes
	// of h under w's seeds, the column of row i from g1 + i*g2, as in
	// double hashing: two multiplies for all the rows rather than one per
	// row, and no two rows of a key alike but by chance, as g2 is odd.
	hi, lo := bits.Mul64(h^w.seeds[0], 0x9e3779b97f4a7c15)
	g1 := hi ^ lo
	hi, lo = bits.Mul64(h^w.seeds[1], 0xd6e8feb86659fd93)
	g2 := (hi ^ lo) | 1
	p0, _ := bits.Mul64(g1, w.cols)
	p1, _ := bits.Mul64(g1+g2, w.cols)
	p2, _ := bits.Mul64(g1+2*g2, w.cols)
	p3, _ := bits.Mul64(g1+3*g2, w.cols)
	p1, p2, p3 = p1+w.cols, p2+2*w.cols, p3+3*w.cols
	sk := w.sk
	for {
		v0, v1, v2, v3 := uint64(sk[p0>>1].Load()), uint64(sk[p1>>1].Load()), uint64(sk[p2>>1].Load()), uint64(sk[p3>>1].Load())
		c0, c1, c2, c3 := cellAt(v0, p0), cellAt(v1, p1), cellAt(v2, p2), cellAt(v3, p3)
		est := min(c0, c1, c2, c3)
		if n <= 0 || est == cellMax {
			return estimate(est)
		}
		target := uint64(cellMax)
		if uint64(n) < cellMax-est {
			target = est + uint64(n)
		}
		// Gather the counters to raise first, without branching on each:
		// which rows hold the smallest counter differs for every key.
		var at, seen [tableRows]uint64
		m := 0
		at[m], seen[m] = p0, v0
		m += below(c0, target)
		at[m], seen[m] = p1, v1
		m += below(c1, target)
		at[m], seen[m] = p2, v2
		m += below(c2, target)
		at[m&3], seen[m&3] = p3, v3
		m += below(c3, target)
		done := true
		for j := range m {
			p, v := at[j], seen[j]
			s := p & 1 * halfBits
			if !sk[p>>1].CompareAndSwap(int64(v), int64(v&^(cellMax<<s)|target<<s)) {
				done = false
				break
			}
		}
		if done {
			return estimate(target)
		}
	}
}

// below returns 1 if c < t, 0 otherwise.
func below(c, t uint64) int {
	b := 0
	if c < t {
		b = 1
	}
	return b
}

// estimate returns the estimate for a sketch counter of c.
func estimate(c uint64) int64 {
	if c == cellMax {
		return math.MaxInt64
	}
	return int64(c)
}

// add adds n to key hash h in w, an Estimator alone, whose counters carry
// tag, and returns the estimate: with conservative update, or plainly,
// taking events back for a negative n.
func (w *window) add(h uint64, n int64, tag int64, conservative bool) int64 {
	if conservative {
		// Under tag 1 the counters run from math.MinInt64 up to -1.
		return w.sketch.incrConservativeTo(h, n, tag<<conservativeTagBit|math.MaxInt64) & math.MaxInt64
	}
	return w.sketch.add(h, n) - tag<<plainTagBit
}

// read returns key hash h's estimate in w, an Estimator alone, whose
// counters carry tag.
func (w *window) read(h uint64, tag int64, conservative bool) int64 {
	if conservative {
		return w.sketch.GetHash(h) & math.MaxInt64
	}
	return w.sketch.GetHash(h) - tag<<plainTagBit
}
