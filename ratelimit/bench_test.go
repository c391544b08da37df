package ratelimit

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
)

const benchConfig = `domain: bench
descriptors:
  - key: hot
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: cold
    rate_limit: {unit: second, requests_per_unit: 10}
`

// BenchmarkShouldRateLimit measures a decision in process, called
// directly: one hot descriptor decided in this process, and through
// Redis in lease mode (hot) or a call per decision (cold).
func BenchmarkShouldRateLimit(b *testing.B) {
	run := func(b *testing.B, opts Options, key string, cold bool) {
		dir := b.TempDir()
		writeFiles(b, dir, "bench.yaml", benchConfig)
		s, err := New(opts)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.LoadDir(dir); err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			r := rlreq("bench", desc(key+"=v"))
			for pb.Next() {
				if cold {
					r.Descriptors[0].Entries[0].Value = strconv.FormatInt(next.Add(1), 10)
				}
				if _, err := s.ShouldRateLimit(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("hot/local", func(b *testing.B) { run(b, Options{}, "hot", false) })
	b.Run("hot/redis", func(b *testing.B) {
		rs := startRedis(b)
		run(b, Options{Redis: rs.client()}, "hot", false)
	})
	b.Run("cold/redis", func(b *testing.B) {
		rs := startRedis(b)
		run(b, Options{Redis: rs.client()}, "cold", true)
	})
}
