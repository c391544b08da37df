package report

import (
	"slices"
	"time"
)

// Percentile returns the q quantile (0 < q <= 1) of ds by the nearest
// rank, or 0 if ds is empty. It sorts ds.
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q*float64(len(ds))+0.999999) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}
