package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/redislimit"
	"github.com/redis/go-redis/v9"
)

func ExampleNew() {
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:                 []string{"127.0.0.1:6379"},
		ContextTimeoutEnabled: true, // let the deadline end a slow call on the socket itself
	})
	defer rdb.Close()
	// 100 requests a minute per API key, across every process that shares
	// this Redis and prefix.
	perKey := redislimit.New(rdb, 100, time.Minute, redislimit.WithPrefix("limits:api:"))

	d, err := perKey.Allow(context.Background(), "key-123")
	switch {
	case err != nil:
		fmt.Println("no decision:", err) // FailClosed: d refuses too
	case !d.Allowed:
		fmt.Printf("refused (%v), retry in %v\n", d.Reason, d.RetryAfter)
	default:
		fmt.Printf("allowed, %d left\n", d.Remaining)
	}
}

// With nothing listening at the address, every policy answers without
// Redis.
func ExampleFailClosed() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // nothing listens there
	defer rdb.Close()
	g := redislimit.New(rdb, 10, time.Second) // FailClosed is the default

	d, err := g.Allow(context.Background(), "alice")
	fmt.Println(d.Allowed, d.Reason, errors.Is(err, redislimit.ErrUnavailable))
	fmt.Printf("%+v\n", g.Stats())
	// Output:
	// false unavailable true
	// {Answered:0 Errors:1 Fallbacks:0}
}

func ExampleFailOpen() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	g := redislimit.New(rdb, 10, time.Second, redislimit.FailOpen())

	d, err := g.Allow(context.Background(), "alice")
	fmt.Println(d.Allowed, d.Reason, err)
	d, err = g.AllowN(context.Background(), "alice", 11) // never allowed, Redis or not
	fmt.Println(d.Allowed, d.Reason, err)
	// Output:
	// true allowed <nil>
	// false cost_above_burst <nil>
}

func ExampleFallback() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	// Four processes share the limit of 10 a second: each allows a quarter
	// of it while Redis is away.
	local := limits.NewGCRA(10/4, time.Second)
	g := redislimit.New(rdb, 10, time.Second, redislimit.Fallback(local))

	for range 3 {
		d, err := g.Allow(context.Background(), "alice")
		fmt.Println(d.Allowed, d.Reason, d.Limit, err)
	}
	fmt.Printf("%+v\n", g.Stats())
	// Output:
	// true allowed 2 <nil>
	// true allowed 2 <nil>
	// false rate_limited 2 <nil>
	// {Answered:0 Errors:3 Fallbacks:3}
}
