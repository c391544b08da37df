package limits

// prefetch asks the processor to bring the cache line at addr in, without
// waiting for it and without faulting, whatever addr is: a GCRA asks for a
// key's slot before it takes its shard's lock and reads the clock, both of
// which wait for earlier loads, so that the cache miss overlaps them.
//
//go:noescape
func prefetch(addr uintptr)
