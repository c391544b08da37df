package httplimit

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/limitsgo/limits"
)

// TestPriorityReserve is the seed's case: a gate of 60 places of which 12
// are kept for reconnects, whose class Config.Priority reads from the
// route. A flood of 100 new sessions, whose handlers block, gets 48
// places and is refused beyond; 12 reconnects still get in during the
// flood, and only a 13th is refused.
func TestPriorityReserve(t *testing.T) {
	g, err := limits.NewGate(60, limits.WithReserve(limits.PriorityCritical, 12))
	if err != nil {
		t.Fatal(err)
	}
	m := mustNew(t, Config{Gate: g, Priority: func(r *http.Request) limits.Priority {
		if r.URL.Path == "/reconnect" {
			return limits.PriorityCritical
		}
		return limits.PriorityDefault
	}})
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
		t.Errorf("%d inside, %d new sessions and %d reconnects refused; want 60 (48 new, 12 reconnects), 52 and 1", in, refusedNew, refusedRe)
	}
	close(release)
	wg.Wait()
	if c := codes["/new"][http.StatusOK] + codes["/reconnect"][http.StatusOK]; c != 60 {
		t.Errorf("%d served, want 60", c)
	}
	s := m.Stats()
	if crit := s.Gate.Classes[2]; crit.Admitted != 12 || crit.Shed != 1 || s.Gate.Classes[1].Admitted != 48 {
		t.Errorf("the gate's classes: %+v", s.Gate.Classes)
	}
}
