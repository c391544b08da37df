package httplimit

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/limitsgo/limits"
)

// benchRequests returns requests from 1,024 client addresses, to be served
// in turn.
func benchRequests() []*http.Request {
	rs := make([]*http.Request, 1024)
	for i := range rs {
		rs[i] = httptest.NewRequest(http.MethodGet, "/api/items", nil)
		rs[i].RemoteAddr = fmt.Sprintf("198.51.%d.%d:4711", i/256, i%256)
		rs[i].Header.Set("X-Api-Key", fmt.Sprintf("key-%d", i%64))
	}
	return rs
}

// discard is a ResponseWriter that keeps nothing, so that the benchmarks
// measure the middleware and not the recording of responses.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// benchConfigs are the middleware set-ups measured, each against the bare
// handler. Limits are high enough that nothing is refused.
var benchConfigs = []struct {
	name string
	cfg  Config
}{
	{"Rate", Config{Rate: limits.Limit{Events: 1_000_000_000, Period: time.Second}}},
	{"Gate+Rate", Config{MaxInFlight: 1024, Rate: limits.Limit{Events: 1_000_000_000, Period: time.Second}}},
	{"All", Config{
		Exempt:               ExemptPaths("/healthz"),
		MaxInFlight:          1024,
		Rate:                 limits.Limit{Events: 1_000_000_000, Period: time.Second},
		CallerKey:            HeaderKey("X-Api-Key"),
		MaxInFlightPerClient: 1024,
	}},
}

// BenchmarkMiddleware measures the middleware's cost per request against
// the bare handler, serially and from 8 goroutines.
func BenchmarkMiddleware(b *testing.B) {
	reqs := benchRequests()
	run := func(b *testing.B, h http.Handler) {
		b.ReportAllocs()
		w := &discard{h: make(http.Header)}
		i := 0
		for b.Loop() {
			clear(w.h)
			h.ServeHTTP(w, reqs[i%len(reqs)])
			i++
		}
	}
	runParallel := func(b *testing.B, h http.Handler) {
		b.ReportAllocs()
		b.SetParallelism(max(1, 8/runtimeProcs()))
		b.RunParallel(func(pb *testing.PB) {
			w := &discard{h: make(http.Header)}
			i := 0
			for pb.Next() {
				clear(w.h)
				h.ServeHTTP(w, reqs[i%len(reqs)])
				i++
			}
		})
	}
	b.Run("Bare", func(b *testing.B) { run(b, ok) })
	b.Run("Bare/parallel", func(b *testing.B) { runParallel(b, ok) })
	for _, c := range benchConfigs {
		m := mustNew(b, c.cfg)
		b.Run(c.name, func(b *testing.B) { run(b, m.Handler(ok)) })
		b.Run(c.name+"/parallel", func(b *testing.B) { runParallel(b, m.Handler(ok)) })
	}
}

// allocsPerRequest are the allocations per request of each configuration,
// the handler's own one included: without a gate, the client's key and
// the rate limit header values (one string and one slice for all); with
// a gate, the request's state alone, which then holds the request's copy
// carrying it, the handler's writer, the key's bytes and the header
// values, and their text if it fits (that of one policy's); with a
// caller key, that key's bucket name and the text of two policies'
// header values.
var allocsPerRequest = map[string]float64{"Rate": 4, "Gate+Rate": 2, "All": 4}

func TestMiddlewareAllocs(t *testing.T) {
	reqs := benchRequests()
	for _, c := range benchConfigs {
		h := mustNew(t, c.cfg).Handler(ok)
		w := &discard{h: make(http.Header)}
		for _, r := range reqs { // every client known: the steady state
			h.ServeHTTP(w, r)
		}
		i := 0
		got := testing.AllocsPerRun(500, func() {
			clear(w.h)
			h.ServeHTTP(w, reqs[i%len(reqs)])
			i++
		})
		if want := allocsPerRequest[c.name]; got > want {
			t.Errorf("%s: %v allocations per request, more than the %v documented", c.name, got, want)
		}
		t.Logf("%s: %v allocations per request", c.name, got)
	}
}
