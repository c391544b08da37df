// Package redislimit limits requests per key across many processes: the
// GCRA of package limits with its state in Redis, through go-redis.
//
// A limits.GCRA limits what one process allows. When a fleet of N processes
// each runs one, a caller spread over them gets N times the limit; a GCRA
// from this package keeps one state per key in Redis, shared by the fleet,
// and makes the same decisions as limits.GCRA would, in one round trip per
// request. It implements httplimit.Limiter, so the middleware takes either.
//
//	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"redis:6379"}, ContextTimeoutEnabled: true})
//	perKey := redislimit.New(rdb, 100, time.Minute, redislimit.WithPrefix("limits:api:"))
//	d, err := perKey.Allow(ctx, apiKey)
//
// Semantics: the decision, Remaining, RetryAfter and ResetAfter are those of
// limits.GCRA with the same limit, period and burst, at the time of the
// Redis server's clock (TIME, in microseconds), in integer nanoseconds.
// Costs of 0, above the burst and below 0 are answered as limits.GCRA
// answers them. The state of a key is one string, its theoretical arrival
// time in nanoseconds since the Unix epoch, which expires once the key is
// back to its full burst. It needs Redis 6.2 or later.
//
// Failures: when Redis cannot decide, the policy chosen at construction
// does. FailClosed, the default, refuses and returns an error wrapping
// ErrUnavailable; FailOpen allows; Fallback asks a local limits.GCRA. Every
// call is bounded by the caller's context and a timeout (DefaultTimeout,
// 100ms), and Stats counts the failures. Redis may be down when New is
// called and may go away and come back: calls fail by the policy meanwhile
// and decide again once it answers. While Redis is unreachable each call may
// take up to the timeout, until go-redis, after PoolSize failed dials in a
// row, fails at once and probes Redis once a second; decisions then resume
// within about a second of its return.
//
// A failed call may still have charged its key in Redis: a command that
// reached Redis after its caller gave up still runs, and go-redis retries a
// command whose connection broke, which may charge it twice. Failures never
// lower what a key owes.
//
// Redis Cluster: each key goes to the slot of its own name by default;
// WithHashTag puts all keys of one limiter in one slot, at the cost of
// putting all its load on one node.
package redislimit
