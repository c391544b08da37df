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

func ExampleProportionalRate() {
	// 60 events in the last completed window, 10 so far in the current one,
	// a quarter of which has passed: three quarters of the last window still
	// lie within one interval of now.
	c := limits.RateComponents{Prev: 60, Curr: 10, Interval: time.Minute, Fraction: 0.25}
	fmt.Printf("%.2f events/s\n", limits.ProportionalRate(c))
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
