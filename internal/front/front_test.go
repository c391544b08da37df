package front

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitsgo/limits"
)

// slow is a limiter that answers after a delay, ignoring its context, and
// records the refunds it is asked for.
type slow struct {
	delay    time.Duration
	mu       sync.Mutex
	refunded []limits.Decision
}

func (s *slow) Take(_ context.Context, key string, n int) (limits.Decision, error) {
	time.Sleep(s.delay)
	return limits.Decision{Allowed: true, Cost: n}, nil
}

func (s *slow) Refund(_ context.Context, key string, d limits.Decision) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refunded = append(s.refunded, d)
	return nil
}

func TestRateTakeBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &slow{delay: time.Second}
		r, err := NewRate("p", l, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = r.Take(context.Background(), "k", 2)
		if !errors.Is(err, ErrLimiterTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Take of a limiter past its timeout: %v", err)
		}
		if d := time.Since(start); d != 100*time.Millisecond {
			t.Errorf("Take returned after %v, want the 100ms timeout", d)
		}
		// The limiter allowed the request after the caller gave up: its
		// charge is given back.
		time.Sleep(time.Second)
		synctest.Wait()
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.refunded) != 1 || l.refunded[0].Cost != 2 {
			t.Errorf("refunds after a late answer: %+v, want the one charge of 2", l.refunded)
		}
	})
}

func TestRateTakeInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &slow{delay: 10 * time.Millisecond}
		r, _ := NewRate("p", l, 0)
		if r.Timeout != DefaultLimiterTimeout {
			t.Errorf("default timeout %v", r.Timeout)
		}
		c, err := r.Take(context.Background(), "k", 1)
		if err != nil || !c.Dec.Allowed {
			t.Errorf("Take: %+v, %v", c.Dec, err)
		}
		synctest.Wait()
		if len(l.refunded) != 0 {
			t.Errorf("an answer in time was refunded: %+v", l.refunded)
		}
		// The caller's own context ends first.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := r.Take(ctx, "k", 1); !errors.Is(err, context.Canceled) {
			t.Errorf("Take with a cancelled context: %v", err)
		}
		time.Sleep(time.Second) // until the abandoned call returns
		synctest.Wait()
		if len(l.refunded) != 1 {
			t.Errorf("refunds after an abandoned call: %+v", l.refunded)
		}
	})
}

func TestRateLocal(t *testing.T) {
	g := limits.NewGCRA(2, time.Hour)
	r, _ := NewRate("p", g, 0)
	c, err := r.Take(context.Background(), "k", 2)
	if err != nil || !c.Dec.Allowed {
		t.Fatalf("Take: %+v, %v", c.Dec, err)
	}
	if err := c.Refund(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p := g.Peek("k"); p.Remaining != 2 {
		t.Errorf("after a refund: %+v", p)
	}
	if _, err := NewRate("café", g, 0); err == nil {
		t.Error("a name that cannot be sent in a header was accepted")
	}
}

func TestSlots(t *testing.T) {
	s := NewSlots(2, 3)
	for _, k := range []string{"a", "a", "b", "c"} {
		if r := s.Acquire(k); r != "" {
			t.Fatalf("Acquire(%s): %s", k, r)
		}
	}
	if r := s.Acquire("a"); r != ReasonConcurrencyLimited {
		t.Errorf("a third for a: %q", r)
	}
	if r := s.Acquire("d"); r != ReasonConcurrencyTableFull {
		t.Errorf("a fourth client: %q", r)
	}
	s.Release("c")
	if r := s.Acquire("d"); r != "" || s.Len() != 3 {
		t.Errorf("after c left: %q, %d clients", r, s.Len())
	}
	s.Release("a")
	s.Release("a")
	s.Release("a") // one too many: nothing to give back
	if s.Len() != 2 {
		t.Errorf("%d clients after a left", s.Len())
	}
}

// TestSlotsConcurrent checks the counts against a locked model, with many
// goroutines acquiring and releasing over few clients under -race.
func TestSlotsConcurrent(t *testing.T) {
	const max = 3
	s := NewSlots(max, 1000)
	var mu sync.Mutex
	held := map[string]int{}
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 2000 {
				k := fmt.Sprint(i % 5)
				if s.Acquire(k) != "" {
					continue
				}
				mu.Lock()
				held[k]++
				if held[k] > max {
					t.Errorf("worker %d: %s holds %d, more than %d", w, k, held[k], max)
				}
				held[k]--
				mu.Unlock()
				s.Release(k)
			}
		})
	}
	wg.Wait()
	if s.Len() != 0 {
		t.Errorf("%d clients left holding requests", s.Len())
	}
}

