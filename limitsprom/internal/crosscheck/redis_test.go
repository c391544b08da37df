package crosscheck

import (
	"context"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/limitsprom"
	"github.com/limitsgo/limits/limitsprom/internal/promtest"
	"github.com/limitsgo/limits/limitsprom/limitsotel"
	"github.com/limitsgo/limits/quota"
	"github.com/limitsgo/limits/redislimit"
	"github.com/limitsgo/limits/redislimit/redistest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
)

// TestRedis sends known calls through a Redis GCRA, then makes one fail
// with the server gone, and scrapes its metrics over loopback.
func TestRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	local := limits.NewGCRA(2, time.Hour)
	g, err := redislimit.New(c, 2, time.Hour, redislimit.WithPrefix("limitsprom:test:"), redislimit.WithFallback(local))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := limitsprom.Register(reg, "fleet", g); err != nil {
		t.Fatal(err)
	}
	url := serve(t, reg)

	ctx := context.Background()
	var allowed []limits.Decision
	for range 3 {
		d, err := g.Allow(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed = append(allowed, d)
		}
	}
	if len(allowed) != 2 {
		t.Fatalf("%d of 3 allowed, want 2", len(allowed))
	}
	if err := g.Refund(ctx, "k", allowed[1]); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if d, err := g.Allow(ctx, "k"); err != nil || !d.Allowed {
		t.Fatalf("with Redis gone, the fallback's decision: %+v, %v", d, err)
	}

	want := `
# HELP limits_redis_calls_total Calls of the Redis GCRA's scripts, by operation (decide or refund) and result (ok, or failed: no answer in time, or an error).
# TYPE limits_redis_calls_total counter
limits_redis_calls_total{name="fleet",op="decide",result="failed"} 1
limits_redis_calls_total{name="fleet",op="decide",result="ok"} 3
limits_redis_calls_total{name="fleet",op="refund",result="failed"} 0
limits_redis_calls_total{name="fleet",op="refund",result="ok"} 1
# HELP limits_redis_failures_total Failed calls to Redis by kind: timeout, connection, canceled (by the caller), server (an error reply) or other.
# TYPE limits_redis_failures_total counter
limits_redis_failures_total{kind="canceled",name="fleet"} 0
limits_redis_failures_total{kind="connection",name="fleet"} 1
limits_redis_failures_total{kind="other",name="fleet"} 0
limits_redis_failures_total{kind="server",name="fleet"} 0
limits_redis_failures_total{kind="timeout",name="fleet"} 0
# HELP limits_redis_fallbacks_total Decisions made by the local fallback GCRA because Redis gave none.
# TYPE limits_redis_fallbacks_total counter
limits_redis_fallbacks_total{name="fleet"} 1
`
	if err := testutil.ScrapeAndCompare(url, strings.NewReader(want), "limits_redis_calls_total", "limits_redis_failures_total", "limits_redis_fallbacks_total"); err != nil {
		t.Error(err)
	}
	fams := promtest.Scrape(t, url)
	promtest.CheckConventions(t, fams)
	h := fams["limits_redis_call_duration_seconds"].GetMetric()[0].GetHistogram()
	if h.GetSampleCount() != 5 || h.GetSampleSum() <= 0 || h.GetSampleSum() > 10 {
		t.Errorf("histogram: %d calls in %vs, want 5 calls in (0, 10s]", h.GetSampleCount(), h.GetSampleSum())
	}
	bs := h.GetBucket()
	if len(bs) != redislimit.LatencyBuckets+1 || !math.IsInf(bs[len(bs)-1].GetUpperBound(), 1) || bs[len(bs)-1].GetCumulativeCount() != 5 {
		t.Fatalf("buckets %v, want %d and +Inf holding every call", bs, redislimit.LatencyBuckets)
	}
	var prev uint64
	for i, b := range bs[:redislimit.LatencyBuckets] {
		if want := 25e-6 * float64(uint64(1)<<i); math.Abs(b.GetUpperBound()-want) > want*1e-9 {
			t.Errorf("bucket %d: bound %v, want %v", i, b.GetUpperBound(), want)
		}
		if b.GetCumulativeCount() < prev {
			t.Errorf("bucket %d: %d calls, fewer than the bucket before", i, b.GetCumulativeCount())
		}
		prev = b.GetCumulativeCount()
	}
	promtest.Lint(t, reg)
}

