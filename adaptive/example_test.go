package adaptive_test

import (
	"context"
	"fmt"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
)

// A Controller moves a gate's maximum from what Observe reports. Here an
// AIMD law, which needs no baseline, backs off after a window in which a
// request failed with an overload, and grows after one without.
func Example() {
	gate, err := limits.NewGate(10)
	if err != nil {
		panic(err)
	}
	ctrl, err := adaptive.New(gate, adaptive.Config{
		Law:        adaptive.AIMD{Backoff: 0.5},
		Min:        2,
		Max:        100,
		Window:     time.Nanosecond, // a window per 4 requests, for the example
		Samples:    4,
		ProbeEvery: -1, // AIMD reads no baseline
	})
	if err != nil {
		panic(err)
	}
	handle := func(overloaded bool) {
		p, ok := ctrl.Enter(context.Background()) // waits ctrl.Wait() at most
		if !ok {
			return // 503
		}
		defer p.Release()
		start := time.Now()
		// ... serve the request ...
		outcome := adaptive.Success
		if overloaded {
			outcome = adaptive.Dropped // a dependency refused or timed out
		}
		ctrl.Observe(time.Since(start), outcome)
	}
	fmt.Println("limit:", ctrl.Limit())
	for i := range 4 {
		handle(i == 2)
	}
	fmt.Println("after a failure:", ctrl.Limit())
	for range 4 {
		handle(false)
	}
	// One request at a time is not what holds the limit back: it stays.
	fmt.Println("after quiet windows:", ctrl.Limit(), "gate:", gate.Stats().Max)
	// Output:
	// limit: 10
	// after a failure: 5
	// after quiet windows: 5 gate: 5
}
