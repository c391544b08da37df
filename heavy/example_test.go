package heavy_test

import (
	"fmt"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/heavy"
)

func Example() {
	r := limits.NewRate(time.Minute)
	top := heavy.New(100, 16) // name up to 16 keys past 100 a minute
	observe := func(client string) {
		top.Offer(client, r.Observe(client, 1), 1)
	}
	for range 150 {
		observe("10.0.0.7")
	}
	for range 120 {
		observe("10.0.0.9")
	}
	for range 20 {
		observe("10.0.0.1")
	}
	// Once a minute: log the window's top offenders, then start over.
	for _, h := range top.Top(5) {
		fmt.Printf("%s: %d requests, %d counted exactly since it passed 100\n", h.Key, h.Estimate, h.Exact)
	}
	top.Reset()
	// Output:
	// 10.0.0.7: 150 requests, 51 counted exactly since it passed 100
	// 10.0.0.9: 120 requests, 21 counted exactly since it passed 100
}
