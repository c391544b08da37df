//go:build !amd64

package limits

import "sync/atomic"

// prefetch does nothing where no assembly asks the processor to prefetch.
func prefetch(uintptr) {}

// prefetch5 does nothing where no assembly asks the processor to prefetch.
func prefetch5(a, b, c, d, e uintptr) {}

// probeMask is probeWords where there is no SSE2 version.
func probeMask(line *[lineWords]atomic.Int64, fp uint64) uint32 { return probeWords(line, fp) }
