package limits

import (
	"fmt"
	"hash/maphash"
	"math"
)

// ConservativeEstimator is a count-min sketch with conservative update, for
// counts that only grow: it counts like an Estimator, in the same memory,
// but over-counts less.
//
// An Estimator adds every increment to the key's cell in each row. A
// conservative increment by delta raises each of the key's cells only as far
// as the key's new estimate, the smallest cell plus delta, and leaves higher
// cells alone: those already hold more than the key's count, from other keys,
// and need nothing more. Each cell then holds about the largest estimate
// among the keys that share it, rather than the sum of their counts. With 10,000 keys whose counts
// follow Zipf's law, the mean over-count is about half a plain sketch's at
// 4 x 1024 (101 against 211) and a fifth at 4 x 8192 (0.9 against 4.6, with
// 85% of keys exact against 75%); cmd/limits-accuracy measures both modes
// over many sizes. An estimate is never too low. For increments made one at
// a time it is never higher than a plain Estimator of the same size, with
// the same placement, would give for the same increments, and the bound of
// e*N/slots with probability 1 - e^-hashes (see Sizing) holds all the more;
// increments that race on shared counters may leave some of them higher (see
// Cost and concurrency).
//
// # No Decr
//
// A conservative sketch cannot take counts back. A cell holds the count of
// one of its keys, not the sum of them all, and nothing records which: if
// key a raised a cell to 10 and key b, counted 5 times, left it there,
// subtracting b's 5 would leave 5 for a, below its true count, which then
// reads too low whenever that cell is a's smallest. So ConservativeEstimator
// is a type of its own, whose method set has no Decr: code that would
// subtract does not compile, instead of failing, or silently doing nothing,
// on a request path. Incr ignores a delta <= 0. For counts that go down, such
// as events in progress, use an Estimator (Inflight does).
//
// # Cost and concurrency
//
// All methods are safe for concurrent use, take no locks and allocate
// nothing. An increment reads the key's cells, then moves each cell that is
// below the new estimate from the value it read to that estimate with a
// compare-and-swap; if another increment changed one of those cells in
// between, it reads them again and retries. That way two increments of one
// key that run at once never both build on the same old count, so none is
// lost; at worst an abandoned attempt leaves some cells higher than needed,
// an over-count. An increment costs a read per row and a compare-and-swap
// per row whose cell is below the new estimate (every row, for a key alone in
// its cells), where an Estimator makes one atomic add per row; contention on
// a cell adds retries.
//
// A conservative sketch holds at most 16 hashes (a failure probability of
// e^-16, about 1e-7), because an increment keeps its snapshot of the cells on
// the stack.
//
// Counts saturate at math.MaxInt64 rather than wrapping as an Estimator's do.
// The zero value is not usable; call NewConservativeEstimator.
type ConservativeEstimator struct {
	est Estimator
}

// maxConservativeHashes is the most rows a conservative sketch may have: an
// increment keeps a snapshot of one cell per row on the stack.
const maxConservativeHashes = 16

// NewConservativeEstimator returns a ConservativeEstimator with the given
// hashes and slots (hashes*slots*8 bytes, as NewEstimator). It panics if
// hashes < 1, hashes > 16 or slots < 1.
func NewConservativeEstimator(hashes, slots int) *ConservativeEstimator {
	return &ConservativeEstimator{est: *newConservative(hashes, slots, maphash.MakeSeed())}
}

// NewConservativeEstimatorSized returns a ConservativeEstimator sized by s
// (see Sizing.Dims). It panics if s is not valid or asks for more than 16
// hashes (a Failure below e^-16).
func NewConservativeEstimatorSized(s Sizing) *ConservativeEstimator {
	return NewConservativeEstimator(s.mustDims())
}

// newConservative is newEstimator for an Estimator that will only take
// conservative increments.
func newConservative(hashes, slots int, seed maphash.Seed) *Estimator {
	if hashes > maxConservativeHashes {
		panic(fmt.Sprintf("limits: a conservative sketch takes at most %d hashes, got %d", maxConservativeHashes, hashes))
	}
	return newEstimator(hashes, slots, seed)
}

// Hash returns the hash of key that the Hash variants of c's methods take,
// as Estimator.Hash does.
func (c *ConservativeEstimator) Hash(key []byte) uint64 { return c.est.Hash(key) }

// HashString is Hash for a string key.
func (c *ConservativeEstimator) HashString(key string) uint64 { return c.est.HashString(key) }

// Incr adds delta to key's count and returns its new estimate. A delta <= 0
// adds nothing and returns the current estimate: a conservative sketch cannot
// take counts back (see ConservativeEstimator).
func (c *ConservativeEstimator) Incr(key string, delta int64) int64 {
	return c.est.incrConservative(c.est.HashString(key), delta)
}

// IncrHash is Incr for a key already hashed with Hash or HashString.
func (c *ConservativeEstimator) IncrHash(h uint64, delta int64) int64 {
	return c.est.incrConservative(h, delta)
}

// Get returns key's estimated count without changing it.
func (c *ConservativeEstimator) Get(key string) int64 { return c.est.Get(key) }

// GetHash is Get for a key already hashed with Hash or HashString.
func (c *ConservativeEstimator) GetHash(h uint64) int64 { return c.est.GetHash(h) }

// Reset sets every count to zero. As with Estimator.Reset, it is not atomic
// as a whole: an increment that runs concurrently may be kept or lost, in
// part or in full.
func (c *ConservativeEstimator) Reset() { c.est.Reset() }

// Size returns the memory held by c's counters, in bytes.
func (c *ConservativeEstimator) Size() int { return c.est.Size() }

// incrConservative raises key hash h's cells so that its estimate grows by
// delta, and returns the new estimate; see ConservativeEstimator. e must have
// at most maxConservativeHashes rows, and its cells must only ever have been
// raised this way (or zeroed).
func (e *Estimator) incrConservative(h uint64, delta int64) int64 {
	if delta <= 0 {
		return e.GetHash(h)
	}
	var (
		idxs  [maxConservativeHashes]uint64
		seens [maxConservativeHashes]int64
	)
	idx, seen := idxs[:len(e.rows)], seens[:len(e.rows)]
	for i, r := range e.rows {
		idx[i] = e.cell(r, h)
	}
	for {
		// Read every cell before moving any. Two increments of one key that
		// both read the same smallest cell cannot both succeed: each moves
		// that cell from the value it read, and the first move makes the
		// other's compare-and-swap fail.
		est := int64(math.MaxInt64)
		for i, j := range idx {
			v := e.cells[j].Load()
			seen[i] = v
			est = min(est, v)
		}
		target := est + delta
		if target < est {
			target = math.MaxInt64
		}
		// Gather the cells to move first, without branching on each: which
		// rows hold the smallest cell is different for every key.
		var low [maxConservativeHashes]uint8
		n := 0
		for i := range idx {
			low[n] = uint8(i)
			if seen[i] < target {
				n++
			}
		}
		done := true
		for _, i := range low[:n] {
			if !e.cells[idx[i]].CompareAndSwap(seen[i], target) {
				done = false
				break
			}
		}
		if done {
			return target
		}
	}
}
