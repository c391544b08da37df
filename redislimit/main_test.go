package redislimit

import (
	"context"
	"os"
	"testing"

	"github.com/limitsgo/limits/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// quiet drops go-redis's log lines, which the fault tests would fill with
// failed dials.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// TestMain runs the tests and examples with a redis-server for the whole
// run, at the address in REDIS_ADDR, as the examples read it.
func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	os.Exit(redistest.Main(m, "REDIS_ADDR"))
}
