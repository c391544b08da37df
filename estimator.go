package limits

import (
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"math/rand/v2"
	"sync/atomic"
)

// Estimator is a lock-free count-min sketch: it estimates a count per key in
// fixed memory, whatever the number of keys.
//
// It holds a matrix of hashes rows by slots columns of atomic int64 counters,
// hashes*slots*8 bytes in all. Each key maps to one cell per row; Incr adds to
// those cells and the estimate is the smallest of them. Keys that share a
// cell in every row are counted together, so an estimate can be too high but,
// while every delta is non-negative, never too low.
//
// How far too high depends on the number of distinct keys counted, not on the
// rate: if N is the sum of all deltas added, an estimate exceeds the true count
// by at most e*N/slots (e = 2.718...) with probability at least
// 1 - e^-hashes. With 4 rows of 1024 slots and N = 1,000,000 events the bound
// is about 2,655 events, so size slots from the number of distinct keys you
// expect, not from the traffic: Sizing.Dims does so.
//
// # Conservative update
//
// For counts that only grow, an Estimator made with Sizing{Conservative:
// true} counts with conservative update: an increment by delta raises each
// of the key's cells only as far as the key's new estimate, the smallest
// cell plus delta, and leaves higher cells alone, as those already hold
// more than the key's count, from other keys. Each cell then holds about
// the largest estimate among the keys that share it, rather than the sum
// of their counts: with 10,000 keys whose counts follow Zipf's law, the
// mean over-count is about half a plain sketch's at 4 x 1024 (101 against
// 211) and a fifth at 4 x 8192 (0.9 against 4.6, with 85% of keys exact
// against 75%). An estimate is never too low, and for increments made one
// at a time never higher than a plain Estimator of the same size and
// placement would give.
//
// A conservative sketch cannot take counts back: a cell holds the count of
// one of its keys, not the sum of them all, and nothing records which. So
// a conservative Estimator ignores deltas <= 0, and Decr does nothing; for
// counts that go down, such as events in progress, use a plain one
// (Inflight does). An increment reads the key's cells and moves each one
// below the new estimate to it with a compare-and-swap, reading again if
// another increment moved one in between, so that two increments of one
// key never both build on the same old count; increments that race on
// shared cells may leave some higher than needed, an over-count. It costs
// a read per row and a compare-and-swap per row it raises, where a plain
// increment makes one atomic add per row. Its counts saturate at
// math.MaxInt64 rather than wrap, and it holds at most 16 hashes.
//
// Each call hashes its key once, with hash/maphash under a seed drawn at
// random for each Estimator; each row then places that hash with its own
// random seed. Nobody can craft keys offline that collide in a given
// Estimator. (An unseeded hash would not do: xxhash with its fixed seed can be
// inverted, so a key colliding with any known key is found in microseconds.)
//
// A plain Estimator's counters wrap on overflow, as Go's integer
// arithmetic does: a cell pushed past math.MaxInt64 continues from
// math.MinInt64, and the estimate, the smallest cell, then turns negative.
// At a billion events a second a single cell takes 292 years to get there.
//
// All methods are safe for concurrent use and allocate nothing. The zero value
// is not usable; call NewEstimator.
type Estimator struct {
	seed         maphash.Seed   // seeds the key hash
	slots        uint64         // columns per row
	rows         []row          // one per row
	cells        []atomic.Int64 // len(rows)*slots counters, row after row
	conservative bool           // count with incrConservative
}

// maxCells is the most counters a sketch may hold: 1 GiB of them, far more
// than any sketch needs (4 hashes of that size count 49 million keys
// exactly), and little enough that asking for it is not a crash.
const maxCells = 1 << 30 / 8

// NewEstimator returns an Estimator with the given number of rows (hashes) and
// columns (slots): hashes*slots*8 bytes. More slots reduce the over-count;
// more hashes make the bound hold with higher probability; Sizing.Dims
// computes both from the keys expected. The one option it takes is a
// Sizing giving no size, for Conservative. It panics if hashes < 1,
// slots < 1, the counters would take more than 1 GiB, or an option gives
// anything else.
func NewEstimator(hashes, slots int, opts ...Option) *Estimator {
	var o options
	if err := collect(&o, opts, optSizing, "an Estimator"); err != nil {
		panic("limits: " + err.Error())
	}
	if o.sizing.sized() {
		panic("limits: NewEstimator takes its size as arguments, not from a Sizing (see Sizing.Dims)")
	}
	if o.sizing.Conservative && hashes > maxConservativeHashes {
		panic(fmt.Sprintf("limits: a conservative sketch takes at most %d hashes, got %d", maxConservativeHashes, hashes))
	}
	e := newEstimator(hashes, slots, maphash.MakeSeed())
	e.conservative = o.sizing.Conservative
	return e
}

