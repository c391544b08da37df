package httplimit_test

import (
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/internal/limitertest"
)

// TestLocalConformance runs the suite shared with the Redis GCRA of package
// redislimit against Local.
func TestLocalConformance(t *testing.T) {
	limitertest.Run(t, 0, func(t *testing.T, limit int, period time.Duration, burst int) httplimit.Limiter {
		return httplimit.Local(limits.NewGCRA(limit, period, limits.WithBurst(burst)))
	})
}
