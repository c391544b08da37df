package bench

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// clientRequests returns one GET request for /api/items from each of n
// client addresses, 10.1.0.0 to 10.1.3.255 for NumClients, port 4711, as
// net/http sets RemoteAddr for a client connected directly.
func clientRequests(n int) []*http.Request {
	rs := make([]*http.Request, n)
	for i := range rs {
		rs[i] = httptest.NewRequest(http.MethodGet, "/api/items", nil)
		rs[i].RemoteAddr = fmt.Sprintf("10.1.%d.%d:4711", i/256%256, i%256)
	}
	return rs
}

// okBody is what okHandler writes.
var okBody = []byte("ok")

// okHandler is the handler every middleware wraps: it writes "ok" and
// allocates nothing, so that the allocations counted are the
// middleware's.
var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(okBody) })

// discard is a ResponseWriter that keeps the header map and the status,
// and nothing written. One serves request after request, reset in between.
type discard struct {
	h      http.Header
	status int
}

func newDiscard() *discard { return &discard{h: make(http.Header), status: http.StatusOK} }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(status int)      { d.status = status }

// reset forgets the last response, keeping the header map's room.
func (d *discard) reset() {
	clear(d.h)
	d.status = http.StatusOK
}

// newHTTP returns the middleware m with the benchmarks' limit around
// okHandler, after one request from each client has been served, so that
// every client's state exists before any timing, as in a server that has
// seen its clients before.
func newHTTP(tb testing.TB, m Middleware, reqs []*http.Request) http.Handler {
	tb.Helper()
	mw, err := m.New(HTTPEvents, HTTPPeriod)
	if err != nil {
		tb.Fatal(err)
	}
	h := mw(okHandler)
	w := newDiscard()
	for _, r := range reqs {
		w.reset()
		h.ServeHTTP(w, r)
		if w.status != http.StatusOK {
			tb.Fatalf("%s refused a request from %s while warming up: status %d", m.Name, r.RemoteAddr, w.status)
		}
	}
	return h
}

// BenchmarkHTTP measures each middleware of Middlewares around the same
// handler, per request, driven in-process: requests from 1,024 client
// addresses in turn, prebuilt, and a ResponseWriter that discards, reused.
// Each is measured serially and from exactly 8 goroutines (with -cpu
// values that divide 8). A run fails if any request is refused.
func BenchmarkHTTP(b *testing.B) {
	reqs := clientRequests(NumClients)
	for _, m := range Middlewares() {
		b.Run(m.Name, func(b *testing.B) {
			h := newHTTP(b, m, reqs)
			b.Run("serial", func(b *testing.B) { serveSerial(b, h, reqs) })
			b.Run("parallel", func(b *testing.B) { serveParallel(b, h, reqs) })
		})
	}
}

// serveSerial serves the requests in turn from one goroutine.
func serveSerial(b *testing.B, h http.Handler, reqs []*http.Request) {
	b.ReportAllocs()
	w := newDiscard()
	refused, i := 0, 0
	for b.Loop() {
		w.reset()
		h.ServeHTTP(w, reqs[i])
		if w.status != http.StatusOK {
			refused++
		}
		if i++; i == len(reqs) {
			i = 0
		}
	}
	if refused > 0 {
		b.Fatalf("%d requests refused", refused)
	}
}

// serveParallel serves the requests from goroutines goroutines, each with
// its own ResponseWriter, walking the requests from its own offset.
func serveParallel(b *testing.B, h http.Handler, reqs []*http.Request) {
	b.ReportAllocs()
	setGoroutines(b)
	var next, refused atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		w := newDiscard()
		i := int(next.Add(1)-1) * len(reqs) / goroutines % len(reqs)
		n := int64(0)
		for pb.Next() {
			w.reset()
			h.ServeHTTP(w, reqs[i])
			if w.status != http.StatusOK {
				n++
			}
			if i++; i == len(reqs) {
				i = 0
			}
		}
		refused.Add(n)
	})
	if n := refused.Load(); n > 0 {
		b.Fatalf("%d requests refused", n)
	}
}

// TestMiddlewares checks each middleware's description, and that it keys
// clients by address: with a limit of one request an hour, each address
// gets one request and is refused the next, while the others still get
// theirs. The bare handler refuses nothing.
func TestMiddlewares(t *testing.T) {
	reqs := clientRequests(64)
	for i, m := range Middlewares() {
		t.Run(m.Name, func(t *testing.T) {
			if m.Label == "" || m.Config == "" {
				t.Errorf("missing label or configuration")
			}
			if (i == 0) != (m.Kind == Baseline) {
				t.Errorf("kind %v; the bare handler, and only it, should come first, as the baseline", m.Kind)
			}
			mw, err := m.New(1, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			h := mw(okHandler)
			w := newDiscard()
			for round, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
				if m.Kind == Baseline {
					want = http.StatusOK
				}
				for _, r := range reqs {
					w.reset()
					h.ServeHTTP(w, r)
					if w.status != want {
						t.Fatalf("round %d, client %s: status %d, want %d", round, r.RemoteAddr, w.status, want)
					}
				}
			}
		})
	}
}

// TestHTTPNoRefusals checks that at the benchmarks' limit no middleware
// refuses a request in 20 rounds over the clients. (The benchmarks
// themselves fail if any request is refused.)
func TestHTTPNoRefusals(t *testing.T) {
	reqs := clientRequests(NumClients)
	for _, m := range Middlewares() {
		h := newHTTP(t, m, reqs)
		w := newDiscard()
		for round := range 20 {
			for _, r := range reqs {
				w.reset()
				h.ServeHTTP(w, r)
				if w.status != http.StatusOK {
					t.Fatalf("%s, round %d, client %s: status %d", m.Name, round, r.RemoteAddr, w.status)
				}
			}
		}
	}
}

// TestBareAllocs checks that the bare handler and the driving loop
// allocate nothing, so that the allocations per request reported are the
// middleware's alone.
func TestBareAllocs(t *testing.T) {
	reqs := clientRequests(NumClients)
	h := newHTTP(t, Middlewares()[0], reqs)
	w := newDiscard()
	i := 0
	if a := testing.AllocsPerRun(1000, func() {
		w.reset()
		h.ServeHTTP(w, reqs[i%len(reqs)])
		i++
	}); a != 0 {
		t.Errorf("the bare handler makes %v allocations per request, want 0", a)
	}
}
