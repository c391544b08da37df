package redislimit

import (
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/internal/limitertest"
	"github.com/limitsgo/limits/redislimit/redistest"
)

// TestConformance runs the suite shared with the local GCRA (see
// httplimit's TestLocalConformance) against the Redis GCRA, with a client
// that bounds its I/O by the context and one that does not, and with keys
// in their own slots or under a hash tag. Redis's clock has microseconds.
func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	for _, tt := range []struct {
		name           string
		contextTimeout bool
		opts           []Option
	}{
		{"DefaultClient", false, nil},
		{"ContextTimeoutClient", true, nil},
		{"HashTag", true, []Option{WithHashTag()}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newClient(t, srv.Addr(), tt.contextTimeout)
			limitertest.Run(t, time.Microsecond, func(t *testing.T, limit int, period time.Duration, burst int) limits.Limiter {
				opts := append([]Option{WithBurst(burst), WithPrefix(freshPrefix()), WithTimeout(10 * time.Second)}, tt.opts...)
				return must(New(c, limit, period, opts...))
			})
		})
	}
}
