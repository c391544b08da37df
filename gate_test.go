package limits

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
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
		if g != nil || !errors.Is(err, errInvalidLimit) || err.Error() != fmt.Sprintf("limits: invalid limit: gate size must be >= 1, got %d", n) {
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
	want := GateStats{Max: 2, InFlight: 0, Peak: 2, Admitted: 3, Shed: 2,
		Classes: [3]classStats{{PrioritySheddable, 2, 0, 0}, {PriorityDefault, 2, 3, 2}, {PriorityCritical, 2, 0, 0}}}
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
		// Waits of 5ms (let in), 10ms and 2ms (given up).
		want := GateStats{Max: 1, Peak: 1, Admitted: 2, Shed: 1, TimedOut: 2, Waited: 3, WaitTime: 17 * time.Millisecond,
			Classes: [3]classStats{{PrioritySheddable, 1, 0, 0}, {PriorityDefault, 1, 2, 1}, {PriorityCritical, 1, 0, 0}}}
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
	r, err := NewGate(8, WithReserve(PriorityCritical, 2))
	if err != nil {
		t.Fatal(err)
	}
	allocs = testing.AllocsPerRun(1000, func() {
		p, _ := r.TryEnterPriority(PrioritySheddable)
		p.Release()
		r.TryEnterPriority(PrioritySheddable)
		r.Stats()
	})
	if allocs != 0 {
		t.Errorf("TryEnterPriority, Release and Stats allocate %v times per run, want 0", allocs)
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
		done := make(chan struct{})
		for i := range 3 {
			go func() {
				q, ok := g.Enter(context.Background(), time.Hour)
				if ok {
					order <- i
					<-done // hold the place, so that only held's are freed
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
		close(done)
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

// TestGateInFlight checks InFlight against the count in Stats.
func TestGateInFlight(t *testing.T) {
	g := mustGate(t, 3)
	a, _ := g.TryEnter()
	b, _ := g.TryEnter()
	if got := g.InFlight(); got != 2 {
		t.Errorf("InFlight = %d, want 2", got)
	}
	a.Release()
	b.Release()
	if got := g.InFlight(); got != 0 {
		t.Errorf("InFlight = %d after releases, want 0", got)
	}
}

// arrival is what happened to one caller of Enter in the AdaptWait tests.
type arrival struct {
	at     time.Duration // when it came, from the start of the test
	ok     bool
	waited time.Duration
}

// arrive starts a caller every 1ms for the given time, each calling Enter
// with a wait of 5ms and, once let in, holding its place for hold, and
// returns what happened to them in the order they came. It must be called
// in a synctest bubble.
func arrive(g *Gate, d, hold time.Duration) []arrival {
	start := time.Now()
	out := make([]arrival, d/time.Millisecond)
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() {
			at := time.Since(start)
			p, ok := g.Enter(context.Background(), 5*time.Millisecond)
			out[i] = arrival{at: at, ok: ok, waited: time.Since(start) - at}
			if ok {
				time.Sleep(hold)
				p.Release()
			}
		})
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	return out
}

// TestGateAdaptWaitCuts holds a gate full while callers keep coming: every
// wait runs out, so the gate refuses at once for an interval, then lets
// callers wait for an interval to judge again, and refuses for twice as
// long each time the queue stands again, up to 16 intervals.
func TestGateAdaptWaitCuts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := mustGate(t, 8)
		g.AdaptWait(100 * time.Millisecond)
		var held [8]Permit
		for i := range held {
			held[i], _ = g.TryEnter()
		}
		got := arrive(g, 3650*time.Millisecond, 0)
		// Refusal periods, in ms: each after an interval of waiting.
		cuts := [][2]int{{100, 200}, {300, 500}, {600, 1000}, {1100, 1900}, {2000, 3600}}
		cut := func(ms int) bool {
			for _, c := range cuts {
				if ms >= c[0] && ms < c[1] {
					return true
				}
			}
			return false
		}
		for i, a := range got {
			ms := int(a.at / time.Millisecond)
			if ms != i {
				t.Fatalf("caller %d came at %v", i, a.at)
			}
			if a.ok {
				t.Fatalf("caller at %dms let into a full gate", ms)
			}
			want := 5 * time.Millisecond
			if cut(ms) {
				want = 0
			}
			// The caller at the very start of a refusal period may be the
			// one whose arrival ends the interval, refused at once too.
			if a.waited != want && !(want != 0 && a.waited == 0 && cut(ms+1) && !cut(ms)) {
				t.Errorf("caller at %dms waited %v, want %v", ms, a.waited, want)
			}
		}
		s := g.Stats()
		if s.Overloads != uint64(len(cuts)) || s.Overloaded {
			t.Errorf("Overloads %d, Overloaded %v; want %d and false", s.Overloads, s.Overloaded, len(cuts))
		}
		if s.Shed+s.TimedOut != uint64(len(got)) || s.Waited != s.TimedOut || s.WaitTime != time.Duration(s.Waited)*5*time.Millisecond {
			t.Errorf("Stats %+v for %d callers", s, len(got))
		}
		for i := range held {
			held[i].Release()
		}
	})
}

// TestGateAdaptWaitRecovers ends an overload during a refusal period: once
// it is over, callers are let in, and nobody is refused.
func TestGateAdaptWaitRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := mustGate(t, 8)
		g.AdaptWait(100 * time.Millisecond)
		var held [8]Permit
		for i := range held {
			held[i], _ = g.TryEnter()
		}
		go func() {
			time.Sleep(150 * time.Millisecond) // within the first refusal period
			for i := range held {
				held[i].Release()
			}
		}()
		got := arrive(g, 400*time.Millisecond, 4*time.Millisecond)
		for _, a := range got {
			if a.at > 150*time.Millisecond && (!a.ok || a.waited != 0) {
				t.Errorf("caller at %v: let in %v after %v, want at once", a.at, a.ok, a.waited)
			}
		}
		if s := g.Stats(); s.Overloads != 1 || s.Overloaded || s.InFlight != 0 {
			t.Errorf("Stats %+v", s)
		}
	})
}

