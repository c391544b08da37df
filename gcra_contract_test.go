package limits

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestGCRAExactArithmetic checks decisions where the emission interval is
// not a whole number of nanoseconds: 7 a minute lets exactly 7 through at
// an instant, and 3 in 10 seconds is back to its full burst exactly 10
// seconds after 3 requests, not a nanosecond later.
func TestGCRAExactArithmetic(t *testing.T) {
	g := NewGCRA(7, time.Minute)
	now := g.start.Add(time.Hour)
	for i := range 7 {
		if d := g.AllowNAt(now, "k", 1); !d.Allowed {
			t.Fatalf("request %d of 7 at one instant refused: %+v", i+1, d)
		}
	}
	if d := g.AllowNAt(now, "k", 1); d.Allowed {
		t.Fatalf("an 8th request allowed")
	}
	// Exactly one more each 60/7 s: at 60 s the whole burst is back.
	if d := g.PeekAt(now.Add(time.Minute), "k"); d.Remaining != 7 || d.ResetAfter != 0 {
		t.Errorf("a minute later: %+v, want the whole burst back", d)
	}
	// Requests at exact minute boundaries, 7 each time: all allowed.
	for m := 1; m <= 5; m++ {
		at := now.Add(time.Duration(m) * time.Minute)
		for i := range 7 {
			if d := g.AllowNAt(at, "k", 1); !d.Allowed {
				t.Fatalf("minute %d, request %d refused: %+v", m, i+1, d)
			}
		}
	}

	g = NewGCRA(3, 10*time.Second)
	now = g.start.Add(time.Hour)
	var d Decision
	for range 3 {
		d = g.AllowNAt(now, "k", 1)
	}
	if !d.Allowed || d.ResetAfter != 10*time.Second {
		t.Errorf("3 of 3/10s: %+v, want ResetAfter exactly 10s", d)
	}
	d = g.AllowNAt(now, "k", 1)
	// The 4th is allowed once one emission interval, 10/3 s, has passed:
	// 3333333333.33... ns, so at 3333333334 ns and not 1 ns before.
	if d.Allowed || d.RetryAfter != 3333333334 {
		t.Errorf("4th of 3/10s: %+v, want RetryAfter 3333333334ns", d)
	}
	if g.AllowNAt(now.Add(d.RetryAfter-1), "k", 1).Allowed || !g.AllowNAt(now.Add(d.RetryAfter), "k", 1).Allowed {
		t.Errorf("RetryAfter %v is not exact", d.RetryAfter)
	}
}

// TestGCRAAllowNAtBeforeState dates requests before the key's latest
// state: a cost of 0 is still allowed, refusals that waiting cannot cure
// carry no RetryAfter, and a refused request is allowed exactly RetryAfter
// after the time it was judged at.
func TestGCRAAllowNAtBeforeState(t *testing.T) {
	g := NewGCRA(10, time.Second, WithBurst(2)) // T = 100ms
	now := g.start.Add(time.Hour)
	g.AllowNAt(now, "k", 2)
	back := now.Add(-time.Minute)
	if d := g.AllowNAt(back, "k", 0); !d.Allowed || d.RetryAfter != 0 {
		t.Errorf("cost 0 dated a minute back: %+v, want allowed", d)
	}
	for _, n := range []int{3, -1} {
		if d := g.AllowNAt(back, "k", n); d.Allowed || d.RetryAfter != 0 {
			t.Errorf("cost %d dated a minute back: %+v, want RetryAfter 0", n, d)
		}
	}
	if d := g.PeekAt(back, "k"); d.Allowed || d.RetryAfter != 100*time.Millisecond || d.ResetAfter != 200*time.Millisecond {
		t.Errorf("Peek dated a minute back: %+v, want judged at the state's time", d)
	}
}

// TestGCRADecisionsUnderContention has many goroutines hammer a few keys
// with random costs and checks every Decision against what must hold of
// it whatever the interleaving: cost 0 is allowed, refusals other than
// rate_limited carry RetryAfter 0, and RetryAfter and ResetAfter are
// within what the policy allows.
func TestGCRADecisionsUnderContention(t *testing.T) {
	g := NewGCRA(1000, time.Second, WithBurst(4)) // T = 1ms, 4ms of burst
	T, D := time.Millisecond, 4*time.Millisecond
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	report := func(format string, args ...any) {
		mu.Lock()
		if len(bad) < 10 {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
		mu.Unlock()
	}
	for w := range 16 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 10))
			for range 4000 {
				k := fmt.Sprint(rng.IntN(3))
				n := rng.IntN(7) - 1 // -1 to 5: invalid, 0, within and above the burst
				d := g.AllowN(k, n)
				switch {
				case n == 0 && !d.Allowed:
					report("cost 0 refused: %+v", d)
				case d.Reason != ReasonRateLimited && d.RetryAfter != 0:
					report("cost %d, %v with RetryAfter %v", n, d.Reason, d.RetryAfter)
				case d.Reason == ReasonRateLimited && (d.RetryAfter <= 0 || d.RetryAfter > time.Duration(n)*T):
					report("cost %d refused with RetryAfter %v, outside (0, %v]", n, d.RetryAfter, time.Duration(n)*T)
				case d.ResetAfter < 0 || d.ResetAfter > D:
					report("cost %d: ResetAfter %v outside [0, %v]", n, d.ResetAfter, D)
				}
			}
		})
	}
	wg.Wait()
	for _, b := range bad {
		t.Error(b)
	}
}

// TestGCRARefund checks that a refund gives back exactly what a charge
// took, and never more than the key owes.
func TestGCRARefund(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGCRA(10, time.Second, WithBurst(3)) // T = 100ms
		ctx := context.Background()
		g.AllowN("k", 2)
		before := g.Peek("k")
		d := g.AllowN("k", 1)
		g.Refund(ctx, "k", d)
		if after := g.Peek("k"); !sameDecision(after, before) {
			t.Errorf("after a charge and its refund: %+v, want %+v", after, before)
		}
		// A charge whose time has passed is owed no more.
		first := g.AllowN("k", 1) // the key now owes 300ms
		time.Sleep(300 * time.Millisecond)
		g.Refund(ctx, "k", first)
		if d := g.AllowN("k", 3); !d.Allowed {
			t.Errorf("after its charges passed: %+v", d)
		}
		if d := g.AllowN("k", 1); d.Allowed {
			t.Errorf("a late refund credited the key: %+v", d)
		}
		// Refusals and costs of 0 give back nothing.
		refused := g.AllowN("k", 1)
		g.Refund(ctx, "k", refused)
		g.Refund(ctx, "k", g.AllowN("k", 0))
		if d := g.Peek("k"); d.Allowed {
			t.Errorf("a refund of a refusal credited the key: %+v", d)
		}
		// Refunding a key the table does not hold adds nothing.
		n := g.Len()
		g.Refund(ctx, "absent", d)
		if g.Len() != n {
			t.Errorf("Len %d after refunding an absent key, want %d", g.Len(), n)
		}
	})
}
