package httplimit

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
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

// fast is a rate no benchmark or allocation test reaches.
var fast = limits.Limit{Events: 1_000_000_000, Period: time.Second}

// benchConfigs are the middleware set-ups measured, each against the bare
// handler. Limits are high enough that nothing is refused.
var benchConfigs = []struct {
	name string
	cfg  Config
}{
	{"Rate", Config{Limits: admit.Config{Rate: fast}}},
	{"Gate+Rate", Config{Limits: admit.Config{MaxInFlight: 1024, Rate: fast}}},
	{"All", Config{Limits: admit.Config{
		Exempt:               []string{"/healthz"},
		MaxInFlight:          1024,
		Rate:                 fast,
		CallerKey:            "X-Api-Key",
		MaxInFlightPerClient: 1024,
	}}},
	{"Routes", Config{Limits: admit.Config{
		Exempt:      []string{"/healthz", "/static/"},
		MaxInFlight: 1024,
		Rate:        fast,
		Policies: []admit.Policy{
			{Name: "login", Routes: []string{"POST /login"}, Rate: fast},
			{Name: "api", Routes: []string{"/api/"}, Rate: fast},
		},
	}}},
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
		b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
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

// allocsOf returns the allocations per request of h in the steady state,
// every client known, from prebuilt requests and a reused writer.
func allocsOf(h http.Handler, reqs []*http.Request) float64 {
	w := &discard{h: make(http.Header)}
	for _, r := range reqs {
		h.ServeHTTP(w, r)
	}
	i := 0
	return testing.AllocsPerRun(500, func() {
		clear(w.h)
		h.ServeHTTP(w, reqs[i%len(reqs)])
		i++
	})
}

// allocsPerRequest are the allocations per request each configuration
// adds to those of the bare handler: the request's state, which holds
// its admission, the handler's writer and the text of one policy's rate
// limit fields; with a caller key, that key's bucket name; with two
// policies' fields, their text.
var allocsPerRequest = map[string]float64{"Rate": 1, "Gate+Rate": 1, "All": 3, "Routes": 2}

func TestMiddlewareAllocs(t *testing.T) {
	reqs := benchRequests()
	bare := allocsOf(ok, reqs)
	for _, c := range benchConfigs {
		m := mustNew(t, c.cfg)
		got := allocsOf(m.Handler(ok), reqs)
		if want := bare + allocsPerRequest[c.name]; got > want {
			t.Errorf("%s: %v allocations per request, more than the %v documented", c.name, got, want)
		}
		if refused(m) {
			t.Errorf("%s: requests refused: %v", c.name, m.Stats().Requests)
		}
		t.Logf("%s: %v allocations per request, the bare handler %v", c.name, got, bare)
	}
}

// TestGateAllocs checks that a gate costs no allocation: a request
// through a Middleware with a gate and a rate allocates no more than one
// through a Middleware with the rate alone, which allocates one more than
// the bare handler, the request's state.
func TestGateAllocs(t *testing.T) {
	rate := limits.Limit{Events: 1_000_000, Period: time.Minute}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	reqs := []*http.Request{r}
	bare := allocsOf(ok, reqs)
	rateOnly := mustNew(t, Config{Limits: admit.Config{Rate: rate}})
	gated := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 1024, Rate: rate}})
	withRate, withGate := allocsOf(rateOnly.Handler(ok), reqs), allocsOf(gated.Handler(ok), reqs)
	if withGate > withRate || withRate > bare+1 {
		t.Errorf("allocations per request: %v with a gate and a rate, %v with the rate alone, %v bare; want at most %v, %v",
			withGate, withRate, bare, withRate, bare+1)
	}
	for _, m := range []*Middleware{rateOnly, gated} {
		if refused(m) {
			t.Errorf("requests refused: %v", m.Stats().Requests)
		}
	}
}

// refused reports whether m refused a request, or admitted none.
func refused(m *Middleware) bool {
	s := m.Stats()
	for reason, n := range s.Requests {
		if n > 0 && limits.Reason(reason) != admit.Allowed {
			return true
		}
	}
	return s.Requests[admit.Allowed] == 0
}
