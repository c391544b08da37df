package limits

import "sync/atomic"

// prefetch asks the processor to bring the cache line at addr in, without
// waiting for it and without faulting, whatever addr is: a GCRA asks for a
// key's slot before it takes its shard's lock and reads the clock, both of
// which wait for earlier loads, so that the cache miss overlaps them.
//
//go:noescape
func prefetch(addr uintptr)

// prefetch5 is prefetch for five addresses at once: the line of a key in
// the table of a Rate's window and its four counters in the sketch, in one
// call rather than five, as assembly is never inlined.
//
//go:noescape
func prefetch5(a, b, c, d, e uintptr)

// probeMask returns a mask of the entries of a line of a Rate's table that
// hold fingerprint fp or are empty: bit 2e+1 for entry e, the low half of
// word e/2 for an even e and the high half for an odd one.
//
//go:noescape
func probeMask(line *[lineWords]atomic.Int64, fp uint64) uint32
