package httplimit

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
)

// TestPriorityReserve is the seed's case: a gate of 60 places of which 12
// are kept for reconnects, whose class Config.Priority reads from the
// route. A flood of 100 new sessions, whose handlers block, gets 48
// places and is refused beyond; 12 reconnects still get in during the
// flood, and only a 13th is refused. The gate is the Middleware's own
// (Limits.Reserve), or one made elsewhere and shared (Limits.Gate).
func TestPriorityReserve(t *testing.T) {
	for _, shared := range []bool{false, true} {
		lim := admit.Config{MaxInFlight: 60, Reserve: map[limits.Priority]int{limits.PriorityCritical: 12}}
		if shared {
			g, err := limits.NewGate(60, limits.WithReserve(limits.PriorityCritical, 12))
			if err != nil {
				t.Fatal(err)
			}
			lim = admit.Config{Gate: g}
		}
		m := mustNew(t, Config{Limits: lim, Priority: func(r *http.Request) limits.Priority {
			if r.URL.Path == "/reconnect" {
				return limits.PriorityCritical
			}
			return limits.PriorityDefault
		}})
		g := m.Engine().Gate()
		release := make(chan struct{})
		var inside sync.WaitGroup
		h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			inside.Done()
			<-release
		}))
		var mu sync.Mutex
		codes := map[string]map[int]int{"/new": {}, "/reconnect": {}}
		var wg sync.WaitGroup
		serve := func(path string, n int) {
			for range n {
				wg.Add(1)
				inside.Add(1)
				go func() {
					defer wg.Done()
					w := httptest.NewRecorder()
					h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
					// Counted before a refusal is told, so that the counts
					// are complete once inside.Wait returns.
					mu.Lock()
					codes[path][w.Code]++
					mu.Unlock()
					if w.Code != http.StatusOK {
						inside.Done() // refused: never inside
					}
				}()
			}
		}
		serve("/new", 100)
		inside.Wait() // every request of the flood is inside or refused
		serve("/reconnect", 13)
		inside.Wait()
		mu.Lock()
		refusedNew, refusedRe := codes["/new"][http.StatusServiceUnavailable], codes["/reconnect"][http.StatusServiceUnavailable]
		mu.Unlock()
		if in := g.InFlight(); in != 60 || refusedNew != 52 || refusedRe != 1 {
			t.Errorf("shared %v: %d inside, %d new sessions and %d reconnects refused; want 60 (48 new, 12 reconnects), 52 and 1", shared, in, refusedNew, refusedRe)
		}
		close(release)
		wg.Wait()
		if c := codes["/new"][http.StatusOK] + codes["/reconnect"][http.StatusOK]; c != 60 {
			t.Errorf("shared %v: %d served, want 60", shared, c)
		}
		s := m.Stats()
		if crit := s.Gate.Classes[2]; crit.Admitted != 12 || crit.Shed != 1 || s.Gate.Classes[1].Admitted != 48 {
			t.Errorf("shared %v: the gate's classes: %+v", shared, s.Gate.Classes)
		}
		if s.SharedGate != shared {
			t.Errorf("shared %v: Stats.SharedGate %v", shared, s.SharedGate)
		}
	}
}

// TestPriorityClassesCounted checks that with a gate without reserves the
// gate still counts each request under the class Config.Priority gave it.
func TestPriorityClassesCounted(t *testing.T) {
	m := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 8}, Priority: func(r *http.Request) limits.Priority {
		switch r.URL.Path {
		case "/join":
			return limits.PriorityCritical
		case "/prefetch":
			return limits.PrioritySheddable
		}
		return limits.PriorityDefault
	}})
	h := m.Handler(ok)
	for _, path := range []string{"/join", "/prefetch", "/new", "/join"} {
		if w := serve(h, "192.0.2.1:1", path); w.Code != 200 {
			t.Fatalf("%s: %d", path, w.Code)
		}
	}
	c := m.Stats().Gate.Classes
	if c[0].Priority != limits.PrioritySheddable || c[1].Priority != limits.PriorityDefault || c[2].Priority != limits.PriorityCritical {
		t.Fatalf("the gate's classes in another order: %+v", c)
	}
	if c[0].Admitted != 1 || c[1].Admitted != 1 || c[2].Admitted != 2 {
		t.Errorf("admitted by class: sheddable %d, default %d, critical %d; want 1, 1, 2", c[0].Admitted, c[1].Admitted, c[2].Admitted)
	}
}
