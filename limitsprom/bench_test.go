package limitsprom_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/limitsprom"
	"github.com/prometheus/client_golang/prometheus"
)

// The set-ups of httplimit's BenchmarkMiddleware, with limits high enough
// that nothing is refused.
var benchConfigs = []struct {
	name string
	cfg  httplimit.Config
}{
	{"Rate", httplimit.Config{Limits: admit.Config{Rate: limits.Limit{Events: 1_000_000_000, Period: time.Second}}}},
	{"Gate+Rate", httplimit.Config{Limits: admit.Config{MaxInFlight: 1024, Rate: limits.Limit{Events: 1_000_000_000, Period: time.Second}}}},
	{"All", httplimit.Config{Limits: admit.Config{
		Exempt:               []string{"/healthz"},
		MaxInFlight:          1024,
		Rate:                 limits.Limit{Events: 1_000_000_000, Period: time.Second},
		CallerKey:            "X-Api-Key",
		MaxInFlightPerClient: 1024,
	}}},
}

// discard is a ResponseWriter that keeps nothing.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// BenchmarkMiddleware measures a Middleware's cost per request, as
// httplimit's benchmark of that name does, from 1,024 client addresses
// already known: alone ("plain"), with its collector registered
// ("registered"), and with a scrape of it every 10ms meanwhile
// ("scraped"), 1,500 times as often as a Prometheus scraping every 15s.
// The scrapes' allocations count in the last one's figures, as the
// benchmark counts them for the whole process.
func BenchmarkMiddleware(b *testing.B) {
	reqs := make([]*http.Request, 1024)
	for i := range reqs {
		reqs[i] = httptest.NewRequest(http.MethodGet, "/api/items", nil)
		reqs[i].RemoteAddr = fmt.Sprintf("198.51.%d.%d:4711", i/256, i%256)
		reqs[i].Header.Set("X-Api-Key", fmt.Sprintf("key-%d", i%64))
	}
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	for _, c := range benchConfigs {
		for _, mode := range []string{"plain", "registered", "scraped"} {
			b.Run(c.name+"/"+mode, func(b *testing.B) {
				m, err := httplimit.New(c.cfg)
				if err != nil {
					b.Fatal(err)
				}
				if mode != "plain" {
					reg := prometheus.NewRegistry()
					if err := limitsprom.Register(reg, "api", m); err != nil {
						b.Fatal(err)
					}
					if mode == "scraped" {
						stop := scrapeEvery(b, reg, 10*time.Millisecond)
						defer stop()
					}
				}
				h := m.Handler(ok)
				w := &discard{h: make(http.Header)}
				for _, r := range reqs { // every client known: the steady state
					h.ServeHTTP(w, r)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					clear(w.h)
					h.ServeHTTP(w, reqs[i%len(reqs)])
					i++
				}
			})
		}
	}
}

// scrapeEvery gathers reg every period until the returned function is
// called.
func scrapeEvery(b *testing.B, reg prometheus.Gatherer, period time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if _, err := reg.Gather(); err != nil {
					b.Error(err)
					return
				}
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
