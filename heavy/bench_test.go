package heavy

import (
	"fmt"
	"testing"
)

// BenchmarkOffer measures Offer for keys below the threshold, nearly every
// key in practice, and for keys already in the table, serially and from 8
// goroutines.
func BenchmarkOffer(b *testing.B) {
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("client-%06d", i)
	}
	hh := New(100, len(keys))
	for _, k := range keys {
		hh.Offer(k, 100, 1)
	}
	for _, o := range []struct {
		name string
		op   func(string)
	}{
		{"Below", func(k string) { hh.Offer(k, 99, 1) }},
		{"Listed", func(k string) { hh.Offer(k, 101, 1) }},
	} {
		b.Run(o.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				o.op(keys[i%len(keys)])
				i++
			}
		})
		b.Run(o.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					o.op(keys[i%len(keys)])
					i++
				}
			})
		})
	}
}
