package limits

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// mustGate returns a gate of n, failing the test if NewGate does.
func mustGate(t testing.TB, n int) *Gate {
	t.Helper()
	g, err := NewGate(n)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestNewGateErrors(t *testing.T) {
	for _, n := range []int{0, -1} {
		g, err := NewGate(n)
		if g != nil || !errors.Is(err, ErrInvalidLimit) || err.Error() != fmt.Sprintf("limits: invalid limit: gate size must be >= 1, got %d", n) {
			t.Errorf("NewGate(%d) = %v, %v", n, g, err)
		}
	}
}

func TestGateTryEnter(t *testing.T) {
	g := mustGate(t, 2)
	a, ok := g.TryEnter()
	if !ok || !a.Held() {
		t.Fatal("first TryEnter refused")
	}
	b, ok := g.TryEnter()
	if !ok {
		t.Fatal("second TryEnter refused")
	}
	if c, ok := g.TryEnter(); ok || c.Held() {
		t.Fatal("third TryEnter admitted into a gate of 2")
	}
	a.Release()
	a.Release() // idempotent: must not free b's place
	if a.Held() {
		t.Error("released permit still held")
	}
	c, ok := g.TryEnter()
	if !ok {
		t.Fatal("TryEnter refused after a release")
	}
	if _, ok := g.TryEnter(); ok {
		t.Fatal("a second Release freed a place")
	}
	b.Release()
	c.Release()
	var zero Permit
	zero.Release()
	want := GateStats{Max: 2, InFlight: 0, Peak: 2, Admitted: 3, Shed: 2}
	if got := g.Stats(); got != want {
		t.Errorf("Stats = %+v, want %+v", got, want)
	}
}

func TestGateReleaseOnPanic(t *testing.T) {
	g := mustGate(t, 1)
	func() {
		defer func() { recover() }()
		p, _ := g.TryEnter()
		defer p.Release()
		panic("handler failed")
	}()
	if got := g.Stats().InFlight; got != 0 {
		t.Errorf("InFlight after a panic = %d, want 0", got)
	}
}

func TestGateEnterWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := mustGate(t, 1)
		p, _ := g.TryEnter()
		go func() {
			time.Sleep(5 * time.Millisecond)
			p.Release()
		}()
		start := time.Now()
		q, ok := g.Enter(context.Background(), 10*time.Millisecond)
		if !ok {
			t.Fatal("Enter refused")
		}
		if waited := time.Since(start); waited != 5*time.Millisecond {
			t.Errorf("waited %v, want 5ms", waited)
		}
		start = time.Now()
		if _, ok := g.Enter(context.Background(), 10*time.Millisecond); ok || time.Since(start) != 10*time.Millisecond {
			t.Errorf("Enter on a full gate: %v after %v, want refused after the 10ms wait", ok, time.Since(start))
		}
		start = time.Now()
		if _, ok := g.Enter(context.Background(), 0); ok || time.Since(start) != 0 {
			t.Errorf("Enter without a wait: %v after %v, want refused at once", ok, time.Since(start))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
		defer cancel()
		if _, ok := g.Enter(ctx, time.Second); ok || ctx.Err() == nil {
			t.Errorf("Enter with an ending context: %v, want refused when it ends", ok)
		}
		q.Release()
		want := GateStats{Max: 1, Peak: 1, Admitted: 2, Shed: 1, TimedOut: 2}
		if got := g.Stats(); got != want {
			t.Errorf("Stats = %+v, want %+v", got, want)
		}
	})
}

// TestGateBoundedWaiters checks that no more callers wait than the gate
// admits: the rest are refused at once.
func TestGateBoundedWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := mustGate(t, 2)
		p1, _ := g.TryEnter()
		p2, _ := g.TryEnter()
		var wg sync.WaitGroup
		oks := make(chan bool, 2)
		for range 2 {
			wg.Go(func() {
				_, ok := g.Enter(context.Background(), time.Second)
				oks <- ok
			})
		}
		synctest.Wait() // both wait
		if w := g.Stats().Waiting; w != 2 {
			t.Fatalf("Waiting = %d, want 2", w)
		}
		start := time.Now()
		if _, ok := g.Enter(context.Background(), time.Second); ok || time.Since(start) != 0 {
			t.Errorf("third waiter: %v after %v, want refused at once", ok, time.Since(start))
		}
		wg.Wait()
		for range 2 {
			if <-oks {
				t.Error("a waiter was let into a gate that stayed full")
			}
		}
		p1.Release()
		p2.Release()
		if s := g.Stats(); s.Waiting != 0 || s.InFlight != 0 || s.Shed != 1 || s.TimedOut != 2 {
			t.Errorf("Stats = %+v", s)
		}
	})
}

