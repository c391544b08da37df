package redisbench

import (
	"context"
	"fmt"
	"sync"
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

// limiters returns the contenders, all on client c.
func limiters(c redis.UniversalClient) []struct {
	name  string
	allow allowFunc
} {
	ours, err := redislimit.New(c, limit, period, redislimit.WithBurst(burst), redislimit.WithTimeout(time.Second))
	if err != nil {
		panic(err) // the configuration is constant and valid
	}
	peer := redis_rate.NewLimiter(c)
	peerLimit := redis_rate.Limit{Rate: limit, Burst: burst, Period: period}
	return []struct {
		name  string
		allow allowFunc
	}{
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

// BenchmarkRedis measures decisions per second (1e9 / ns/op) and their
// latency, p50 and p99, of redislimit and of github.com/go-redis/redis_rate
// on one local redis-server, from one goroutine and from 16, with a client
// that bounds socket I/O by the context (as redislimit advises) and with
// go-redis's default client. Every request is allowed and so writes.
func BenchmarkRedis(b *testing.B) {
	srv := redistest.Start(b)
	for _, contextTimeout := range []bool{true, false} {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: contextTimeout})
		client := "default_client"
		if contextTimeout {
			client = "context_client"
		}
		for _, l := range limiters(c) {
			b.Run(fmt.Sprintf("%s/%s/serial", l.name, client), func(b *testing.B) { serial(b, l.allow) })
			b.Run(fmt.Sprintf("%s/%s/parallel16", l.name, client), func(b *testing.B) { parallel(b, 8, l.allow) })
		}
		c.Close()
	}
}

func serial(b *testing.B, allow allowFunc) {
	ctx := context.Background()
	var h histogram
	denied := 0
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		start := time.Now()
		ok, err := allow(ctx, keys[i%nkeys])
		h.add(time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		if !ok {
			denied++
		}
		i++
	}
	h.report(b)
	if denied > 0 {
		b.Fatalf("%d requests denied: the benchmark should measure allowed requests", denied)
	}
}

// parallel runs allow from perCPU*GOMAXPROCS goroutines.
func parallel(b *testing.B, perCPU int, allow allowFunc) {
	ctx := context.Background()
	var mu sync.Mutex
	var total histogram
	denied := 0
	b.ReportAllocs()
	b.SetParallelism(perCPU)
	b.RunParallel(func(pb *testing.PB) {
		var h histogram
		no := 0
		i := 0
		for pb.Next() {
			start := time.Now()
			ok, err := allow(ctx, keys[i%nkeys])
			h.add(time.Since(start))
			if err != nil {
				b.Error(err)
				return
			}
			if !ok {
				no++
			}
			i += 7
		}
		mu.Lock()
		total.merge(&h)
		denied += no
		mu.Unlock()
	})
	total.report(b)
	if denied > 0 {
		b.Fatalf("%d requests denied: the benchmark should measure allowed requests", denied)
	}
}

// histogram counts latencies in microsecond bins up to 20ms.
type histogram struct {
	bins [20_000]uint64
	over uint64
	n    uint64
}

func (h *histogram) add(d time.Duration) {
	h.n++
	if us := d.Microseconds(); us < int64(len(h.bins)) {
		h.bins[us]++
	} else {
		h.over++
	}
}

func (h *histogram) merge(o *histogram) {
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
	for i, c := range h.bins {
		seen += c
		if seen > rank {
			return float64(i + 1)
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
