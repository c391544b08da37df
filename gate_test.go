package limits

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestNewGatePanics(t *testing.T) {
	if got, want := mustPanic(t, func() { NewGate(0) }), "limits: gate size must be >= 1, got 0"; got != want {
		t.Errorf("panic %q, want %q", got, want)
	}
}

func TestGateTryEnter(t *testing.T) {
	g := NewGate(2)
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
	g := NewGate(1)
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
		g := NewGate(1)
		p, _ := g.TryEnter()
		go func() {
			time.Sleep(5 * time.Millisecond)
			p.Release()
		}()
		start := time.Now()
		q, err := g.Enter(context.Background(), 10*time.Millisecond)
		if err != nil {
			t.Fatalf("Enter: %v", err)
		}
		if waited := time.Since(start); waited != 5*time.Millisecond {
			t.Errorf("waited %v, want 5ms", waited)
		}
		if _, err := g.Enter(context.Background(), 10*time.Millisecond); !errors.Is(err, ErrGateTimeout) {
			t.Errorf("Enter on a full gate: %v, want ErrGateTimeout", err)
		}
		if _, err := g.Enter(context.Background(), 0); !errors.Is(err, ErrGateFull) {
			t.Errorf("Enter without a wait: %v, want ErrGateFull", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
		defer cancel()
		if _, err := g.Enter(ctx, time.Second); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Enter with an ending context: %v, want DeadlineExceeded", err)
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
		g := NewGate(2)
		p1, _ := g.TryEnter()
		p2, _ := g.TryEnter()
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		for range 2 {
			wg.Go(func() {
				_, err := g.Enter(context.Background(), time.Second)
				errs <- err
			})
		}
		synctest.Wait() // both wait
		if w := g.Stats().Waiting; w != 2 {
			t.Fatalf("Waiting = %d, want 2", w)
		}
		if _, err := g.Enter(context.Background(), time.Second); !errors.Is(err, ErrGateFull) {
			t.Errorf("third waiter: %v, want ErrGateFull at once", err)
		}
		wg.Wait()
		for range 2 {
			if err := <-errs; !errors.Is(err, ErrGateTimeout) {
				t.Errorf("waiter: %v, want ErrGateTimeout", err)
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
	g := NewGate(4)
	var inside, most atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 200 {
				p, err := g.Enter(context.Background(), time.Millisecond)
				if err != nil {
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
	g := NewGate(8)
	allocs := testing.AllocsPerRun(1000, func() {
		p, _ := g.TryEnter()
		p.Release()
	})
	if allocs != 0 {
		t.Errorf("TryEnter and Release allocate %v times per run, want 0", allocs)
	}
}