// TestGateAdaptWaitAbsorbsBursts sends bursts that a short wait absorbs:
// every caller gets in, and the gate never refuses.
func TestGateAdaptWaitAbsorbsBursts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := mustGate(t, 2)
		g.AdaptWait(50 * time.Millisecond)
		var wg sync.WaitGroup
		for range 100 {
			for range 4 {
				wg.Go(func() {
					p, ok := g.Enter(context.Background(), 5*time.Millisecond)
					if !ok {
						t.Error("refused")
						return
					}
					time.Sleep(2 * time.Millisecond)
					p.Release()
				})
			}
			time.Sleep(20 * time.Millisecond)
		}
		wg.Wait()
		s := g.Stats()
		// Of each burst of 4, two wait 2ms.
		if s.Admitted != 400 || s.Shed+s.TimedOut+s.Overloads != 0 || s.Waited != 200 || s.WaitTime != 200*2*time.Millisecond {
			t.Errorf("Stats %+v", s)
		}
	})
}

// TestGateAdaptWaitFewWaiters checks that an interval with fewer than four
// waiters is not judged, however many gave up, and that AdaptWait(0) ends
// a refusal period.
func TestGateAdaptWaitFewWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := mustGate(t, 1)
		g.AdaptWait(10 * time.Millisecond)
		p, _ := g.TryEnter()
		for range 3 {
			if _, ok := g.Enter(context.Background(), 5*time.Millisecond); ok {
				t.Fatal("let into a full gate")
			}
			time.Sleep(5 * time.Millisecond)
		}
		// Four intervals of three waiters each, all given up: not judged.
		if s := g.Stats(); s.Overloads != 0 || s.TimedOut != 3 {
			t.Fatalf("Stats %+v", s)
		}
		for range 4 {
			g.Enter(context.Background(), 2*time.Millisecond)
		}
		time.Sleep(10 * time.Millisecond)
		start := time.Now()
		if _, ok := g.Enter(context.Background(), 5*time.Millisecond); ok || time.Since(start) != 0 {
			t.Fatalf("after four waits in vain: %v after %v, want refused at once", ok, time.Since(start))
		}
		if s := g.Stats(); s.Overloads != 1 || !s.Overloaded {
			t.Fatalf("Stats %+v", s)
		}
		g.AdaptWait(0)
		start = time.Now()
		if _, ok := g.Enter(context.Background(), 5*time.Millisecond); ok || time.Since(start) != 5*time.Millisecond {
			t.Errorf("adaptation off: %v after %v, want refused after the wait", ok, time.Since(start))
		}
		if s := g.Stats(); s.Overloaded {
			t.Errorf("still overloaded with adaptation off")
		}
		p.Release()
	})
}

// TestGateAdaptWaitConcurrent runs many goroutines through a small gate
// that adapts its waits, and checks the gate's invariants.
func TestGateAdaptWaitConcurrent(t *testing.T) {
	g := mustGate(t, 4)
	g.AdaptWait(time.Millisecond)
	var inside, most atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 300 {
				p, ok := g.Enter(context.Background(), 100*time.Microsecond)
				if !ok {
					continue
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(10 * time.Microsecond)
				inside.Add(-1)
				p.Release()
			}
		})
	}
	wg.Wait()
	s := g.Stats()
	if most.Load() > 4 || s.Peak > 4 || s.InFlight != 0 || s.Waiting != 0 {
		t.Errorf("%d inside at once; Stats %+v", most.Load(), s)
	}
	if total := s.Admitted + s.Shed + s.TimedOut; total != 32*300 {
		t.Errorf("admitted %d + shed %d + timed out %d = %d, want %d", s.Admitted, s.Shed, s.TimedOut, total, 32*300)
	}
	if s.Waited < s.TimedOut {
		t.Errorf("Waited %d < TimedOut %d", s.Waited, s.TimedOut)
	}
}

