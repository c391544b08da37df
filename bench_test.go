package limits

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// benchKeys returns 1,000,000 distinct keys like "client-000123" in a fixed
// pseudo-random order. They are built once, so the benchmark loops allocate
// nothing, and their bytes lie in one block in the order the loops read them,
// so that what is measured is the structure under test, not cache misses on
// the keys themselves.
var benchKeys = sync.OnceValue(func() []string {
	const n = 1_000_000
	order := rand.New(rand.NewPCG(42, 42)).Perm(n)
	var buf []byte
	for _, i := range order {
		buf = fmt.Appendf(buf, "client-%06d", i)
	}
	all := string(buf)
	keys := make([]string, n)
	for i := range keys {
		keys[i], all = all[:13], all[13:]
	}
	return keys
})

// hotKeys returns the first 1,024 keys: few enough to stay in cache, as in the
// reference measurements of pingora-limits.
func hotKeys() []string { return benchKeys()[:1024] }

// mutexMap is the baseline: an exact count per key under one mutex.
type mutexMap struct {
	mu sync.Mutex
	m  map[string]int64
}

// newMutexMap returns a mutexMap holding every key. It stores copies, as a
// server's map holds the strings of the requests that first used its keys,
// not the memory of the request at hand.
func newMutexMap(keys []string) *mutexMap {
	m := &mutexMap{m: make(map[string]int64, len(keys))}
	for _, k := range keys {
		m.m[strings.Clone(k)] = 0
	}
	return m
}

func (m *mutexMap) incr(k string) {
	m.mu.Lock()
	m.m[k]++
	m.mu.Unlock()
}

// benchGoroutines is how many goroutines the parallel benchmarks run.
const benchGoroutines = 8

// runSerial calls op on each key in turn, one goroutine.
func runSerial(b *testing.B, keys []string, op func(string)) {
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		op(keys[i])
		if i++; i == len(keys) {
			i = 0
		}
	}
}