// newEstimator returns a plain Estimator with the key-hash seed given, so
// that the two Estimators of a Rate accept the same pre-computed hash.
func newEstimator(hashes, slots int, seed maphash.Seed) *Estimator {
	if hashes < 1 {
		panic(fmt.Sprintf("limits: hashes must be >= 1, got %d", hashes))
	}
	if slots < 1 {
		panic(fmt.Sprintf("limits: slots must be >= 1, got %d", slots))
	}
	if hashes > maxCells/slots {
		panic(fmt.Sprintf("limits: %d hashes x %d slots need more than the 1 GiB a sketch may take", hashes, slots))
	}
	e := &Estimator{
		seed:  seed,
		slots: uint64(slots),
		rows:  make([]row, hashes),
		cells: make([]atomic.Int64, hashes*slots),
	}
	for i := range e.rows {
		e.rows[i] = row{seed: rand.Uint64(), first: uint64(i * slots)}
	}
	return e
}

// Hash returns the hash of a key held as bytes, for IncrHash and GetHash:
// IncrHash(e.Hash(b), d) counts the same key as Incr(string(b), d), without
// converting b to a string, which would allocate.
func (e *Estimator) Hash(key []byte) uint64 {
	return maphash.Bytes(e.seed, key)
}

// Incr adds delta to key's count and returns its new estimate. A negative
// delta subtracts; once deltas are negative the estimate may be too low as
// well as too high. A conservative Estimator ignores a delta <= 0 and
// returns the current estimate.
func (e *Estimator) Incr(key string, delta int64) int64 {
	return e.IncrHash(maphash.String(e.seed, key), delta)
}

// IncrHash is Incr for a key hashed with Hash.
//
// Any well-mixed 64-bit hash works, as the rows still place it under their
// own random seeds, but keys whose hashes are equal are then always counted
// together, and a hash without a secret seed lets others choose such keys.
func (e *Estimator) IncrHash(h uint64, delta int64) int64 {
	if e.conservative {
		return e.incrConservative(h, delta)
	}
	return e.add(h, delta)
}

// add adds delta to key hash h's cells and returns the smallest.
func (e *Estimator) add(h uint64, delta int64) int64 {
	est := int64(math.MaxInt64)
	for _, r := range e.rows {
		if v := e.cells[e.cell(r, h)].Add(delta); v < est {
			est = v
		}
	}
	return est
}

// Decr subtracts delta from key's count. It is Incr with -delta, for callers
// that take back what they added; a conservative Estimator cannot, and
// does nothing.
func (e *Estimator) Decr(key string, delta int64) {
	if !e.conservative {
		e.add(maphash.String(e.seed, key), -delta)
	}
}

// Get returns key's estimated count without changing it.
func (e *Estimator) Get(key string) int64 {
	return e.GetHash(maphash.String(e.seed, key))
}

// GetHash is Get for a key hashed with Hash.
func (e *Estimator) GetHash(h uint64) int64 {
	est := int64(math.MaxInt64)
	for _, r := range e.rows {
		if v := e.cells[e.cell(r, h)].Load(); v < est {
			est = v
		}
	}
	return est
}

// Reset sets every count to zero. It is not atomic as a whole: an Incr that
// runs concurrently may find some of its cells reset and others not.
func (e *Estimator) Reset() {
	for i := range e.cells {
		e.cells[i].Store(0)
	}
}

// Size returns the memory held by e's counters, in bytes.
func (e *Estimator) Size() int {
	return len(e.cells) * 8
}

// row places keys in one row of an Estimator.
type row struct {
	seed  uint64 // mixed into the key's hash
	first uint64 // index in cells of the row's first counter
}

// cell returns the index in e.cells of key hash h in row r.
func (e *Estimator) cell(r row, h uint64) uint64 {
	// A folded 128-bit multiply (as in wyhash) spreads every bit of the
	// seeded hash over the word; Lemire's multiply-shift then maps it onto
	// [0, slots) without a division.
	hi, lo := bits.Mul64(h^r.seed, 0x9e3779b97f4a7c15)
	col, _ := bits.Mul64(hi^lo, e.slots)
	return r.first + col
}