func TestNewGateReserveErrors(t *testing.T) {
	for _, c := range []struct {
		max  int
		opts []Option
		want string
	}{
		{10, []Option{WithReserve(PriorityCritical, -1)}, "limits: invalid limit: WithReserve(critical, -1): the places reserved must be >= 0"},
		{10, []Option{WithReserve(PrioritySheddable, 2)}, "limits: invalid limit: WithReserve(sheddable, 2): the priority must be PriorityDefault or PriorityCritical"},
		{10, []Option{WithReserve(Priority(5), 2)}, "limits: invalid limit: WithReserve(Priority(5), 2): the priority must be PriorityDefault or PriorityCritical"},
		{10, []Option{WithReserve(PriorityCritical, 10)}, "limits: invalid limit: WithReserve: 10 places reserved in a gate of 10 leave none for PrioritySheddable"},
		{10, []Option{WithReserve(PriorityCritical, 6), WithReserve(PriorityDefault, 4)}, "limits: invalid limit: WithReserve: 10 places reserved in a gate of 10 leave none for PrioritySheddable"},
		{10, []Option{WithBurst(3)}, "limits: invalid limit: WithBurst does not apply to a Gate"},
	} {
		g, err := NewGate(c.max, c.opts...)
		if g != nil || !errors.Is(err, errInvalidLimit) || err.Error() != c.want {
			t.Errorf("NewGate(%d, ...) = %v, %v, want the error %q", c.max, g, err, c.want)
		}
	}
	// Given twice, the last reserve of a class counts.
	g, err := NewGate(10, WithReserve(PriorityCritical, 9), WithReserve(PriorityCritical, 2), WithReserve(PriorityDefault, 0))
	if err != nil {
		t.Fatal(err)
	}
	if got := classLimits(g); got != [3]int{8, 8, 10} {
		t.Errorf("class limits %v, want [8 8 10]", got)
	}
}

// classLimits returns g's limit of each class, lowest first.
func classLimits(g *Gate) (l [3]int) {
	for c, s := range g.Stats().Classes {
		l[c] = s.Limit
	}
	return l
}

// TestGateSeedReserve is seed 001's case: a gate of 60 with 12 places only
// reconnects (critical) may take leaves 48 for new sockets.
func TestGateSeedReserve(t *testing.T) {
	g, err := NewGate(60, WithReserve(PriorityCritical, 12))
	if err != nil {
		t.Fatal(err)
	}
	var held []*Permit
	take := func(p Priority, n int) (admitted int) {
		for range n {
			q, ok := g.TryEnterPriority(p)
			if ok {
				held = append(held, &q)
				admitted++
			}
		}
		return admitted
	}
	if got := take(PrioritySheddable, 30); got != 30 {
		t.Errorf("sheddable: %d of 30 admitted", got)
	}
	if got := take(PriorityDefault, 30); got != 18 {
		t.Errorf("default: %d of 30 admitted, want the 18 left of 48", got)
	}
	if _, ok := g.TryEnter(); ok {
		t.Error("TryEnter took a reserved place")
	}
	if got := take(PriorityCritical, 13); got != 12 {
		t.Errorf("critical: %d of 13 admitted, want the 12 reserved", got)
	}
	want := [3]classStats{
		{PrioritySheddable, 48, 30, 0},
		{PriorityDefault, 48, 18, 13},
		{PriorityCritical, 60, 12, 1},
	}
	s := g.Stats()
	if s.Classes != want || s.Admitted != 60 || s.Shed != 14 || s.InFlight != 60 {
		t.Errorf("Stats = %+v, want classes %+v", s, want)
	}
	// A place freed by a critical caller is not one the others may take.
	held[len(held)-1].Release()
	if _, ok := g.TryEnterPriority(PrioritySheddable); ok {
		t.Error("a sheddable caller took a place freed in the reserve")
	}
	// The rule counts every caller inside: with 11 critical callers and
	// 47 others inside, the others may not take a 48th place.
	held[0].Release()
	if _, ok := g.TryEnterPriority(PrioritySheddable); ok {
		t.Error("a sheddable caller entered with 58 inside")
	}
	for _, q := range held[48:] {
		q.Release()
	}
	if _, ok := g.TryEnterPriority(PrioritySheddable); !ok {
		t.Error("a sheddable caller was refused with 47 inside")
	}
	// A priority out of range counts as the nearest class.
	if _, ok := g.TryEnterPriority(Priority(127)); !ok {
		t.Error("Priority(127) was not taken as critical")
	}
	if _, ok := g.TryEnterPriority(Priority(-128)); ok || g.Stats().Classes[0].Shed != 3 {
		t.Errorf("Priority(-128) not counted as sheddable: %+v", g.Stats().Classes)
	}
}

// TestGateReserveLevels checks reserves of two classes: PriorityDefault's
// keeps places from sheddable callers only.
func TestGateReserveLevels(t *testing.T) {
	g, err := NewGate(10, WithReserve(PriorityCritical, 2), WithReserve(PriorityDefault, 3))
	if err != nil {
		t.Fatal(err)
	}
	if got := classLimits(g); got != [3]int{5, 8, 10} {
		t.Errorf("class limits %v, want [5 8 10]", got)
	}
	n := func(p Priority) (k int) {
		for {
			if _, ok := g.TryEnterPriority(p); !ok {
				return k
			}
			k++
		}
	}
	if a, b, c := n(PrioritySheddable), n(PriorityDefault), n(PriorityCritical); a != 5 || b != 3 || c != 2 {
		t.Errorf("admitted %d sheddable, %d default, %d critical; want 5, 3, 2", a, b, c)
	}
}

