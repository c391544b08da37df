// Package emission holds the arithmetic that the local and the Redis GCRA
// share, so that both round and bound the emission interval alike.
package emission

import (
	"math"
	"time"
)

// MaxSpan bounds every time a GCRA computes with, in nanoseconds (about 73
// years either way), so that sums of two never overflow.
const MaxSpan = math.MaxInt64 / 4

// Interval returns T for limit events per period, in nanoseconds: period /
// limit rounded up, so that the limit is never exceeded. Both must be
// positive.
func Interval(limit int, period time.Duration) int64 {
	t := int64(period) / int64(limit)
	if int64(period)%int64(limit) != 0 {
		t++
	}
	return t
}

// Fits reports whether burst*t, the time a key takes to recover a full
// burst, stays within MaxSpan. burst must be positive.
func Fits(t int64, burst int) bool {
	return t <= MaxSpan/int64(burst)
}
