package emission

import (
	"testing"
	"time"
)

func TestInterval(t *testing.T) {
	for _, tt := range []struct {
		limit  int
		period time.Duration
		want   int64
	}{
		{10, time.Second, 100_000_000},
		{3, time.Second, 333_333_334},
		{2_000_000_000, time.Second, 1},
		{1, time.Hour, int64(time.Hour)},
	} {
		if got := Interval(tt.limit, tt.period); got != tt.want {
			t.Errorf("Interval(%d, %v) = %d, want %d", tt.limit, tt.period, got, tt.want)
		}
	}
	if !Fits(int64(time.Hour), 1000) || Fits(int64(time.Hour), 1<<20) {
		t.Error("Fits disagrees with MaxSpan")
	}
}
