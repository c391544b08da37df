package redislimit

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

// newClient returns a client of the server at addr, closed when t ends.
// With contextTimeout, the client bounds its socket I/O by the context.
func newClient(t testing.TB, addr string, contextTimeout bool) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: contextTimeout})
	t.Cleanup(func() { c.Close() })
	return c
}

var prefixes atomic.Int64

// freshPrefix returns a key prefix no other limiter of the test binary uses.
func freshPrefix() string { return fmt.Sprintf("test%d:", prefixes.Add(1)) }

// must returns g, panicking on err: for limiters whose configuration the
// test knows to be valid.
func must(g *GCRA, err error) *GCRA {
	if err != nil {
		panic(err)
	}
	return g
}
