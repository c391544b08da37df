//go:build !amd64

package limits

import "sync/atomic"

// probeMask is probeWords where there is no assembly version.
func probeMask(line *[lineWords]atomic.Int64, fp uint64) uint32 { return probeWords(line, fp) }
