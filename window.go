package limits

import (
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
// # Tags
//
// Every counter of a window carries the window's tag, (k>>1)&1 for window
// k, in a bit above its count: bit 15 of each entry, bit 31 of each 32-bit
// counter of the sketch next to a table, bit 62 of a counter of an
// Estimator. The Estimator that counts window k counted window k-2 before, with
// the other tag, so a counter of the live window never holds the value a
// caller clearing it for the change to k read from window k-2: a caller
// that resumes late from clearing fails its compare-and-swap, whatever the
// live count has climbed to.
type window struct {
	cells []atomic.Int64 // every counter, table first: what a change of window clears
	table []atomic.Int64 // lines of lineWords words; empty without a table
	lines uint64         // len(table) / lineWords

	// With a table, the sketch is rows x cols counters of 32 bits, two a
	// word, over cells[len(table):], each row placed by its own seed;
	// without one, an Estimator over cells.
	rows   []uint64 // per-row seeds
	cols   uint64   // counters a row
	sketch *Estimator
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

	// sketchTag is the tag bit of a counter of an Estimator under a Rate
	// without a table, and sketchMax the largest count it holds: a
	// conservative sketch saturates there, a plain one wraps as an
	// Estimator does.
	sketchTag = 1 << 62
	sketchMax = sketchTag - 1
)

// newWindow returns the memory of one window: a table of the given number
// of lines followed by a hashes x slots sketch of 32-bit counters, or, with
// no lines, a hashes x slots Estimator; keys are hashed with seed.
func newWindow(lines, hashes, slots int, seed maphash.Seed) window {
	if lines == 0 {
		e := newEstimator(hashes, slots, seed)
		return window{cells: e.cells, sketch: e}
	}
	n := lines*lineWords + hashes*slots/2
	// Lines start on 64-byte boundaries, so that each is one cache line.
	all := make([]atomic.Int64, n+lineWords)
	off := int((64 - uintptr(unsafe.Pointer(&all[0]))%64) % 64 / 8)
	w := window{cells: all[off : off+n : off+n], lines: uint64(lines), cols: uint64(slots)}
	w.table = w.cells[:lines*lineWords]
	w.rows = make([]uint64, hashes)
	for i := range w.rows {
		w.rows[i] = rand.Uint64()
	}
	return w
}

// tag returns the tag of window k.
func tag(k int64) int64 { return (k >> 1) & 1 }

// blank returns the value of cell i of w once cleared for window k.
func (w *window) blank(i int, k int64) int64 {
	t := uint64(tag(k))
	switch {
	case w.sketch != nil:
		return int64(t << 62)
	case i < len(w.table):
		return int64(t<<countBits | t<<(halfBits+countBits))
	default:
		return int64(t<<31 | t<<63)
	}
}

// fill sets every counter of w to its value in window k, for a window
// nobody else can see yet.
func (w *window) fill(k int64) {
	for i := range w.cells {
		w.cells[i].Store(w.blank(i, k))
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

// observe counts n > 0 events of key hash h in w, which has a table, and
// returns the key's estimate; n <= 0 counts nothing.
func (w *window) observe(h uint64, n int64) int64 {
	if n <= 0 {
		return w.get(h)
	}
	first, fp := w.lineOf(h)
	line := w.table[first : first+lineWords]
	if uint64(line[lineWords-1].Load())>>(halfBits+fpShift) != 0 && !inLine(line, fp) {
		return w.sketchAdd(h, n) // a full line without the key: the common case past the table's capacity
	}
	for i := range line {
		for {
			v := uint64(line[i].Load())
			var shift uint
			switch lo, hi := v>>fpShift&0xffff, v>>(halfBits+fpShift); {
			case lo == fp || lo == 0:
				shift = 0
			case hi == fp || hi == 0:
				shift = halfBits
			default:
				goto next // both entries hold other keys
			}
			e := v >> shift & halfMask
			c := int64(e & countMax)
			nc := int64(countMax)
			if n < countMax-c {
				nc = c + n
			}
			// The entry's tag bit stays as the change of window set it.
			ne := fp<<fpShift | e&(1<<countBits) | uint64(nc)
			if ne != e && !line[i].CompareAndSwap(int64(v), int64(v&^(halfMask<<shift)|ne<<shift)) {
				continue // the word moved: read it again
			}
			if nc == countMax {
				return w.spill(h, n-(nc-c))
			}
			return nc
		}
	next:
	}
	return w.sketchAdd(h, n)
}

// inLine reports whether a full line holds an entry of fingerprint fp.
func inLine(line []atomic.Int64, fp uint64) bool {
	pat := fp<<fpShift | fp<<(halfBits+fpShift)
	var hit bool
	for i := range line[:lineWords] {
		x := (uint64(line[i].Load()) ^ pat) >> fpShift
		hit = hit || x&0xffff == 0 || x>>halfBits == 0
	}
	return hit
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
	line := w.table[first : first+lineWords]
	for i := range line {
		v := uint64(line[i].Load())
		for _, shift := range [2]uint{0, halfBits} {
			switch v >> (shift + fpShift) & 0xffff {
			case 0:
				return 0 // not in the table, and so not in the sketch
			case fp:
				if c := int64(v >> shift & countMax); c < countMax {
					return c
				}
				return w.spill(h, 0)
			}
		}
	}
	return w.sketchAdd(h, 0)
}

// maxTableHashes is the most rows the sketch of a window with a table has.
const maxTableHashes = 8

// sketchAdd adds n to key hash h in the sketch of w, which has a table,
// with conservative update, and returns the sketch's estimate; n <= 0
// adds nothing. A counter saturates at cellMax; a key whose counters all
// have is estimated at math.MaxInt64, as its count is not known.
func (w *window) sketchAdd(h uint64, n int64) int64 {
	var (
		at   [maxTableHashes]uint32 // word of each row's counter, from the sketch's first
		seen [maxTableHashes]uint64 // the word read
		half [maxTableHashes]uint8  // shift of the counter in its word
	)
	cells := w.cells[len(w.table):]
	rowWords := w.cols / 2
	for i, seed := range w.rows {
		hi, lo := bits.Mul64(h^seed, 0x9e3779b97f4a7c15)
		col, _ := bits.Mul64(hi^lo, w.cols)
		at[i] = uint32(uint64(i)*rowWords + col/2)
		half[i] = uint8(col&1) * halfBits
	}
	d := len(w.rows)
	for {
		est := uint64(cellMax)
		for i := range d {
			seen[i] = uint64(cells[at[i]].Load())
			est = min(est, seen[i]>>half[i]&cellMax)
		}
		if n <= 0 || est == cellMax {
			return estimate(est)
		}
		target := uint64(cellMax)
		if uint64(n) < cellMax-est {
			target = est + uint64(n)
		}
		done := true
		for i := range d {
			s := half[i]
			if seen[i]>>s&cellMax >= target {
				continue
			}
			v := seen[i]&^(cellMax<<s) | target<<s
			if !cells[at[i]].CompareAndSwap(int64(seen[i]), int64(v)) {
				done = false
				break
			}
		}
		if done {
			return estimate(target)
		}
	}
}

// estimate returns the estimate for a sketch counter of c.
func estimate(c uint64) int64 {
	if c == cellMax {
		return math.MaxInt64
	}
	return int64(c)
}

// add adds n to key hash h in w, an Estimator alone, which counts window
// k, and returns the estimate: with conservative update, or plainly,
// taking events back for a negative n.
func (w *window) add(h uint64, n int64, k int64, conservative bool) int64 {
	t := tag(k) << 62
	if conservative {
		return w.sketch.incrConservativeTo(h, n, t|sketchMax) & sketchMax
	}
	return w.sketch.add(h, n) - t
}

// read returns key hash h's estimate in w, an Estimator alone, which
// counts window k.
func (w *window) read(h uint64, k int64, conservative bool) int64 {
	if conservative {
		return w.sketch.GetHash(h) & sketchMax
	}
	return w.sketch.GetHash(h) - tag(k)<<62
}
