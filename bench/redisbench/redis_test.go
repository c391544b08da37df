package redisbench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/limitsgo/limits/redislimit"
	"github.com/limitsgo/limits/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

const (
	limit  = 100_000 // per second and key: every request in the benchmarks is allowed
	nkeys  = 1024
	burst  = 1000
	period = time.Second
)

var keys = func() []string {
	k := make([]string, nkeys)
	for i := range k {
		k[i] = fmt.Sprintf("client-%06d", i)
	}
	return k
}()

// allowFunc decides one unit request for key and reports whether it was
// allowed.
type allowFunc func(ctx context.Context, key string) (bool, error)

// limiters returns the contenders, all on client c, for limit a second in
// bursts of burst: redislimit in lease mode, redislimit with one call per
// decision, and redis_rate.
func limiters(c redis.UniversalClient, limit, burst int) []struct {
	name  string
	allow allowFunc
} {
	// A fresh key space for each set: redis_rate's keys have a fixed
	// prefix.
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		panic(err)
	}
	prefix := fmt.Sprintf("bench%d:", prefixes.Add(1))
	ours, err := redislimit.New(c, limit, period, redislimit.WithBurst(burst), redislimit.WithTimeout(time.Second), redislimit.WithPrefix(prefix))
	if err != nil {
		panic(err) // the configuration is constant and valid
	}
	leased, err := redislimit.New(c, limit, period, redislimit.WithBurst(burst), redislimit.WithTimeout(time.Second),
		redislimit.WithPrefix(prefix+"leases:"), redislimit.WithLeases(min(hotSlots, burst), 0))
	if err != nil {
		panic(err)
	}
	peer := redis_rate.NewLimiter(c)
	peerLimit := redis_rate.Limit{Rate: limit, Burst: burst, Period: period}
	return []struct {
		name  string
		allow allowFunc
	}{
		{"redislimit_leases", func(ctx context.Context, key string) (bool, error) {
			d, err := leased.Allow(ctx, key)
			return d.Allowed, err
		}},
		{"redislimit", func(ctx context.Context, key string) (bool, error) {
			d, err := ours.Allow(ctx, key)
			return d.Allowed, err
		}},
		{"redis_rate", func(ctx context.Context, key string) (bool, error) {
			r, err := peer.Allow(ctx, key, peerLimit)
			if err != nil {
				return false, err
			}
			return r.Allowed > 0, nil
		}},
	}
}

var prefixes atomic.Int64

// BenchmarkRedis measures decisions per second (1e9 / ns/op) and their
// latency, p50 and p99, of redislimit, of redislimit in lease mode and of
// github.com/go-redis/redis_rate on one local redis-server, for cold keys
// (1,024 keys in turn, each far below its limit, so that every decision is
// a call, even in lease mode), from one goroutine and from 16, with a
// client that bounds socket I/O by the context (as redislimit advises) and
// with go-redis's default client. Every request is allowed and so writes.
func BenchmarkRedis(b *testing.B) {
	srv := redistest.Start(b)
	for _, contextTimeout := range []bool{true, false} {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: contextTimeout})
		client := "default_client"
		if contextTimeout {
			client = "context_client"
		}
		for _, l := range limiters(c, limit, burst) {
			b.Run(fmt.Sprintf("%s/%s/serial", l.name, client), func(b *testing.B) {
				measure(b, c, 1, func(_, i int) string { return keys[i%nkeys] }, l.allow, true)
			})
			b.Run(fmt.Sprintf("%s/%s/parallel16", l.name, client), func(b *testing.B) {
				measure(b, c, 16, func(w, i int) string { return keys[(w*131+i*7)%nkeys] }, l.allow, true)
			})
		}
		c.Close()
	}
}

// BenchmarkRedisPaired measures what BenchmarkRedis does for redislimit
// (one call per decision) and redis_rate, cold keys, every request
// allowed, but alternates the two in blocks of 256 decisions on one
// client, so that both see the same load on a shared machine, whose
// changes from second to second otherwise outweigh the difference. It
// reports each one's time per decision (redislimit-ns/op, redis_rate-ns/op)
// and their ratio over all blocks (ratio) and the median of the blocks'
// ratios (median-ratio); ns/op is per pair of decisions.
func BenchmarkRedisPaired(b *testing.B) {
	srv := redistest.Start(b)
	ctx := context.Background()
	for _, contextTimeout := range []bool{true, false} {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: contextTimeout})
		client := "default_client"
		if contextTimeout {
			client = "context_client"
		}
		ls := limiters(c, limit, burst)[1:] // redislimit, redis_rate
		for _, workers := range []int{1, 16} {
			mode := "serial"
			if workers > 1 {
				mode = fmt.Sprintf("parallel%d", workers)
			}
			b.Run(client+"/"+mode, func(b *testing.B) {
				const block = 256
				var sums [2]time.Duration
				var ratios []float64
				b.ReportAllocs()
				for n := 0; n < b.N; n += block {
					var took [2]time.Duration
					for li, l := range ls {
						start := time.Now()
						var wg sync.WaitGroup
						for w := range workers {
							wg.Go(func() {
								for i := range block / workers {
									if ok, err := l.allow(ctx, keys[(n+w*131+i*7)%nkeys]); err != nil || !ok {
										b.Errorf("%s: allowed %v, %v", l.name, ok, err)
										return
									}
								}
							})
						}
						wg.Wait()
						took[li] = time.Since(start)
						sums[li] += took[li]
					}
					ratios = append(ratios, float64(took[0])/float64(took[1]))
				}
				decisions := float64((b.N + block - 1) / block * block)
				slices.Sort(ratios)
				b.ReportMetric(float64(sums[0])/decisions, "redislimit-ns/op")
				b.ReportMetric(float64(sums[1])/decisions, "redis_rate-ns/op")
				b.ReportMetric(float64(sums[0])/float64(sums[1]), "ratio")
				b.ReportMetric(ratios[len(ratios)/2], "median-ratio")
			})
		}
		c.Close()
	}
}

