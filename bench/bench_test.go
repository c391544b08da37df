package bench

import (
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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

// BenchmarkChurn1M runs every limiter whose keys expire (Structure.Churn)
// over the 1,000,000 keys, serially and from 8 goroutines, configured so
// that each key's state has expired by the time the benchmark comes back
// to it, as the keys of a short-period limit do; the mutex map, which
// keeps its entries, is the baseline.
func BenchmarkChurn1M(b *testing.B) {
	keys := keys1M()
	for _, s := range Structures() {
		newInstance := s.Churn
		if s.Name == "MutexMap" {
			newInstance = s.New
		}
		if newInstance == nil {
			continue
		}
		b.Run(s.Name, func(b *testing.B) {
			in := newInstance()
			for _, k := range keys {
				in.Fill(strings.Clone(k))
			}
			b.Run("serial", func(b *testing.B) { runSerial(b, keys, in.Op) })
			b.Run("parallel", func(b *testing.B) { runParallel(b, keys, in.Op) })
			in.Close()
		})
		runtime.GC()
	}
}

// BenchmarkLatency1M measures the time of each call, serially, over the
// 1,000,000 keys of a filled structure, and reports the median, 99th and
// 99.9th percentiles and the maximum (p50-ns, p99-ns, p99.9-ns, max-ns),
// clock reads included: a mean hides the calls that stall. It runs the
// baseline, the GCRA and every peer, with their live configuration and, as
// "/churn", their churning one.
func BenchmarkLatency1M(b *testing.B) {
	keys := keys1M()
	for _, s := range Structures() {
		if s.Kind == Ours && s.Name != "GCRA" || s.Refuses || s.Name == "MutexMapClock" || s.Name == "ShardedMap" || s.Name == "SyncMap" {
			continue
		}
		for _, c := range []struct {
			suffix string
			new    func() Instance
		}{{"", s.New}, {"/churn", s.Churn}} {
			if c.new == nil {
				continue
			}
			b.Run(s.Name+c.suffix, func(b *testing.B) {
				in := c.new()
				defer in.Close()
				for _, k := range keys {
					in.Fill(strings.Clone(k))
				}
				lat := make([]time.Duration, 0, 1<<20)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					start := time.Now()
					in.Op(keys[i])
					if len(lat) < cap(lat) {
						lat = append(lat, time.Since(start))
					}
					if i++; i == len(keys) {
						i = 0
					}
				}
				reportLatency(b, lat)
			})
			runtime.GC()
		}
	}
}

// reportLatency reports the median, 99th and 99.9th percentiles and the
// maximum of lat, in nanoseconds.
func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	at := func(q float64) float64 { return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))]) }
	b.ReportMetric(at(0.5), "p50-ns")
	b.ReportMetric(at(0.99), "p99-ns")
	b.ReportMetric(at(0.999), "p99.9-ns")
	b.ReportMetric(float64(lat[len(lat)-1]), "max-ns")
}
