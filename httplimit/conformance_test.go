package httplimit_test

import (
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/internal/limitertest"
)

// TestLocalConformance runs the suite shared with the Redis GCRA of package
// redislimit against the local GCRA.
func TestLocalConformance(t *testing.T) {
	limitertest.Run(t, 0, func(t *testing.T, limit int, period time.Duration, burst int) limits.Limiter {
		return limits.NewGCRA(limit, period, limits.WithBurst(burst))
	})
}