// Hot keys: the limits of BenchmarkRedisHot.
const (
	hotLimit  = 10_000_000 // per second and key, above what one process asks: every request allowed
	hotBurst  = 1_000_000  // a burst of 100ms
	hotSlots  = 256        // the most slots of a lease
	overLimit = 100_000    // a key far over its limit: most requests refused
	overBurst = 1000
)

// BenchmarkRedisHot measures hot keys: one key from one goroutine, and 100
// keys over 8 goroutines, each key within its limit (every request
// allowed) or far over it (most refused), for redislimit in lease mode,
// redislimit with one call per decision and redis_rate, on one
// redis-server and one client that bounds I/O by the context. Besides
// ns/op (decisions/s = 1e9 / ns/op) and the latency percentiles it reports
// the Redis script calls per 1,000 decisions, counted by the server (INFO
// commandstats), and the share of requests allowed.
func BenchmarkRedisHot(b *testing.B) {
	srv := redistest.Start(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	hot := make([]string, 100)
	for i := range hot {
		hot[i] = fmt.Sprintf("hot-%03d", i)
	}
	for _, lim := range []struct {
		name         string
		limit, burst int
	}{{"within", hotLimit, hotBurst}, {"over", overLimit, overBurst}} {
		for _, l := range limiters(c, lim.limit, lim.burst) {
			b.Run(fmt.Sprintf("%s/%s/1key", l.name, lim.name), func(b *testing.B) {
				measure(b, c, 1, func(_, _ int) string { return "hot" }, l.allow, false)
			})
			b.Run(fmt.Sprintf("%s/%s/100keys_8goroutines", l.name, lim.name), func(b *testing.B) {
				measure(b, c, 8, func(w, i int) string { return hot[(w*13+i)%len(hot)] }, l.allow, false)
			})
		}
	}
}

// scriptCalls returns the scripts Redis has run, by INFO commandstats.
func scriptCalls(b *testing.B, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || !strings.HasPrefix(name, "cmdstat_eval") {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		v, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		n += v
	}
	return n
}

// measure runs allow from workers goroutines (one: the benchmark's own)
// for b.N decisions in all, with key(worker, i) the key of a worker's i-th
// decision, and reports the latency of one decision in 8, the script
// calls per 1,000 decisions and the share allowed. With allAllowed, a
// refusal fails the benchmark.
func measure(b *testing.B, c *redis.Client, workers int, key func(worker, i int) string, allow allowFunc, allAllowed bool) {
	ctx := context.Background()
	var mu sync.Mutex
	var total histogram
	var allowed, decided int64
	calls := scriptCalls(b, c)
	b.ReportAllocs()
	run := func(w int, next func() bool) {
		var h histogram
		var yes, n int64
		for i := 0; next(); i++ {
			k := key(w, i)
			if i%8 == 0 {
				start := time.Now()
				ok, err := allow(ctx, k)
				h.add(time.Since(start))
				if err != nil {
					b.Error(err)
					return
				}
				if ok {
					yes++
				}
			} else {
				ok, err := allow(ctx, k)
				if err != nil {
					b.Error(err)
					return
				}
				if ok {
					yes++
				}
			}
			n++
		}
		mu.Lock()
		total.merge(&h)
		allowed += yes
		decided += n
		mu.Unlock()
	}
	if workers == 1 {
		run(0, b.Loop)
	} else {
		var worker atomic.Int64
		b.SetParallelism(max(workers/runtime.GOMAXPROCS(0), 1))
		b.RunParallel(func(pb *testing.PB) { run(int(worker.Add(1)), pb.Next) })
	}
	b.StopTimer()
	calls = scriptCalls(b, c) - calls - 1 // INFO itself is not a script
	total.report(b)
	if decided > 0 {
		b.ReportMetric(1000*float64(calls)/float64(decided), "calls/1000")
		b.ReportMetric(float64(allowed)/float64(decided), "allowed/op")
	}
	if allAllowed && allowed < decided {
		b.Fatalf("%d requests denied: the benchmark should measure allowed requests", decided-allowed)
	}
}

// histogram counts latencies in bins of 10ns below 1µs and of 1µs up to
// 20ms.
type histogram struct {
	fine [100]uint64
	bins [20_000]uint64
	over uint64
	n    uint64
}

func (h *histogram) add(d time.Duration) {
	h.n++
	switch us := d.Microseconds(); {
	case us == 0:
		h.fine[d/10]++
	case us < int64(len(h.bins)):
		h.bins[us]++
	default:
		h.over++
	}
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.fine {
		h.fine[i] += c
	}
	for i, c := range o.bins {
		h.bins[i] += c
	}
	h.over += o.over
	h.n += o.n
}

// quantile returns the upper end of the bin holding quantile q, in
// microseconds, or -1 if it lies beyond the bins.
func (h *histogram) quantile(q float64) float64 {
	rank := uint64(q * float64(h.n))
	var seen uint64
	for i, c := range h.fine {
		seen += c
		if seen > rank {
			return float64(i+1) / 100
		}
	}
	for i, c := range h.bins[1:] {
		seen += c
		if seen > rank {
			return float64(i + 2)
		}
	}
	return -1
}

func (h *histogram) report(b *testing.B) {
	if h.n == 0 {
		return
	}
	b.ReportMetric(h.quantile(0.50), "p50-us")
	b.ReportMetric(h.quantile(0.99), "p99-us")
}
