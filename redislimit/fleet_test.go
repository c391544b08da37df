package redislimit

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/limitsgo/limits/redislimit/redistest"
)

// TestFleetBound has two clients, as two processes would, each with its own
// GCRA and 8 goroutines, send unit requests for one key, and checks on the
// server's timeline (the times the script read from TIME, the decisions'
// At) that together they never exceed the GCRA bound: any closed interval
// of length t holds at most burst + floor(t/T) allowed requests.
func TestFleetBound(t *testing.T) {
	const (
		processes  = 2
		goroutines = 8
		requests   = 150 // per goroutine
		burst      = 10
	)
	srv := redistest.Start(t)
	prefix := freshPrefix()
	var mu sync.Mutex
	var allowed []int64 // server times of the allowed requests
	sent := 0
	var wg sync.WaitGroup
	for p := range processes {
		c := newClient(t, srv.Addr(), p == 0)                                                                  // one client of each kind
		g := must(New(c, 100, time.Second, WithBurst(burst), WithPrefix(prefix), WithTimeout(10*time.Second))) // T = 10ms
		for range goroutines {
			wg.Go(func() {
				for range requests {
					d, err := g.Allow(context.Background(), "shared")
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					sent++
					if d.Allowed {
						allowed = append(allowed, d.At.UnixNano())
					}
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	slices.Sort(allowed)
	T := int64(10 * time.Millisecond)
	span := time.Duration(allowed[len(allowed)-1] - allowed[0])
	t.Logf("%d of %d requests allowed over %v of server time", len(allowed), sent, span)
	if len(allowed) < burst || len(allowed) == sent {
		t.Fatalf("%d of %d requests allowed: the key was not contended", len(allowed), sent)
	}
	tight := false
	for i := range allowed {
		for j := i; j < len(allowed); j++ {
			count := int64(j - i + 1)
			bound := burst + (allowed[j]-allowed[i])/T
			if count > bound {
				t.Fatalf("%d requests allowed in %v of server time, bound %d", count, time.Duration(allowed[j]-allowed[i]), bound)
			}
			tight = tight || count == bound
		}
	}
	if !tight {
		t.Errorf("the bound was never reached: the limiter allowed less than the GCRA would")
	}
}
