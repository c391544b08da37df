// Package adaptive finds a process's capacity while it runs: a Controller
// moves a limits.Gate's maximum, the requests it admits at once, between a
// floor and a ceiling, from the latency of the requests it admitted.
//
// A fixed maximum has to be measured (cmd/limits-capacity finds the knee
// of latency against concurrency), and is wrong as soon as the machine, the
// code or a dependency changes. A Controller measures all the time: while
// latency stays near what requests take without queueing (the baseline,
// which it measures now and then at low concurrency), the limit rises; as
// queues form and latency grows, it falls. The law that maps a window of
// latencies to the next limit is a Law: Gradient (the default) and Vegas
// read latency, AIMD reads failures, Lowest combines them.
//
// The gate keeps its guarantees whatever the law does: never more requests
// inside than its current maximum, a bounded wait, exact counters. A front
// end enters the gate through the Controller, which lets a request that
// finds it full wait the time in which two places free (Controller.Wait;
// until the first window ends, the mean latency), and tells the
// Controller how each admitted request went:
//
//	var serve func() // the work the gate protects
//	gate, _ := limits.NewGate(64)
//	ctrl, _ := adaptive.New(gate, adaptive.Config{Min: 4, Max: 512})
//
//	p, ok := ctrl.Enter(context.Background())
//	if !ok {
//		// refuse: 503
//	}
//	start := time.Now()
//	serve()
//	ctrl.Observe(time.Since(start), adaptive.Success)
//	p.Release()
//
// Gate.TryEnter, which never waits, works too, at a cost at small limits:
// a gate of a few places refuses a request that finds it full for an
// instant, between one request's end and the next one's arrival, and
// leaves a tenth to a quarter of the capacity unused (docs/CAPACITY.md).
package adaptive
