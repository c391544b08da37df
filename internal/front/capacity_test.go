package front

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
)

// TestCapacityAdaptiveWaits checks that a front end's adaptive gate
// without a QueueWait lets a request that finds it full wait the
// controller's wait (adaptive.Controller.Wait) for a place, rather than
// refusing it at once; that one with a QueueWait waits that; and that
// Adaptive.Wait < 0 refuses at once.
func TestCapacityAdaptiveWaits(t *testing.T) {
	for _, c := range []struct {
		name  string
		wait  time.Duration // QueueWait
		aWait time.Duration // Adaptive.Wait
		in    bool          // the second request gets in
	}{
		{"controller's wait", 0, 0, true},
		{"QueueWait", 20 * time.Millisecond, 0, true},
		{"QueueWait too short", 2 * time.Millisecond, 0, false},
		{"no wait", 0, -1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				capa, err := NewCapacity(CapacityConfig{Max: 4, Wait: c.wait, Adaptive: &adaptive.Config{Initial: 1, ProbeEvery: -1, Wait: c.aWait}})
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				// One request of 10ms: the controller's wait is then
				// twice 10ms over a limit of 1, at most 10ms.
				var first Held
				if !capa.Enter(ctx, &first, limits.PriorityDefault) {
					t.Fatal("first request refused")
				}
				time.Sleep(10 * time.Millisecond)
				first.Leave(adaptive.Success)
				if got, want := capa.Ctrl.Wait(), map[bool]time.Duration{true: 0, false: 10 * time.Millisecond}[c.aWait < 0]; got != want {
					t.Fatalf("controller's wait %v, want %v", got, want)
				}
				// A request holds the only place for 5ms; one more comes.
				var a, b Held
				if !capa.Enter(ctx, &a, limits.PriorityDefault) {
					t.Fatal("request refused with the gate empty")
				}
				left := make(chan struct{})
				go func() {
					time.Sleep(5 * time.Millisecond)
					a.Leave(adaptive.Success)
					close(left)
				}()
				start := time.Now()
				in := capa.Enter(ctx, &b, limits.PriorityDefault)
				waited := time.Since(start)
				<-left
				if in {
					b.Leave(adaptive.Success)
				}
				if in != c.in {
					t.Errorf("second request let in: %v after %v, want %v", in, waited, c.in)
				}
				if !c.in && c.wait == 0 && waited != 0 {
					t.Errorf("refused after %v, want at once", waited)
				}
			})
		})
	}
}
