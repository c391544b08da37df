package redislimitprom_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/limitsprom/redislimitprom"
	"github.com/limitsgo/limits/redislimit"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/redis/go-redis/v9"
)

// A Redis GCRA whose server cannot be reached lets its fallback decide,
// and the metrics say so: a failed call of kind connection, and a
// decision by the fallback.
func ExampleRegister() {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: every dial is refused
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer rdb.Close()
	perKey, err := redislimit.New(rdb, 100, time.Minute,
		redislimit.WithFallback(limits.NewGCRA(100, time.Minute)))
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	if err := redislimitprom.Register(reg, "fleet", perKey); err != nil {
		panic(err)
	}
	d, _ := perKey.Allow(context.Background(), "key-123")
	fmt.Println("allowed:", d.Allowed)

	text, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain,
		"limits_redis_calls_total", "limits_redis_failures_total", "limits_redis_fallbacks_total")
	if err != nil {
		panic(err)
	}
	for line := range strings.Lines(string(text)) {
		if !strings.HasPrefix(line, "# HELP") {
			fmt.Print(line)
		}
	}
	// Output:
	// allowed: true
	// # TYPE limits_redis_calls_total counter
	// limits_redis_calls_total{name="fleet",op="decide",result="failed"} 1
	// limits_redis_calls_total{name="fleet",op="decide",result="ok"} 0
	// limits_redis_calls_total{name="fleet",op="refund",result="failed"} 0
	// limits_redis_calls_total{name="fleet",op="refund",result="ok"} 0
	// # TYPE limits_redis_failures_total counter
	// limits_redis_failures_total{kind="canceled",name="fleet"} 0
	// limits_redis_failures_total{kind="connection",name="fleet"} 1
	// limits_redis_failures_total{kind="other",name="fleet"} 0
	// limits_redis_failures_total{kind="server",name="fleet"} 0
	// limits_redis_failures_total{kind="timeout",name="fleet"} 0
	// # TYPE limits_redis_fallbacks_total counter
	// limits_redis_fallbacks_total{name="fleet"} 1
}
