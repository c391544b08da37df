package bench

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// keys1M are the keys of every benchmark, built once.
var keys1M = sync.OnceValue(func() []string { return Keys(NumKeys) })

// BenchmarkKeys1M compares every structure on 1,000,000 distinct keys in a
// fixed random order: each structure is filled with all the keys first,
// then measured serially and from exactly 8 goroutines. Run it with
// -cpu 1,2 (or any -cpu that divides 8).
func BenchmarkKeys1M(b *testing.B) {
	keys := keys1M()
	for _, s := range Structures() {
		b.Run(s.Name, func(b *testing.B) {
			in := s.New()
			for _, k := range keys {
				in.Fill(strings.Clone(k))
			}
			b.Run("serial", func(b *testing.B) { runSerial(b, keys, in.Op) })
			b.Run("parallel", func(b *testing.B) { runParallel(b, keys, in.Op) })
			in.Close()
		})
		runtime.GC() // let the next structure start from a clean heap
	}
}

// goroutines is how many goroutines the parallel benchmarks run.
const goroutines = 8

// runSerial calls op on each key in turn, from one goroutine.
func runSerial(b *testing.B, keys []string, op func(string) bool) {
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		op(keys[i])
		if i++; i == len(keys) {
			i = 0
		}
	}
}

// runParallel calls op from goroutines goroutines (see setGoroutines), each
// walking the keys from its own offset.
func runParallel(b *testing.B, keys []string, op func(string) bool) {
	b.ReportAllocs()
	setGoroutines(b)
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)-1) * len(keys) / goroutines % len(keys)
		for pb.Next() {
			op(keys[i])
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
}

// setGoroutines sets b's parallelism so that b.RunParallel runs goroutines
// goroutines. The count is exact when GOMAXPROCS divides it; otherwise b
// reports the count it runs as a "goroutines" metric.
func setGoroutines(b *testing.B) {
	procs := runtime.GOMAXPROCS(0)
	perProc := (goroutines + procs - 1) / procs
	b.SetParallelism(perProc)
	if n := perProc * procs; n != goroutines {
		b.ReportMetric(float64(n), "goroutines")
	}
}
