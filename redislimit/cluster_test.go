package redislimit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/internal/limitertest"
	"github.com/limitsgo/limits/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// TestCluster runs the conformance suite on a three-node Redis Cluster
// through the client redis.NewUniversalClient makes for it, and checks
// where the keys go: spread over the nodes by default, all on one node with
// a hash tag.
func TestCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	if _, ok := c.(*redis.ClusterClient); !ok {
		t.Fatalf("NewUniversalClient made a %T", c)
	}
	if !honorsContext(c) {
		t.Error("a ClusterClient with ContextTimeoutEnabled is not seen as bounding its I/O by the context")
	}
	limitertest.Run(t, time.Microsecond, func(t *testing.T, limit int, period time.Duration, burst int) limits.Limiter {
		return must(New(c, limit, period, WithBurst(burst), WithPrefix(freshPrefix()), WithTimeout(10*time.Second)))
	})

	// The calls below check where the keys go, not how long Redis takes:
	// they wait as long as it takes, which can be longer than
	// DefaultTimeout on a busy machine.
	ctx := context.Background()
	spread := must(New(c, 10, time.Hour, WithPrefix(freshPrefix()), WithTimeout(10*time.Second)))
	tagged := must(New(c, 10, time.Hour, WithPrefix(freshPrefix()), WithHashTag(), WithTimeout(10*time.Second)))
	for i := range 32 {
		for _, g := range []*GCRA{spread, tagged} {
			if d, err := g.Allow(ctx, fmt.Sprint("client-", i)); err != nil || !d.Allowed {
				t.Fatalf("%+v, %v", d, err)
			}
		}
	}
	nodesWith := func(g *GCRA) (nodes, keys int) {
		for _, addr := range cluster.Addrs() {
			node := redis.NewClient(&redis.Options{Addr: addr})
			n := len(node.Keys(ctx, g.Key("*")).Val())
			node.Close()
			if n > 0 {
				nodes++
				keys += n
			}
		}
		return nodes, keys
	}
	if nodes, keys := nodesWith(spread); nodes < 2 || keys != 32 {
		t.Errorf("without a hash tag: %d keys on %d nodes, want 32 on several", keys, nodes)
	}
	if nodes, keys := nodesWith(tagged); nodes != 1 || keys != 32 {
		t.Errorf("with a hash tag: %d keys on %d nodes, want 32 on one", keys, nodes)
	}

	// Leases: each key's lease is one key's script, in that key's slot.
	for _, opts := range [][]Option{nil, {WithHashTag()}} {
		leased := must(New(c, 1000, time.Second, append([]Option{WithPrefix(freshPrefix()), WithLeases(16, 0), WithTimeout(10 * time.Second)}, opts...)...))
		for i := range 8 {
			for range 20 {
				if d, err := leased.Allow(ctx, fmt.Sprint("hot-", i)); err != nil || !d.Allowed {
					t.Fatalf("lease mode: %+v, %v", d, err)
				}
			}
		}
		if s := leased.LeaseStats(); s.Leases < 8 || s.Spent < 8*16 {
			t.Errorf("lease mode on a cluster: %+v, want a lease a key", s)
		}
		if n, err := leased.ReturnLeases(ctx); err != nil || n == 0 {
			t.Errorf("ReturnLeases on a cluster: %d, %v", n, err)
		}
	}
}