// TestGateReserveFlood floods a gate of 60 with 12 reserved for critical
// callers with sheddable ones from many goroutines: every critical caller
// is let in, for at most 48 places are ever taken by the others.
func TestGateReserveFlood(t *testing.T) {
	g, err := NewGate(60, WithReserve(PriorityCritical, 12))
	if err != nil {
		t.Fatal(err)
	}
	var others, most atomic.Int64
	var stop atomic.Bool
	var flood, critical sync.WaitGroup
	var tries atomic.Uint64
	for i := range 100 {
		p := PrioritySheddable
		if i%4 == 0 {
			p = PriorityDefault
		}
		flood.Go(func() {
			for !stop.Load() {
				tries.Add(1)
				q, ok := g.EnterPriority(context.Background(), 50*time.Microsecond, p)
				if !ok {
					continue
				}
				n := others.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				others.Add(-1)
				q.Release()
			}
		})
	}
	const rounds = 500
	var refused atomic.Int64
	for range 12 {
		critical.Go(func() {
			for range rounds {
				q, ok := g.TryEnterPriority(PriorityCritical)
				if !ok {
					refused.Add(1)
					continue
				}
				q.Release()
			}
		})
	}
	critical.Wait()
	stop.Store(true)
	flood.Wait()
	if refused.Load() != 0 {
		t.Errorf("%d critical callers refused under the flood", refused.Load())
	}
	if most.Load() > 48 {
		t.Errorf("%d default and sheddable callers inside at once, want at most 48", most.Load())
	}
	s := g.Stats()
	if c := s.Classes[2]; c.Admitted != 12*rounds || c.Shed != 0 {
		t.Errorf("critical: %+v, want %d admitted, none shed", c, 12*rounds)
	}
	if got := s.Classes[0].Admitted + s.Classes[0].Shed + s.Classes[1].Admitted + s.Classes[1].Shed + s.TimedOut; got != tries.Load() {
		t.Errorf("the flood's callers counted %d times, want %d", got, tries.Load())
	}
	if s.Admitted != s.Classes[0].Admitted+s.Classes[1].Admitted+s.Classes[2].Admitted || s.InFlight != 0 {
		t.Errorf("Stats = %+v", s)
	}
}

// TestGateWaitersByClass checks that a freed place goes to the caller
// waiting longest among those whose class may take it.
func TestGateWaitersByClass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := NewGate(3, WithReserve(PriorityCritical, 1))
		if err != nil {
			t.Fatal(err)
		}
		a, _ := g.TryEnter()
		b, _ := g.TryEnter()
		c, _ := g.TryEnterPriority(PriorityCritical)
		got := make(chan string, 3)
		wait := func(name string, p Priority) {
			go func() {
				if q, ok := g.EnterPriority(context.Background(), time.Hour, p); ok {
					got <- name
					q.Release()
				}
			}()
			synctest.Wait()
		}
		wait("sheddable", PrioritySheddable)
		wait("default", PriorityDefault)
		wait("critical", PriorityCritical)
		// The reserved place: only the critical waiter may take it, though
		// it came last; it leaves at once, and the place is free again.
		c.Release()
		synctest.Wait()
		if s := <-got; s != "critical" {
			t.Fatalf("the reserved place went to the %s waiter", s)
		}
		a.Release()
		synctest.Wait()
		if s := <-got; s != "sheddable" {
			t.Errorf("a place of the two went to the %s waiter, want the one waiting longest", s)
		}
		b.Release()
		synctest.Wait()
		if s := <-got; s != "default" {
			t.Errorf("got %s, want default", s)
		}
		if s := g.Stats(); s.Waiting != 0 || s.InFlight != 0 {
			t.Errorf("Stats = %+v", s)
		}
	})
}

// TestGateReserveScales checks how the reserves follow SetMax.
func TestGateReserveScales(t *testing.T) {
	g, err := NewGate(60, WithReserve(PriorityCritical, 12), WithReserve(PriorityDefault, 6))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		max  int
		want [3]int
	}{
		{60, [3]int{42, 48, 60}},
		{30, [3]int{21, 24, 30}},
		{120, [3]int{84, 96, 120}},
		{10, [3]int{7, 8, 10}},
		{5, [3]int{3, 4, 5}},     // 12*5/60 = 1, 6*5/60 = 0.5 rounded to 1
		{3, [3]int{1, 2, 3}},     // at least 1 each
		{2, [3]int{1, 1, 2}},     // the default reserve cut for the sheddable place
		{1, [3]int{1, 1, 1}},     // no reserve left
		{61, [3]int{43, 49, 61}}, // 12.2 and 6.1 rounded
		{1 << 62, [3]int{3228180212899171533, 3689348814741910323, 1 << 62}}, // 2^62*12/60 and 2^62*6/60, rounded: no overflow
	} {
		g.SetMax(c.max)
		if got := classLimits(g); got != c.want {
			t.Errorf("SetMax(%d): class limits %v, want %v", c.max, got, c.want)
		}
	}
	// Without reserves, every class may take every place.
	h := mustGate(t, 4)
	h.SetMax(9)
	if got := classLimits(h); got != [3]int{9, 9, 9} {
		t.Errorf("class limits %v, want [9 9 9]", got)
	}
}

