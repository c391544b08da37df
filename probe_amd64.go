package limits

import "sync/atomic"

// probeMask returns a mask of the entries of a line of a Rate's table
// that hold fingerprint fp or are empty: bit 2e+1 for entry e, the low
// half of word e/2 for an even e and the high half for an odd one. The
// line's 16-bit halves are compared with fp and with 0 eight at a time in
// SSE2, which every amd64 processor has, with 16-byte loads: each entry is
// read whole, as an aligned load of 16 bytes reads each of its 4-byte
// parts at once, though not the line as a whole.
//
//go:noescape
func probeMask(line *[lineWords]atomic.Int64, fp uint64) uint32
