package grpclimit

import (
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
)

// benchConfigs are the configurations the benchmarks and the allocation
// test run: the rate layer alone, and every layer of a unary call.
var benchConfigs = []struct {
	name string
	cfg  Config
}{
	{"rate", Config{Limits: admit.Config{Rate: limits.Limit{Events: 1 << 30, Period: time.Second}}}},
	{"all", Config{Limits: admit.Config{MaxInFlight: 1 << 20, Rate: limits.Limit{Events: 1 << 30, Period: time.Second}, MaxInFlightPerClient: 1 << 20}}},
}

// BenchmarkUnary measures the unary interceptor alone, around a handler
// that does nothing, for 1,024 clients.
func BenchmarkUnary(b *testing.B) {
	ctxs := peers(1024)
	for _, bc := range benchConfigs {
		it := mustNew(b, bc.cfg)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				it.Unary(ctxs[i&1023], nil, benchInfo, noop)
				i++
			}
		})
		b.Run(bc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					it.Unary(ctxs[i&1023], nil, benchInfo, noop)
					i++
				}
			})
		})
	}
}

// TestUnaryAllocs bounds the allocations of an allowed unary call: at
// most the client's key, and, when the call holds a place, the context
// that holds it.
func TestUnaryAllocs(t *testing.T) {
	ctx := peers(1)[0]
	for _, bc := range benchConfigs {
		it := mustNew(t, bc.cfg)
		got := testing.AllocsPerRun(100, func() {
			if _, err := it.Unary(ctx, nil, benchInfo, noop); err != nil {
				t.Fatal(err)
			}
		})
		want := 1.0
		if bc.cfg.Limits.MaxInFlight > 0 {
			want++
		}
		if got > want {
			t.Errorf("%s: %v allocations per call, want at most %v", bc.name, got, want)
		}
	}
}