// TestGateReserveModel runs random sequences of entries, releases and
// SetMax on a gate with reserves against a reference model.
func TestGateReserveModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		max0 := 1 + rng.IntN(40)
		crit, def := rng.IntN(max0), 0
		if rest := max0 - 1 - crit; rest > 0 {
			def = rng.IntN(rest + 1)
		}
		g, err := NewGate(max0, WithReserve(PriorityCritical, crit), WithReserve(PriorityDefault, def))
		if err != nil {
			t.Fatal(err)
		}
		m := max0
		var held []*Permit
		var admitted, shed [3]uint64
		for range 300 {
			switch op := rng.IntN(10); {
			case op < 6:
				p := Priority(rng.IntN(3) - 1)
				// The model: reserves scaled as WithReserve says.
				rc, rd := scaleRef(crit, max0, m), scaleRef(def, max0, m)
				for rc+rd > m-1 {
					if rd > 0 {
						rd--
					} else {
						rc--
					}
				}
				lim := [3]int{m - rc - rd, m - rc, m}[p+1]
				want := len(held) < lim
				q, ok := g.TryEnterPriority(p)
				if ok != want {
					t.Fatalf("gate %d (%d, %d reserved) at %d with %d inside: %v admitted %v, want %v", max0, crit, def, m, len(held), p, ok, want)
				}
				if ok {
					held = append(held, &q)
					admitted[p+1]++
				} else {
					shed[p+1]++
				}
			case op < 9 && len(held) > 0:
				i := rng.IntN(len(held))
				held[i].Release()
				held = slices.Delete(held, i, i+1)
			default:
				m = 1 + rng.IntN(2*max0)
				g.SetMax(m)
			}
		}
		s := g.Stats()
		for c := range 3 {
			if s.Classes[c].Admitted != admitted[c] || s.Classes[c].Shed != shed[c] {
				t.Fatalf("class %d: %+v, want admitted %d, shed %d", c, s.Classes[c], admitted[c], shed[c])
			}
		}
		if s.InFlight != len(held) {
			t.Fatalf("InFlight %d, want %d", s.InFlight, len(held))
		}
	}
}

// scaleRef is the reserve n of a gate made with max0 at a limit of m.
func scaleRef(n, max0, m int) int {
	if n == 0 {
		return 0
	}
	return max(int(math.Round(float64(n)*float64(m)/float64(max0))), 1)
}

// TestGateWaitingStorm runs 100 goroutines through a gate of 8 while
// another reads Stats, for up to five rounds: Waiting never reads above
// the gate's size, nor InFlight.
func TestGateWaitingStorm(t *testing.T) {
	const size = 8
	for round := 0; round < 5 && !t.Failed(); round++ {
		g := mustGate(t, size)
		var stop atomic.Bool
		var bad atomic.Value
		reader := make(chan struct{})
		go func() {
			defer close(reader)
			for !stop.Load() {
				if s := g.Stats(); s.Waiting > size || s.InFlight > size || s.Waiting < 0 {
					bad.Store(s)
				}
			}
		}()
		var wg sync.WaitGroup
		for range 100 {
			wg.Go(func() {
				for range 200 {
					// Holding the place a moment keeps the queue full,
					// and callers finding it full in Enter's locked part.
					if p, ok := g.Enter(context.Background(), time.Millisecond); ok {
						time.Sleep(10 * time.Microsecond)
						p.Release()
					}
				}
			})
		}
		wg.Wait()
		stop.Store(true)
		<-reader
		if s := bad.Load(); s != nil {
			t.Errorf("round %d: Stats of a gate of %d read %+v", round, size, s)
		}
		if s := g.Stats(); s.Waiting != 0 || s.InFlight != 0 || s.Admitted+s.Shed+s.TimedOut != 100*200 {
			t.Errorf("after the storm: %+v", s)
		}
	}
}

// TestGateAdaptWaitForgetsPast is issue 19's case: four callers whose
// wait ran out, then ten seconds without load. The interval they were
// counted in ended long ago; the next caller is judged on the interval
// just ended, in which nobody waited, and may wait.
func TestGateAdaptWaitForgetsPast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := mustGate(t, 4)
		var held [4]Permit
		for i := range held {
			held[i], _ = g.TryEnter()
		}
		g.AdaptWait(100 * time.Millisecond)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if _, ok := g.Enter(context.Background(), 5*time.Millisecond); ok {
					t.Error("a caller entered a full gate")
				}
			})
		}
		wg.Wait()
		time.Sleep(10 * time.Second)
		before := g.Stats()
		start := time.Now()
		_, ok := g.Enter(context.Background(), 5*time.Millisecond)
		waited := time.Since(start)
		s := g.Stats()
		if ok || waited != 5*time.Millisecond || s.Shed != before.Shed || s.Overloaded || s.Overloads != 0 {
			t.Errorf("Enter 10s after the last wait: %v after %v, Stats %+v; want a 5ms wait, no cut", ok, waited, s)
		}
		// Within the interval after the four, the judgement stands.
		h := mustGate(t, 4)
		for i := range held {
			held[i].Release()
			held[i], _ = h.TryEnter()
		}
		h.AdaptWait(100 * time.Millisecond)
		for range 4 {
			wg.Go(func() { h.Enter(context.Background(), 5*time.Millisecond) })
		}
		wg.Wait()
		time.Sleep(150 * time.Millisecond)
		if _, ok := h.Enter(context.Background(), 5*time.Millisecond); ok || !h.Stats().Overloaded {
			t.Errorf("Enter in the interval after four waits ran out: %v, Stats %+v; want a cut", ok, h.Stats())
		}
		for i := range held {
			held[i].Release()
		}
	})
}

