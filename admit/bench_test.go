package admit_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/admit"
)

// benchConfig is a configuration of every layer: a gate, an address and a
// caller key bucket with tiers, a route policy, per-client concurrency.
func benchConfig(events int) admit.Config {
	lim := limits.Limit{Events: events, Period: time.Second}
	return admit.Config{
		MaxInFlight: 1 << 20, Rate: lim, CallerKey: "key", Tier: "plan",
		Tiers:                map[string]admit.Policy{"pro": {Rate: limits.Limit{Events: 2 * events, Period: time.Second}}},
		MaxInFlightPerClient: 1 << 20,
		Policies:             []admit.Policy{{Name: "api", Routes: []string{"/api/"}, Rate: lim}},
	}
}

// requests are the requests of 1,024 clients, each with a key.
func requests() []admit.Request {
	rs := make([]admit.Request, 1024)
	for i := range rs {
		rs[i] = admit.Request{Peer: fmt.Sprintf("10.1.%d.%d:4711", i/256, i%256), Key: fmt.Sprint("key", i), Route: "/api/items", Tier: "pro"}
	}
	return rs
}

// BenchmarkAdmit admits and finishes requests through every layer.
func BenchmarkAdmit(b *testing.B) {
	e, err := admit.New(benchConfig(1 << 30))
	if err != nil {
		b.Fatal(err)
	}
	rs := requests()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		var t admit.Ticket
		i := 0
		for b.Loop() {
			if err := e.Admit(ctx, &rs[i%len(rs)], &t); err != nil {
				b.Fatal(err)
			}
			t.Done(adaptive.Success)
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		var next atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			var t admit.Ticket
			i := int(next.Add(1)) * 97
			for pb.Next() {
				if err := e.Admit(ctx, &rs[i%len(rs)], &t); err != nil {
					b.Error(err)
					return
				}
				t.Done(adaptive.Success)
				i++
			}
		})
	})
}

// BenchmarkUpdateUnderLoad measures what live updates cost the requests
// flowing meanwhile: two goroutines admit requests through every layer
// for three phases of b.N requests each, before, during and after
// updates that change every limit every millisecond (each key keeping
// its state), and it reports the rate of each phase in requests a second,
// and the updates made.
func BenchmarkUpdateUnderLoad(b *testing.B) {
	e, err := admit.New(benchConfig(1 << 30))
	if err != nil {
		b.Fatal(err)
	}
	rs := requests()
	phase := func() time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Go(func() {
				var t admit.Ticket
				for i := range b.N / 2 {
					if err := e.Admit(ctx, &rs[(i+w*512)%len(rs)], &t); err != nil {
						b.Error(err)
						return
					}
					t.Done(adaptive.Success)
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	b.ReportAllocs()
	before := phase()
	stop := make(chan struct{})
	var updates atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if err := e.Update(benchConfig(1<<30 - i%2)); err != nil {
				b.Error(err)
				return
			}
			updates.Add(1)
		}
	}()
	during := phase()
	close(stop)
	<-done
	after := phase()
	rate := func(d time.Duration) float64 { return float64(b.N/2*2) / d.Seconds() }
	b.ReportMetric(rate(before), "req/s-before")
	b.ReportMetric(rate(during), "req/s-during")
	b.ReportMetric(rate(after), "req/s-after")
	b.ReportMetric(float64(updates.Load()), "updates")
}