// TestGateConcurrent runs many goroutines through a small gate and checks
// that no more than its size are ever inside.
func TestGateConcurrent(t *testing.T) {
	g := mustGate(t, 4)
	var inside, most atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 200 {
				p, ok := g.Enter(context.Background(), time.Millisecond)
				if !ok {
					continue
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				inside.Add(-1)
				p.Release()
				p.Release()
			}
		})
	}
	wg.Wait()
	s := g.Stats()
	if most.Load() > 4 || s.Peak > 4 {
		t.Errorf("%d callers inside at once (peak %d), gate of 4", most.Load(), s.Peak)
	}
	if s.InFlight != 0 || s.Waiting != 0 {
		t.Errorf("after all released: %+v", s)
	}
	if total := s.Admitted + s.Shed + s.TimedOut; total != 64*200 {
		t.Errorf("admitted %d + shed %d + timed out %d = %d, want %d", s.Admitted, s.Shed, s.TimedOut, total, 64*200)
	}
}

func TestGateAllocs(t *testing.T) {
	g := mustGate(t, 8)
	allocs := testing.AllocsPerRun(1000, func() {
		p, _ := g.TryEnter()
		p.Release()
	})
	if allocs != 0 {
		t.Errorf("TryEnter and Release allocate %v times per run, want 0", allocs)
	}
}

// TestGateHandoffNoLostWakeup races a Release with an Enter that finds
// the gate full, many times: the waiter must always get the place freed,
// never wait out its hour (in the bubble's time) for want of a wakeup.
func TestGateHandoffNoLostWakeup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := mustGate(t, 1)
		for i := range 3000 {
			p, ok := g.TryEnter()
			if !ok {
				t.Fatalf("round %d: the gate is not empty", i)
			}
			done := make(chan bool)
			go func() {
				q, ok := g.Enter(context.Background(), time.Hour)
				q.Release()
				done <- ok
			}()
			go p.Release()
			if !<-done {
				t.Fatalf("round %d: a waiter timed out though the place was freed", i)
			}
		}
		if s := g.Stats(); s.InFlight != 0 || s.Waiting != 0 || s.TimedOut != 0 || s.Admitted != 6000 {
			t.Errorf("Stats %+v", s)
		}
	})
}

// TestGateWaitersInOrder checks that waiters are let in first come, first
// served.
func TestGateWaitersInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := mustGate(t, 3)
		var held [3]Permit
		for i := range held {
			held[i], _ = g.TryEnter()
		}
		order := make(chan int, 3)
		for i := range 3 {
			go func() {
				q, ok := g.Enter(context.Background(), time.Hour)
				if ok {
					order <- i
					q.Release()
				}
			}()
			synctest.Wait() // waiting, in this order
		}
		for i := range held {
			held[i].Release()
			if got := <-order; got != i {
				t.Errorf("place %d went to waiter %d, want %d", i, got, i)
			}
		}
	})
}

func TestGateSetMax(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := mustGate(t, 2)
		var held [2]Permit
		held[0], _ = g.TryEnter()
		held[1], _ = g.TryEnter()
		done := make(chan bool)
		go func() {
			p, ok := g.Enter(context.Background(), time.Hour)
			done <- ok
			<-done
			p.Release()
		}()
		synctest.Wait()
		if old := g.SetMax(3); old != 2 {
			t.Errorf("SetMax returned %d, want 2", old)
		}
		if !<-done {
			t.Fatal("a larger maximum did not let the waiter in")
		}
		// Shrinking below the callers inside turns nobody out, and admits
		// nobody new until enough have left.
		g.SetMax(1)
		if _, ok := g.TryEnter(); ok {
			t.Error("admitted over the new maximum")
		}
		done <- true
		held[0].Release()
		synctest.Wait()
		if _, ok := g.TryEnter(); ok {
			t.Error("admitted with 1 inside and a maximum of 1")
		}
		held[1].Release()
		if p, ok := g.TryEnter(); !ok {
			t.Error("refused with the gate empty")
		} else {
			p.Release()
		}
		if s := g.Stats(); s.Max != 1 || s.InFlight != 0 || s.Peak != 3 {
			t.Errorf("Stats %+v", s)
		}
		if got := mustPanic(t, func() { g.SetMax(0) }); got != "limits: gate size must be >= 1, got 0" {
			t.Errorf("SetMax(0) panicked with %q", got)
		}
	})
}
