package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/redislimit"
	"github.com/redis/go-redis/v9"
)

// The examples run against the redis-server the tests start, at the
// address in REDIS_ADDR.

func ExampleNew() {
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:                 []string{os.Getenv("REDIS_ADDR")},
		ContextTimeoutEnabled: true, // let the deadline end a slow call on the socket itself
	})
	defer rdb.Close()
	// 3 requests a minute per API key, across every process that shares
	// this Redis and prefix.
	perKey, err := redislimit.New(rdb, 3, time.Minute, redislimit.WithPrefix("example:api:"))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	defer perKey.Reset(ctx, "key-123")
	for range 4 {
		d, err := perKey.Allow(ctx, "key-123")
		switch {
		case err != nil:
			fmt.Println("no decision:", err) // FailClosed: d refuses too
		case !d.Allowed:
			fmt.Printf("refused (%v), retry in %v\n", d.Reason, d.RetryAfter.Round(time.Second))
		default:
			fmt.Printf("allowed, %d left\n", d.Remaining)
		}
	}
	// Output:
	// allowed, 2 left
	// allowed, 1 left
	// allowed, 0 left
	// refused (rate_limited), retry in 20s
}

// A request charged to two limiters, an address's and an API key's, is let
// through only if both allow it; when the second refuses, the first gets
// its charge back, so that the refused request costs the address nothing.
func ExampleGCRA_Refund() {
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{os.Getenv("REDIS_ADDR")}, ContextTimeoutEnabled: true})
	defer rdb.Close()
	perAddr, _ := redislimit.New(rdb, 600, time.Hour, redislimit.WithPrefix("example:addr:"))
	perKey, _ := redislimit.New(rdb, 1, time.Hour, redislimit.WithPrefix("example:key:"))
	ctx := context.Background()
	defer perAddr.Reset(ctx, "192.0.2.7")
	defer perKey.Reset(ctx, "key-123")

	request := func() {
		addr, err := perAddr.Allow(ctx, "192.0.2.7")
		if err != nil || !addr.Allowed {
			fmt.Println("refused by address:", addr.Reason, err)
			return
		}
		key, err := perKey.Allow(ctx, "key-123")
		if err != nil || !key.Allowed {
			if err := perAddr.Refund(ctx, "192.0.2.7", addr); err != nil {
				fmt.Println("the address keeps its charge:", err)
			}
			fmt.Println("refused by API key:", key.Reason, err)
			return
		}
		fmt.Println("allowed")
	}
	request()
	request()
	d, _ := perAddr.Peek(ctx, "192.0.2.7")
	fmt.Println("address requests left:", d.Remaining)
	// Output:
	// allowed
	// refused by API key: rate_limited <nil>
	// address requests left: 599
}

// With nothing listening at the address, every policy answers without
// Redis.
func ExampleOnError() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // nothing listens there
	defer rdb.Close()
	closed, _ := redislimit.New(rdb, 10, time.Second) // FailClosed is the default
	d, err := closed.Allow(context.Background(), "alice")
	fmt.Println(d.Allowed, d.Reason, errors.Is(err, redislimit.ErrUnavailable))
	fmt.Printf("%+v\n", closed.Stats())

	open, _ := redislimit.New(rdb, 10, time.Second, redislimit.OnError(redislimit.FailOpen))
	d, err = open.Allow(context.Background(), "alice")
	fmt.Println(d.Allowed, d.Reason, err)
	d, err = open.AllowN(context.Background(), "alice", 11) // never allowed, Redis or not
	fmt.Println(d.Allowed, d.Reason, err)
	// Output:
	// false limiter_error true
	// {Answered:0 Errors:1 Fallbacks:0 Refunds:0 RefundErrors:0}
	// true allowed <nil>
	// false cost_above_burst <nil>
}

func ExampleWithFallback() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	// Four processes share the limit of 10 a second: each allows a quarter
	// of it while Redis is away.
	local := limits.NewGCRA(10/4, time.Second)
	g, _ := redislimit.New(rdb, 10, time.Second, redislimit.WithFallback(local))

	for range 3 {
		d, err := g.Allow(context.Background(), "alice")
		fmt.Println(d.Allowed, d.Reason, d.Limit, err)
	}
	fmt.Printf("%+v\n", g.Stats())
	// Output:
	// true allowed 2 <nil>
	// true allowed 2 <nil>
	// false rate_limited 2 <nil>
	// {Answered:0 Errors:3 Fallbacks:3 Refunds:0 RefundErrors:0}
}

func ExampleWithLeases() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()
	// 100 requests a second per key across the fleet; a key hot in this
	// process is decided locally from leases of up to 16 slots.
	perKey, err := redislimit.New(rdb, 100, time.Second,
		redislimit.WithPrefix("example:leases:"), redislimit.WithLeases(16, 0))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	defer perKey.Reset(ctx, "key-123")
	allowed := 0
	for range 10 {
		if d, err := perKey.Allow(ctx, "key-123"); err == nil && d.Allowed {
			allowed++
		}
	}
	s := perKey.LeaseStats()
	// The first request is a call, as for a cold key; the second finds
	// the key hot and leases 16 slots, which the next 8 requests spend
	// without a call.
	fmt.Printf("%d allowed, %d calls to Redis, %d slots leased, %d in hand\n", allowed, perKey.Stats().Answered, s.Slots, s.Held)
	// Give the slots in hand back, as on shutdown.
	n, err := perKey.ReturnLeases(ctx)
	fmt.Println("returned:", n, err)
	// Output:
	// 10 allowed, 2 calls to Redis, 16 slots leased, 7 in hand
	// returned: 7 <nil>
}