func TestReasonOf(t *testing.T) {
	for r, want := range map[limits.Reason]string{
		limits.ReasonRateLimited: ReasonRateLimited, limits.ReasonTableFull: ReasonTableFull,
		limits.ReasonCostAboveBurst: ReasonCostAboveBurst, limits.ReasonInvalidCost: ReasonInvalidCost,
		limits.ReasonUnavailable: ReasonLimiterError,
	} {
		if got := ReasonOf(limits.Decision{Reason: r}); got != want {
			t.Errorf("ReasonOf(%v) = %q, want %q", r, got, want)
		}
	}
}

// TestRatePre checks the limiter in front: a request it refuses never
// reaches the other, and what it charged is given back when the other
// refuses, or by a refund.
func TestRatePre(t *testing.T) {
	ctx := context.Background()
	shared := limits.NewGCRA(3, time.Hour)
	calls := &counting{Limiter: shared}
	r, _ := NewRate("p", calls, 0)
	r.Pre = limits.NewGCRA(2, time.Hour)
	for i, want := range []bool{true, true, false, false} {
		c, err := r.Take(ctx, "k", 1)
		if err != nil || c.Dec.Allowed != want {
			t.Fatalf("request %d: %+v, %v", i, c.Dec, err)
		}
	}
	if calls.n != 2 {
		t.Errorf("the shared limiter was asked %d times, want 2: the local one refused the rest", calls.n)
	}
	// The shared limiter refuses: the local charge is given back.
	shared.AllowN("j", 3)
	if c, _ := r.Take(ctx, "j", 1); c.Dec.Allowed {
		t.Fatalf("shared refusal: %+v", c.Dec)
	}
	if p := r.Pre.Peek("j"); p.Remaining != 2 {
		t.Errorf("local bucket after a shared refusal: %+v, want it whole", p)
	}
	// A refund gives back both charges.
	c, _ := r.Take(ctx, "m", 2)
	c.Refund(ctx)
	if p, q := r.Pre.Peek("m"), shared.Peek("m"); p.Remaining != 2 || q.Remaining != 3 {
		t.Errorf("after a refund: local %d, shared %d remaining", p.Remaining, q.Remaining)
	}
}

// counting is a Limiter that counts the calls of Take.
type counting struct {
	limits.Limiter
	n int
}

func (c *counting) Take(ctx context.Context, key string, n int) (limits.Decision, error) {
	c.n++
	return c.Limiter.Take(ctx, key, n)
}

// refusedAtDeadline is a limiter with a timeout of its own, as a remote
// one has, whose store refuses connections: it keeps trying until its
// deadline, then returns the cause.
type refusedAtDeadline struct{ timeout time.Duration }

func (l refusedAtDeadline) Take(ctx context.Context, _ string, _ int) (limits.Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	<-ctx.Done()
	return limits.Decision{}, fmt.Errorf("store unavailable: %w, connecting failed: dial tcp 127.0.0.1:6379: %w", ctx.Err(), syscall.ECONNREFUSED)
}

func (refusedAtDeadline) Refund(context.Context, string, limits.Decision) error { return nil }

// TestRateTakeKeepsCause checks that when the bound of a limiter call and
// the limiter's own timeout end together, the error is the limiter's,
// with its cause, not the bound's.
func TestRateTakeKeepsCause(t *testing.T) {
	for _, timeout := range []time.Duration{100 * time.Millisecond, time.Millisecond, time.Second} {
		synctest.Test(t, func(t *testing.T) {
			r, _ := NewRate("p", refusedAtDeadline{timeout}, timeout)
			for i := range 50 {
				start := time.Now()
				_, err := r.Take(context.Background(), "k", 1)
				if !errors.Is(err, syscall.ECONNREFUSED) || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("timeout %v, call %d: %v, want the limiter's error", timeout, i, err)
				}
				if d := time.Since(start); d > timeout {
					t.Fatalf("timeout %v, call %d: returned after %v", timeout, i, d)
				}
			}
		})
	}
}