// TestRedisRegister checks that two Redis GCRAs register side by side
// under different names, not twice under one, and that a nil one is
// refused by both exporters.
func TestRedisRegister(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	newGCRA := func() *redislimit.GCRA {
		g, err := redislimit.New(c, 1, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	reg := prometheus.NewPedanticRegistry()
	if err := limitsprom.Register(reg, "a", newGCRA()); err != nil {
		t.Fatal(err)
	}
	if err := limitsprom.Register(reg, "b", newGCRA()); err != nil {
		t.Errorf("a second GCRA under another name: %v", err)
	}
	if err := limitsprom.Register(reg, "a", newGCRA()); err == nil {
		t.Error("a second GCRA under the same name: no error")
	}
	if _, err := reg.Gather(); err != nil {
		t.Error(err)
	}
	if err := limitsprom.Register(reg, "c", (*redislimit.GCRA)(nil)); err == nil {
		t.Error("limitsprom: a nil GCRA: no error")
	}
	meter, _ := newMeter()
	if _, err := limitsotel.Register(meter, "c", (*redislimit.GCRA)(nil)); err == nil {
		t.Error("limitsotel: a nil GCRA: no error")
	}
}

// TestRedisLeases drives a Redis GCRA with leases on a real redis-server
// (two keys, slots given back, slots left in hand) and checks that
// Prometheus and OpenTelemetry both report its LeaseStats, each field as
// its metric, and that a GCRA without leases reports no lease metrics.
func TestRedisLeases(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	g, err := redislimit.New(c, 100, time.Hour, redislimit.WithPrefix("crosscheck:leases:"), redislimit.WithLeases(8, 0))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := redislimit.New(c, 100, time.Hour, redislimit.WithPrefix("crosscheck:plain:"))
	if err != nil {
		t.Fatal(err)
	}
	meter, reader := newMeter()
	promReg := prometheus.NewPedanticRegistry()
	register(t, promReg, meter, "leased", g)
	register(t, promReg, meter, "plain", plain)

	ctx := context.Background()
	allow := func(key string, n int) {
		for range n {
			if d, err := g.Allow(ctx, key); err != nil || !d.Allowed {
				t.Fatalf("%s: %+v, %v", key, d, err)
			}
		}
	}
	allow("a", 30)
	allow("b", 5)
	if _, err := g.ReturnLeases(ctx); err != nil {
		t.Fatal(err)
	}
	allow("a", 2)
	if _, err := plain.Allow(ctx, "a"); err != nil {
		t.Fatal(err)
	}

	// A lease taken ahead may still be on its way: read once the stats
	// stand still on both sides of a collection.
	var ls redislimit.LeaseStats
	var prom, otel map[string]point
	for i := 0; ; i++ {
		before := g.LeaseStats()
		prom, otel = fromProm(t, promReg), fromOTel(t, reader)
		if ls = g.LeaseStats(); ls == before {
			break
		}
		if i == 1000 {
			t.Fatalf("lease stats still moving: %+v, then %+v", before, ls)
		}
		time.Sleep(time.Millisecond)
	}
	if ls.Leases < 2 || ls.Slots < 32 || ls.Returned == 0 || ls.Held == 0 || ls.Local == 0 {
		t.Fatalf("lease stats %+v: the traffic should have leased, returned, held and decided locally", ls)
	}
	for name, want := range map[string]struct {
		v       uint64
		counter bool
	}{
		"leases":               {ls.Leases, true},
		"leases_ahead":         {ls.Ahead, true},
		"lease_ahead_failures": {ls.AheadErrors, true},
		"lease_slots_granted":  {ls.Slots, true},
		"lease_slots_expired":  {ls.Expired, true},
		"lease_slots_returned": {ls.Returned, true},
		"lease_slots_held":     {ls.Held, false},
		"local_decisions":      {ls.Local, true},
	} {
		key := "limits.redis." + name + "{name=leased}"
		for exporter, got := range map[string]map[string]point{"Prometheus": prom, "OpenTelemetry": otel} {
			if p, ok := got[key]; !ok || p != (point{float64(want.v), want.counter}) {
				t.Errorf("%s %s: %+v (found: %v), want %d (counter: %v)", exporter, key, p, ok, want.v, want.counter)
			}
		}
		if p, ok := prom["limits.redis."+name+"{name=plain}"]; ok {
			t.Errorf("the GCRA without leases reports %s: %+v", name, p)
		}
	}
	promtest.Lint(t, promReg)
}

// TestRedisQuota checks that a Redis quota exports its calls as a Redis
// GCRA does, the same numbers through Prometheus and OpenTelemetry.
func TestRedisQuota(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	q, err := redislimit.NewQuota(c, quota.Config{Limit: 3}, redislimit.WithPrefix("crosscheck:quota:"))
	if err != nil {
		t.Fatal(err)
	}
	meter, reader := newMeter()
	promReg := prometheus.NewPedanticRegistry()
	register(t, promReg, meter, "daily", q)
	ctx := context.Background()
	var last limits.Decision
	for range 5 {
		d, err := q.Allow(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			last = d
		}
	}
	if err := q.Refund(ctx, "k", last); err != nil {
		t.Fatal(err)
	}
	prom, otel := fromProm(t, promReg), fromOTel(t, reader)
	s := q.Stats()
	if s.Answered != 5 || s.Refunds != 1 {
		t.Fatalf("Stats %+v, want 5 decisions answered and 1 refund", s)
	}
	for key, want := range map[string]uint64{
		"limits.redis.calls{name=daily,op=decide,result=ok}":     s.Answered,
		"limits.redis.calls{name=daily,op=decide,result=failed}": s.Errors,
		"limits.redis.calls{name=daily,op=refund,result=ok}":     s.Refunds,
		"limits.redis.fallbacks{name=daily}":                     0,
	} {
		if p, ok := prom[key]; !ok || p != (point{float64(want), true}) {
			t.Errorf("Prometheus %s: %+v (found: %v), want %d", key, p, ok, want)
		}
	}
	if len(prom) != 4+5+1 {
		t.Errorf("%d Prometheus series, want 10: calls, 5 kinds of failure, fallbacks", len(prom))
	}
	for k, p := range prom {
		if o, ok := otel[k]; !ok || o != p {
			t.Errorf("%s: Prometheus %+v, OpenTelemetry %+v (found: %v)", k, p, o, ok)
		}
	}
	fams := promtest.Scrape(t, serve(t, promReg))
	if h := fams["limits_redis_call_duration_seconds"].GetMetric()[0].GetHistogram(); h.GetSampleCount() != 6 {
		t.Errorf("call duration histogram: %d calls, want 6", h.GetSampleCount())
	}
	promtest.Lint(t, promReg)
}

// serve serves reg's metrics over loopback until the test ends, and
// returns the URL.
func serve(t *testing.T, reg *prometheus.Registry) string {
	ts := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	t.Cleanup(ts.Close)
	return ts.URL
}