// TestGateQueueByClass fills a gate's queue with sheddable waiters: a
// critical caller that must wait takes the place in the queue of the
// youngest of them, which is refused at once, rather than being refused
// itself.
func TestGateQueueByClass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, err := NewGate(2, WithReserve(PriorityCritical, 1))
		if err != nil {
			t.Fatal(err)
		}
		a, _ := g.TryEnterPriority(PrioritySheddable)
		defer a.Release()
		b, _ := g.TryEnterPriority(PriorityCritical)
		type result struct {
			name string
			ok   bool
			at   time.Duration
		}
		got := make(chan result, 4)
		start := time.Now()
		wait := func(name string, p Priority) {
			go func() {
				q, ok := g.EnterPriority(context.Background(), time.Hour, p)
				got <- result{name, ok, time.Since(start)}
				if ok {
					time.Sleep(time.Second)
					q.Release()
				}
			}()
			synctest.Wait()
		}
		wait("old sheddable", PrioritySheddable)
		time.Sleep(time.Millisecond)
		wait("young sheddable", PrioritySheddable)
		if s := g.Stats(); s.Waiting != 2 {
			t.Fatalf("%d waiting, want the queue full with 2", s.Waiting)
		}
		time.Sleep(time.Millisecond)
		wait("critical", PriorityCritical)
		if r := <-got; r.name != "young sheddable" || r.ok || r.at != 2*time.Millisecond {
			t.Fatalf("got %+v, want the young sheddable waiter refused when the critical one came", r)
		}
		// A second critical caller finds the queue full of one sheddable
		// and one critical waiter: it displaces the sheddable one.
		wait("critical 2", PriorityCritical)
		if r := <-got; r.name != "old sheddable" || r.ok {
			t.Fatalf("got %+v, want the old sheddable waiter refused", r)
		}
		// A third finds only critical waiters: it is refused itself.
		if _, ok := g.EnterPriority(context.Background(), time.Hour, PriorityCritical); ok {
			t.Fatal("a third critical caller entered")
		}
		b.Release()
		synctest.Wait()
		if r := <-got; r.name != "critical" || !r.ok {
			t.Fatalf("got %+v, want the first critical waiter let in", r)
		}
		s := g.Stats()
		if s.Classes[0].Shed != 2 || s.Classes[2].Shed != 1 || s.Waited != 3 || s.TimedOut != 0 || s.Waiting != 1 {
			t.Errorf("Stats = %+v", s)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if r := <-got; r.name != "critical 2" || !r.ok {
			t.Fatalf("got %+v, want the second critical waiter let in", r)
		}
		time.Sleep(time.Second) // for it to leave
	})
}

// TestGateClassesStorm runs callers of every class, waiting or not,
// through a small gate with reserves, under -race: the classes below
// critical never hold more places than their limit, every caller is
// counted once, and nothing is left inside or waiting.
func TestGateClassesStorm(t *testing.T) {
	g, err := NewGate(8, WithReserve(PriorityCritical, 2), WithReserve(PriorityDefault, 2))
	if err != nil {
		t.Fatal(err)
	}
	var inside [3]atomic.Int64
	var tries [3]atomic.Uint64
	var bad atomic.Value
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for range 200 {
				p := Priority(rng.IntN(3) - 1)
				c := p + 1
				tries[c].Add(1)
				q, ok := g.EnterPriority(context.Background(), time.Duration(rng.IntN(200))*time.Microsecond, p)
				if !ok {
					continue
				}
				inside[c].Add(1)
				// Class c and those below it hold at most c's limit.
				var n int64
				for k := range c + 1 {
					n += inside[k].Load()
				}
				if lim := [3]int64{4, 6, 8}[c]; n > lim {
					bad.Store(fmt.Sprintf("%d callers of class %v and below inside, limit %d", n, p, lim))
				}
				time.Sleep(time.Duration(rng.IntN(20)) * time.Microsecond)
				inside[c].Add(-1)
				q.Release()
			}
		})
	}
	wg.Wait()
	if b := bad.Load(); b != nil {
		t.Error(b)
	}
	s := g.Stats()
	var admitted, shed uint64
	for c := range 3 {
		admitted += s.Classes[c].Admitted
		shed += s.Classes[c].Shed
	}
	if admitted != s.Admitted || shed != s.Shed || s.Admitted+s.Shed+s.TimedOut != 100*200 {
		t.Errorf("Stats = %+v for %d callers", s, 100*200)
	}
	for c := range 3 {
		if got := s.Classes[c].Admitted + s.Classes[c].Shed; got > tries[c].Load() {
			t.Errorf("class %d: %d counted, %d tried", c, got, tries[c].Load())
		}
	}
	if s.InFlight != 0 || s.Waiting != 0 || g.nwait.Load() != 0 {
		t.Errorf("after the storm: %+v, nwait %d", s, g.nwait.Load())
	}
}

