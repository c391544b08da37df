package limits_test

import (
	"fmt"
	"time"

	"github.com/limitsgo/limits"
)

func ExampleEstimator() {
	e := limits.NewEstimator(4, 1024)
	e.Incr("alice", 3)
	e.Incr("alice", 2)
	fmt.Println(e.Incr("bob", 1))
	fmt.Println(e.Get("alice"))
	e.Decr("alice", 5)
	fmt.Println(e.Get("alice"))
	// Output:
	// 1
	// 5
	// 0
}

func ExampleRate() {
	r := limits.NewRate(time.Minute)
	const limit = 3
	for i := range 5 {
		if n := r.Observe("client-1", 1); n > limit {
			fmt.Printf("request %d: refused, %d this minute\n", i, n)
			continue
		}
		fmt.Printf("request %d: served\n", i)
	}
	fmt.Println("count so far:", r.Peek("client-1"))
	// Output:
	// request 0: served
	// request 1: served
	// request 2: served
	// request 3: refused, 4 this minute
	// request 4: refused, 5 this minute
	// count so far: 5
}

func ExampleRateComponents_Proportional() {
	// 60 events in the last completed window, 10 so far in the current one,
	// a quarter of which has passed: three quarters of the last window still
	// lie within one interval of now.
	c := limits.RateComponents{Prev: 60, Curr: 10, Interval: time.Minute, Fraction: 0.25}
	fmt.Printf("%.2f events/s\n", c.Proportional())
	// Output:
	// 0.92 events/s
}

func ExampleInflight() {
	in := limits.NewInflight()
	a, n := in.Incr("alice", 1) // a request starts
	fmt.Println("in flight:", n)
	b, n := in.Incr("alice", 1) // and another
	fmt.Println("in flight:", n)
	b.Close() // one ends
	fmt.Println("in flight:", in.Get("alice"))
	a.Close()
	fmt.Println("in flight:", in.Get("alice"))
	// Output:
	// in flight: 1
	// in flight: 2
	// in flight: 1
	// in flight: 0
}

func ExampleGuard_Incr() {
	in := limits.NewInflight()
	g, _ := in.Incr("upload", 1)
	g.Incr(4) // the request opened four more streams
	fmt.Println(in.Get("upload"))
	g.Close() // gives back all five
	g.Close() // does nothing
	fmt.Println(in.Get("upload"))
	// Output:
	// 5
	// 0
}

func ExampleGCRA() {
	// 2 requests per second per key, in a burst of at most 2.
	g := limits.NewGCRA(2, time.Second)
	now := time.Now()
	for range 3 {
		d := g.AllowNAt(now, "alice", 1)
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter, d.Reason)
	}
	d := g.AllowNAt(now.Add(500*time.Millisecond), "alice", 1)
	fmt.Println(d.Allowed, d.Remaining, d.ResetAfter)
	// Output:
	// true 1 0s allowed
	// true 0 0s allowed
	// false 0 500ms rate_limited
	// true 0 1s
}

func ExampleGCRA_AllowN() {
	g := limits.NewGCRA(10, time.Minute, limits.WithBurst(5))
	fmt.Println(g.AllowN("upload", 4).Remaining)
	fmt.Println(g.AllowN("upload", 20).Reason) // can never fit in a burst of 5
	fmt.Println(g.AllowN("upload", -1).Reason)
	// Output:
	// 1
	// cost_above_burst
	// invalid_cost
}

func ExampleLimit_UnmarshalText() {
	var l limits.Limit
	err := l.UnmarshalText([]byte("100/min"))
	fmt.Println(l.Events, l.Period, err)
	err = l.UnmarshalText([]byte("100 per minute"))
	fmt.Println(err)
	// Output:
	// 100 1m0s <nil>
	// limits: invalid limit "100 per minute": want events/period, such as 100/min
}

func ExampleGate() {
	gate, err := limits.NewGate(1)
	if err != nil {
		panic(err)
	}
	p, ok := gate.TryEnter()
	fmt.Println("first:", ok)
	_, ok = gate.TryEnter()
	fmt.Println("second:", ok)
	p.Release()
	s := gate.Stats()
	fmt.Println("in flight:", s.InFlight, "admitted:", s.Admitted, "shed:", s.Shed)
	// Output:
	// first: true
	// second: false
	// in flight: 0 admitted: 1 shed: 1
}

func ExampleSizing_Dims() {
	// About 10,000 clients a minute; an estimate may be too high by a
	// thousandth of the minute's requests, for all but 2% of the clients.
	hashes, slots, err := limits.Sizing{Keys: 10_000, MaxOverFraction: 0.001}.Dims()
	fmt.Println(hashes, slots, err)
	// Exact counts for all but 2% of the clients.
	hashes, slots, _ = limits.Sizing{Keys: 10_000}.Dims()
	fmt.Println(hashes, slots)
	// At most 5 too many, out of a million requests, for all but 1%.
	hashes, slots, _ = limits.Sizing{Events: 1_000_000, MaxOver: 5, Failure: 0.01}.Dims()
	fmt.Println(hashes, slots)
	_, _, err = limits.Sizing{MaxOver: 5}.Dims()
	fmt.Println(err)
	// Output:
	// 4 2660 <nil>
	// 4 26589
	// 5 418648
	// limits: Sizing.MaxOver needs Sizing.Events
}

func ExampleNewRate_sized() {
	// About 10,000 clients a minute, an estimate too high by at most a
	// thousandth of the minute's requests for all but 2% of them.
	r := limits.NewRate(time.Minute, limits.Sizing{Keys: 10_000, MaxOverFraction: 0.001})
	fmt.Println(r.Size(), "bytes") // two windows of 4 x 2660 counters
	fmt.Println(r.Observe("client-1", 1))
	// Output:
	// 170240 bytes
	// 1
}

func ExampleNewRate_conservative() {
	r := limits.NewRate(time.Minute, limits.Sizing{Conservative: true})
	for range 3 {
		r.Observe("client-1", 1)
	}
	fmt.Println(r.Peek("client-1"))
	fmt.Println(r.Observe("client-1", -1)) // a conservative Rate cannot take events back
	// Output:
	// 3
	// 3
}

func ExampleNewEstimator_conservative() {
	c := limits.NewEstimator(4, 1024, limits.Sizing{Conservative: true})
	c.Incr("alice", 3)
	fmt.Println(c.Incr("alice", 2))
	fmt.Println(c.Incr("alice", -5)) // counts cannot be taken back: ignored
	fmt.Println(c.Get("bob"))
	// Output:
	// 5
	// 5
	// 0
}

func ExampleNewEstimator_sized() {
	hashes, slots, err := limits.Sizing{Keys: 1000, MaxOverFraction: 0.01}.Dims()
	if err != nil {
		panic(err)
	}
	e := limits.NewEstimator(hashes, slots)
	fmt.Println(e.Size(), "bytes")
	e.Incr("alice", 2)
	fmt.Println(e.Get("alice"))
	// Output:
	// 8512 bytes
	// 2
}

func ExampleNewRate_keys() {
	// About 50,000 clients a minute, each counted exactly but for about
	// one in 10,000, which the sketch next to the table counts.
	r := limits.NewRate(time.Minute, limits.Sizing{Keys: 50_000})
	fmt.Println(r.Size(), "bytes") // two windows of 7,696 lines of table and as much sketch
	for range 3 {
		r.Observe("client-1", 1)
	}
	fmt.Println(r.Peek("client-1"), r.Peek("client-2"))
	// Output:
	// 1970176 bytes
	// 3 0
}