// runParallel calls op from benchGoroutines goroutines, each walking the keys
// from its own offset.
func runParallel(b *testing.B, keys []string, op func(string)) {
	b.ReportAllocs()
	b.SetParallelism(max(1, benchGoroutines/runtime.GOMAXPROCS(0)))
	var next atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * len(keys) / benchGoroutines % len(keys)
		for pb.Next() {
			op(keys[i])
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
}

// benchOps are the operations compared, each with the baseline.
func benchOps(keys []string) []struct {
	name string
	op   func(string)
} {
	m := newMutexMap(keys)
	e := NewEstimator(4, 1024)
	c := NewEstimator(4, 1024, Sizing{Conservative: true})
	r := NewRate(time.Second)
	cr := NewRate(time.Second, Sizing{Hashes: 4, Slots: 1024, Conservative: true})
	// The default before windows counted exactly first, in the same memory,
	// and pingora's default.
	former := NewRate(time.Second, Sizing{Hashes: 4, Slots: 4096, Conservative: true})
	pr := NewRate(time.Second, Sizing{Hashes: 4, Slots: 1024})
	in := NewInflight()
	// A limit no key reaches in a benchmark, so that every call charges,
	// with each call adding a minute to its key's state, so that the table
	// stays full of live keys (as in bench/); and one whose keys expire a
	// millisecond after each request, so that every call finds its key's
	// state expired: keys that churn.
	g := NewGCRA(1_000_000, 1_000_000*time.Minute)
	churn := NewGCRA(1, time.Millisecond)
	return []struct {
		name string
		op   func(string)
	}{
		{"MutexMap", m.incr},
		{"Estimator.Incr", func(k string) { e.Incr(k, 1) }},
		{"ConservativeEstimator.Incr", func(k string) { c.Incr(k, 1) }},
		{"Rate.Observe", func(k string) { r.Observe(k, 1) }},
		{"ConservativeRate.Observe", func(k string) { cr.Observe(k, 1) }},
		{"SketchRate4x4096.Observe", func(k string) { former.Observe(k, 1) }},
		{"PlainRate4x1024.Observe", func(k string) { pr.Observe(k, 1) }},
		{"Inflight.IncrClose", func(k string) {
			g, _ := in.Incr(k, 1)
			g.Close()
		}},
		{"GCRA.Allow", func(k string) { g.Allow(k) }},
		{"GCRA.Allow/churn", func(k string) { churn.Allow(k) }},
	}
}

// BenchmarkKeys1M runs each operation over 1,000,000 distinct keys against
// the mutex map baseline, serially and from 8 goroutines.
func BenchmarkKeys1M(b *testing.B) {
	keys := benchKeys()
	for _, o := range benchOps(keys) {
		b.Run(o.name, func(b *testing.B) { runSerial(b, keys, o.op) })
		b.Run(o.name+"/parallel", func(b *testing.B) { runParallel(b, keys, o.op) })
	}
}

// BenchmarkHot1024 runs each operation over 1,024 keys, the workload of the
// pingora-limits reference figures.
func BenchmarkHot1024(b *testing.B) {
	keys := hotKeys()
	for _, o := range benchOps(keys) {
		b.Run(o.name, func(b *testing.B) { runSerial(b, keys, o.op) })
		b.Run(o.name+"/parallel", func(b *testing.B) { runParallel(b, keys, o.op) })
	}
}

// BenchmarkGate measures a Gate's TryEnter and Release, serially and from 8
// goroutines, against a sync.Mutex around an int, the least a shared
// counter of callers inside can cost; and TryEnterPriority and Release of
// a sheddable caller at a gate with places reserved.
func BenchmarkGate(b *testing.B) {
	keys := hotKeys()
	g, _ := NewGate(1 << 20)
	var mu sync.Mutex
	inside := 0
	mutexCounter := func(string) {
		mu.Lock()
		inside++
		mu.Unlock()
		mu.Lock()
		inside--
		mu.Unlock()
	}
	gate := func(string) {
		p, _ := g.TryEnter()
		p.Release()
	}
	r, _ := NewGate(1<<20, WithReserve(PriorityCritical, 1<<10))
	reserved := func(string) {
		p, _ := r.TryEnterPriority(PrioritySheddable)
		p.Release()
	}
	b.Run("MutexCounter", func(b *testing.B) { runSerial(b, keys, mutexCounter) })
	b.Run("MutexCounter/parallel", func(b *testing.B) { runParallel(b, keys, mutexCounter) })
	b.Run("Gate.TryEnterRelease", func(b *testing.B) { runSerial(b, keys, gate) })
	b.Run("Gate.TryEnterRelease/parallel", func(b *testing.B) { runParallel(b, keys, gate) })
	b.Run("Gate.TryEnterPriorityRelease", func(b *testing.B) { runSerial(b, keys, reserved) })
	b.Run("Gate.TryEnterPriorityRelease/parallel", func(b *testing.B) { runParallel(b, keys, reserved) })
}

// BenchmarkMemory reports the bytes each structure holds: the heap of the
// mutex map filled with 1,000,000 keys, its copies of the keys included, and
// the fixed counters of the sketches.
func BenchmarkMemory(b *testing.B) {
	keys := benchKeys()
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	b.Run("MutexMap", func(b *testing.B) {
		var held uint64
		for b.Loop() {
			before := heap()
			m := newMutexMap(keys)
			held = heap() - before
			runtime.KeepAlive(m)
		}
		b.ReportMetric(float64(held), "bytes-held")
	})
	for _, s := range []struct {
		name string
		size func() int
	}{
		{"Estimator", func() int { return NewEstimator(4, 1024).Size() }},
		{"Rate", func() int { return NewRate(time.Second).Size() }},
		{"Inflight", func() int { return NewInflight().Size() }},
	} {
		b.Run(s.name, func(b *testing.B) {
			var held int
			for b.Loop() {
				held = s.size()
			}
			b.ReportMetric(float64(held), "bytes-held")
		})
	}
}

// BenchmarkGCRAExpireAtOnce fills a GCRA's table to its cap with 1,000,000
// keys that all expire at the same instant, then sends new keys, each of
// which needs the place of an expired one, and reports the distribution of
// the time one Allow takes: its median, 99th and 99.9th percentiles and
// maximum, clock reads included. No call may pay for sweeping the table.
func BenchmarkGCRAExpireAtOnce(b *testing.B) {
	keys := benchKeys()
	fresh := make([]string, len(keys))
	for i, k := range keys {
		fresh[i] = "new-" + k
	}
	const d = 100 * time.Millisecond
	g := NewGCRA(1, d, WithMaxKeys(len(keys)))
	at := time.Now()
	for _, k := range keys {
		g.AllowNAt(at, k, 1)
	}
	time.Sleep(time.Until(at.Add(d)))
	lat := make([]time.Duration, 0, 1<<20)
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		g.Allow(fresh[i])
		if len(lat) < cap(lat) {
			lat = append(lat, time.Since(start))
		}
		if i++; i == len(fresh) {
			i = 0
		}
	}
	reportLatency(b, lat)
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

// BenchmarkGCRAAtCap runs GCRA.Allow over 1,000,000 keys in a table capped
// at exactly that many, filled first, serially and from 8 goroutines:
// every call charges again a key in use in a full table, the one in its
// shard that expires soonest, whose shards keep their soonest expiries
// exactly.
func BenchmarkGCRAAtCap(b *testing.B) {
	keys := benchKeys()
	g := NewGCRA(1_000_000, 1_000_000*time.Minute, WithMaxKeys(len(keys)))
	for _, k := range keys {
		g.Allow(k)
	}
	op := func(k string) { g.Allow(k) }
	b.Run("serial", func(b *testing.B) { runSerial(b, keys, op) })
	b.Run("parallel", func(b *testing.B) { runParallel(b, keys, op) })
}

// BenchmarkRateRounds compares the default Rate with the former default
// (count-min windows of a conservative 4 x 4096 sketch), pingora's plain
// 4 x 1024 and the mutex map, over 1,024 and 1,000,000 keys, in rounds
// that time each of them in turn, serially and from 8 goroutines, for
// rateRoundCalls calls each: load that comes and goes on a shared machine
// then falls on all four alike, where the benchmarks above time one after
// the other. Each round is one iteration (run it with -benchtime 15x, say),
// and each metric is the median over the rounds of the nanoseconds per
// call.
func BenchmarkRateRounds(b *testing.B) {
	for _, n := range []int{1024, 1_000_000} {
		keys := benchKeys()[:n]
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			m := newMutexMap(keys)
			r := NewRate(time.Second)
			former := NewRate(time.Second, Sizing{Hashes: 4, Slots: 4096, Conservative: true})
			plain := NewRate(time.Second, Sizing{Hashes: 4, Slots: 1024})
			ops := []struct {
				name string
				op   func(string)
			}{
				{"default", func(k string) { r.Observe(k, 1) }},
				{"former", func(k string) { former.Observe(k, 1) }},
				{"plain4x1024", func(k string) { plain.Observe(k, 1) }},
				{"mutexmap", m.incr},
			}
			gs := []int{1, benchGoroutines}
			times := make([][][]float64, len(ops))
			for i := range times {
				times[i] = make([][]float64, len(gs))
			}
			for b.Loop() {
				for i, o := range ops {
					for j, g := range gs {
						times[i][j] = append(times[i][j], timeCalls(keys, g, o.op))
					}
				}
			}
			for i, o := range ops {
				for j, g := range gs {
					t := slices.Clone(times[i][j])
					slices.Sort(t)
					b.ReportMetric(t[len(t)/2], fmt.Sprintf("%s-g%d-ns/call", o.name, g))
				}
			}
		})
	}
}

// rateRoundCalls is how many calls one operation makes in a round of
// BenchmarkRateRounds.
const rateRoundCalls = 500_000

// timeCalls returns the wall time per call of rateRoundCalls calls of op
// over keys, from g goroutines, each walking the keys from its own offset.
func timeCalls(keys []string, g int, op func(string)) float64 {
	start := time.Now()
	var wg sync.WaitGroup
	for w := range g {
		wg.Go(func() {
			i := w * len(keys) / g
			for range rateRoundCalls / g {
				op(keys[i])
				if i++; i == len(keys) {
					i = 0
				}
			}
		})
	}
	wg.Wait()
	return float64(time.Since(start).Nanoseconds()) / rateRoundCalls
}