// TestNewGateReservesPastMaxInt gives NewGate reserves that add up past
// math.MaxInt: it refuses them, naming the option, as it refuses any that
// leave no place for PrioritySheddable. A gate made from them would admit
// more callers than its size, and panic in SetMax.
func TestNewGateReservesPastMaxInt(t *testing.T) {
	for _, c := range []struct{ crit, def int }{
		{math.MaxInt, math.MaxInt},
		{math.MaxInt - 5, 10},
		{10, math.MaxInt},
		{math.MaxInt, 1},
	} {
		g, err := NewGate(10, WithReserve(PriorityCritical, c.crit), WithReserve(PriorityDefault, c.def))
		want := fmt.Sprintf("limits: invalid limit: WithReserve: %d places reserved in a gate of 10 leave none for PrioritySheddable", uint64(c.crit)+uint64(c.def))
		if err != nil {
			if g != nil || !errors.Is(err, errInvalidLimit) || err.Error() != want {
				t.Errorf("NewGate(10, WithReserve(critical, %d), WithReserve(default, %d)) = %v, %v, want the error %q", c.crit, c.def, g, err, want)
			}
			continue
		}
		t.Errorf("NewGate(10, WithReserve(critical, %d), WithReserve(default, %d)) made a gate, want the error %q", c.crit, c.def, want)
		admitted := 0
		for range 20 {
			if _, ok := g.TryEnterPriority(PrioritySheddable); ok {
				admitted++
			}
		}
		if admitted > 10 {
			t.Errorf("that gate admits %d sheddable callers, with Max %d", admitted, g.Stats().Max)
		}
		if p := catchPanic(func() { g.SetMax(40) }); p != nil {
			t.Errorf("that gate's SetMax(40) panics: %v", p)
		}
	}
}

// catchPanic runs f and returns what it panicked with, or nil.
func catchPanic(f func()) (p any) {
	defer func() { p = recover() }()
	f()
	return nil
}

// gateLimitsRef returns the class limits, lowest first, that WithReserve
// documents at a limit of m for a gate made with max0 and reserves crit
// and def, computed in big integers; and whether NewGate accepts that
// gate: max0 >= 1, and reserves >= 0 that add up to at most max0-1.
func gateLimitsRef(max0, crit, def, m int) (lim [3]int, ok bool) {
	b := func(n int) *big.Int { return big.NewInt(int64(n)) }
	sum := new(big.Int).Add(b(crit), b(def))
	if max0 < 1 || crit < 0 || def < 0 || sum.Cmp(new(big.Int).Sub(b(max0), b(1))) > 0 {
		return lim, false
	}
	// n*m/max0 rounded to the nearest place, halves up: (2*n*m + max0) /
	// (2*max0), at least 1 while n > 0.
	scale := func(n int) *big.Int {
		if n == 0 {
			return b(0)
		}
		q := new(big.Int).Mul(b(n), b(m))
		q.Lsh(q, 1).Add(q, b(max0))
		q.Quo(q, new(big.Int).Lsh(b(max0), 1))
		if q.Sign() == 0 {
			q.SetInt64(1)
		}
		return q
	}
	rc, rd := scale(crit), scale(def)
	// Cut the default reserve, then the critical one, to leave a place.
	if over := new(big.Int).Sub(new(big.Int).Add(rc, rd), b(m-1)); over.Sign() > 0 {
		cut := new(big.Int).Set(rd)
		if over.Cmp(rd) < 0 {
			cut.Set(over)
		}
		rd = new(big.Int).Sub(rd, cut)
		rc = new(big.Int).Sub(rc, new(big.Int).Sub(over, cut))
	}
	lim[2] = m
	lim[1] = int(new(big.Int).Sub(b(m), rc).Int64())
	lim[0] = int(new(big.Int).Sub(b(lim[1]), rd).Int64())
	return lim, true
}

