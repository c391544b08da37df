package limits

import "math"

// maxConservativeHashes is the most rows a conservative sketch may have: an
// increment keeps a snapshot of one cell per row on the stack.
const maxConservativeHashes = 16

// incrConservative raises key hash h's cells so that its estimate grows by
// delta, and returns the new estimate; see Estimator. e must have
// at most maxConservativeHashes rows, and its cells must only ever have been
// raised this way (or zeroed).
func (e *Estimator) incrConservative(h uint64, delta int64) int64 {
	return e.incrConservativeTo(h, delta, math.MaxInt64)
}

// incrConservativeTo is incrConservative with counts that saturate at top
// rather than math.MaxInt64: a Rate keeps the window's tag in the sign bit
// of its counters, which under tag 1 saturate at -1 (see window).
func (e *Estimator) incrConservativeTo(h uint64, delta, top int64) int64 {
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
		if target < est || target > top {
			target = max(top, est)
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
