package adaptive_test

import (
	"context"
	"testing"
	"time"

	"github.com/limitsgo/limits/adaptive"
)

// BenchmarkObserve measures a request's round through an adaptive gate,
// TryEnter (or the Controller's Enter), Observe and Release, against the
// gate alone, serially and from parallel goroutines.
func BenchmarkObserve(b *testing.B) {
	g := mustGate(b, 1<<20)
	c := mustNew(b, g, adaptive.Config{Max: 1 << 20, Initial: 1 << 20, Window: time.Millisecond, ProbeEvery: -1})
	gate := func() {
		p, _ := g.TryEnter()
		p.Release()
	}
	observed := func() {
		p, _ := g.TryEnter()
		c.Observe(time.Microsecond, adaptive.Success)
		p.Release()
	}
	entered := func() {
		p, _ := c.Enter(context.Background())
		c.Observe(time.Microsecond, adaptive.Success)
		p.Release()
	}
	for _, bm := range []struct {
		name string
		op   func()
	}{{"Gate", gate}, {"GateObserve", observed}, {"EnterObserve", entered}} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bm.op()
			}
		})
		b.Run(bm.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					bm.op()
				}
			})
		})
	}
}