// checkGateReserves makes a gate of max0 with reserves crit and def,
// which NewGate must accept exactly when gateLimitsRef does, and moves
// its limit to each of ms in turn: no call panics, the class limits are
// those WithReserve documents, and callers of the three classes in turn,
// each trying up to a few past the limit (64 at most), are admitted
// exactly while fewer than their class's limit are inside, and so never
// past Max. Half the callers inside stay through each change of limit.
func checkGateReserves(t *testing.T, max0, crit, def int, ms []int) {
	t.Helper()
	name := fmt.Sprintf("NewGate(%d, WithReserve(critical, %d), WithReserve(default, %d))", max0, crit, def)
	_, valid := gateLimitsRef(max0, crit, def, max0)
	var g *Gate
	var err error
	if p := catchPanic(func() { g, err = NewGate(max0, WithReserve(PriorityCritical, crit), WithReserve(PriorityDefault, def)) }); p != nil {
		t.Fatalf("%s panics: %v", name, p)
	}
	switch {
	case err != nil && valid:
		t.Fatalf("%s = %v, want a gate", name, err)
	case err == nil && !valid:
		t.Errorf("%s makes a gate, want an error", name)
	case err != nil:
		if !errors.Is(err, errInvalidLimit) {
			t.Errorf("%s = %v, want an error wrapping errInvalidLimit", name, err)
		}
		return
	}
	var held []*Permit
	defer func() {
		for _, q := range held {
			q.Release()
		}
	}()
	for i, m := range append([]int{max0}, ms...) {
		if i > 0 {
			if p := catchPanic(func() { g.SetMax(m) }); p != nil {
				t.Fatalf("%s: SetMax(%d) panics: %v", name, m, p)
			}
		}
		want, _ := gateLimitsRef(max0, crit, def, m)
		if got := classLimits(g); valid && got != want {
			t.Fatalf("%s at %d: class limits %v, want %v", name, m, got, want)
		}
		for j := range 3*min(m, 64) + 3 {
			p := Priority(j%3 - 1)
			before := g.InFlight()
			q, ok := g.TryEnterPriority(p)
			if valid && ok != (before < want[p+1]) {
				t.Fatalf("%s at %d, with %d inside: %v admitted %v, want %v", name, m, before, p, ok, !ok)
			}
			if ok {
				held = append(held, &q)
			}
			if s := g.Stats(); ok && s.InFlight > s.Max {
				t.Fatalf("%s at %d: %d inside, past Max %d", name, m, s.InFlight, s.Max)
			}
		}
		kept := held[:0]
		for k, q := range held {
			if k%2 == 0 {
				q.Release()
			} else {
				kept = append(kept, q)
			}
		}
		held = kept
	}
}

// TestGateReservesRandom runs checkGateReserves on random gates, reserves
// and limits, small and near math.MaxInt alike.
func TestGateReservesRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 6))
	size := func() int {
		switch rng.IntN(4) {
		case 0:
			return 1 + rng.IntN(64)
		case 1:
			return math.MaxInt - rng.IntN(64)
		case 2:
			return 1 << rng.IntN(63)
		}
		return 1 + rng.IntN(math.MaxInt)
	}
	reserve := func(max0 int) int {
		switch rng.IntN(7) {
		case 0:
			return 0
		case 1:
			return rng.IntN(min(max0, 64))
		case 2:
			return max(max0-1-rng.IntN(64), 0)
		case 3:
			return max0/2 + rng.IntN(3) - 1
		case 4:
			return math.MaxInt - rng.IntN(64)
		case 5:
			return -1 - rng.IntN(64)
		}
		return rng.IntN(math.MaxInt)
	}
	for range 2000 {
		max0 := size()
		crit, def := reserve(max0), reserve(max0)
		ms := make([]int, 4)
		for i := range ms {
			ms[i] = size()
		}
		checkGateReserves(t, max0, crit, def, ms)
		if t.Failed() {
			return
		}
	}
}

// FuzzGateReserves runs checkGateReserves on the gate, reserves and two
// limits given, a limit < 1 read as its bits below the sign, or 1.
func FuzzGateReserves(f *testing.F) {
	f.Add(10, math.MaxInt, math.MaxInt, 40, 10)
	f.Add(10, math.MaxInt-5, 10, 40, 1)
	f.Add(math.MaxInt, math.MaxInt-2, 1, math.MaxInt, 2)
	f.Add(math.MaxInt, math.MaxInt/2, math.MaxInt/2, math.MaxInt-1, 3)
	f.Add(60, 12, 6, 1<<62, math.MaxInt)
	f.Add(3, 1, 1, math.MaxInt, 1)
	f.Fuzz(func(t *testing.T, max0, crit, def, m1, m2 int) {
		ms := []int{m1, m2}
		for i, m := range ms {
			if m < 1 {
				ms[i] = max(m&math.MaxInt, 1)
			}
		}
		checkGateReserves(t, max0, crit, def, ms)
	})
}

// classStats is the type of an element of GateStats.Classes.
type classStats = struct {
	Priority Priority `json:"priority"`
	Limit    int      `json:"limit"`
	Admitted uint64   `json:"admitted"`
	Shed     uint64   `json:"shed"`
}

// TestGateSetSize changes a gate's size and reserves: a new size is the
// new maximum, and the same size keeps the maximum SetMax set.
func TestGateSetSize(t *testing.T) {
	g, err := NewGate(10)
	if err != nil {
		t.Fatal(err)
	}
	g.SetMax(6)
	if err := g.SetSize(10, WithReserve(PriorityCritical, 3)); err != nil {
		t.Fatal(err)
	}
	if s := g.Stats(); s.Max != 6 || s.Classes[1].Limit != 4 || s.Classes[2].Limit != 6 {
		t.Errorf("same size, new reserve: %+v", s)
	}
	if err := g.SetSize(20); err != nil {
		t.Fatal(err)
	}
	if s := g.Stats(); s.Max != 20 || s.Classes[0].Limit != 20 {
		t.Errorf("new size: %+v", s)
	}
	if err := g.SetSize(20, WithReserve(PriorityCritical, 20)); err == nil {
		t.Error("a reserve of the whole gate accepted")
	}
	if s := g.Stats(); s.Max != 20 || s.Classes[0].Limit != 20 {
		t.Errorf("a refused SetSize changed the gate: %+v", s)
	}
}
