package limits

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestGCRAWaitPaces checks that Wait returns at the first instant each
// request is allowed: at once for the burst, then one every T.
func TestGCRAWaitPaces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGCRA(10, time.Second, WithBurst(2)) // T = 100ms
		start := time.Now()
		var at []time.Duration
		for range 5 {
			if err := g.Wait(context.Background(), "host"); err != nil {
				t.Fatal(err)
			}
			at = append(at, time.Since(start))
		}
		want := []time.Duration{0, 0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond}
		for i := range want {
			if at[i] != want[i] {
				t.Errorf("request %d returned at %v, want %v", i, at[i], want[i])
			}
		}
		// Another key is not held up.
		if err := g.Wait(context.Background(), "other"); err != nil || time.Since(start) != 300*time.Millisecond {
			t.Errorf("another key: %v at %v", err, time.Since(start))
		}
	})
}

// TestGCRAWaitDeadline checks that a wait that would pass the context's
// deadline returns at once, and one that ends with its context returns
// then, both charging nothing.
func TestGCRAWaitDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGCRA(10, time.Second, WithBurst(1)) // T = 100ms
		g.Allow("k")
		before := g.Peek("k")
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := g.Wait(ctx, "k") // allowed at 100ms, the deadline itself: too late
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 0 {
			t.Errorf("Wait past the deadline: %v after %v, want an error at once", err, time.Since(start))
		}
		if after := g.Peek("k"); !sameDecision(after, before) {
			t.Errorf("a refused wait charged the key: %+v, want %+v", after, before)
		}
		ctx2, cancel2 := context.WithCancel(context.Background())
		go func() {
			time.Sleep(30 * time.Millisecond)
			cancel2()
		}()
		if err := g.Wait(ctx2, "k"); !errors.Is(err, context.Canceled) || time.Since(start) != 30*time.Millisecond {
			t.Errorf("Wait cancelled: %v after %v", err, time.Since(start))
		}
		if after := g.Peek("k"); after.Remaining != before.Remaining || after.ResetAfter != before.ResetAfter-30*time.Millisecond {
			t.Errorf("a cancelled wait charged the key: %+v", after)
		}
		ctx3, cancel3 := context.WithTimeout(context.Background(), time.Second)
		defer cancel3()
		if err := g.Wait(ctx3, "k"); err != nil || time.Since(start) != 100*time.Millisecond {
			t.Errorf("Wait within the deadline: %v at %v", err, time.Since(start))
		}
	})
}

func TestGCRAWaitRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGCRA(10, time.Second, WithBurst(2), WithMaxKeys(1))
		for _, n := range []int{3, -1} {
			if err := g.WaitN(context.Background(), "k", n); err == nil {
				t.Errorf("WaitN(%d): nil, want an error at once", n)
			}
		}
		g.AllowN("a", 2)
		if err := g.Wait(context.Background(), "b"); err == nil || err.Error() != "limits: Wait(n=1): table_full" {
			t.Errorf("Wait with the table full: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := g.Wait(ctx, "a"); !errors.Is(err, context.Canceled) {
			t.Errorf("Wait with an ended context: %v", err)
		}
		if err := g.WaitN(context.Background(), "a", 0); err != nil {
			t.Errorf("WaitN of 0: %v", err)
		}
	})
}

// TestGCRAWaitNeverMore has many goroutines wait on one key for a while
// and checks that exactly as many get through as the limit allows: the
// burst, then one per T.
func TestGCRAWaitNeverMore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGCRA(100, time.Second, WithBurst(5)) // T = 10ms
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		var mu sync.Mutex
		var times []time.Duration
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				for g.Wait(ctx, "k") == nil {
					mu.Lock()
					times = append(times, time.Since(start))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		// In [0, 1s): the burst of 5, then one each 10ms from 10ms: 99 more.
		if len(times) != 5+99 {
			t.Errorf("%d requests through in a second, want 104", len(times))
		}
		// And no window holds more than the burst plus one per T.
		slices.Sort(times)
		const T = 10 * time.Millisecond
		for i := range times {
			for j := i; j < len(times); j++ {
				if n, d := j-i+1, times[j]-times[i]; n > 5+int(d/T) {
					t.Fatalf("%d requests within %v", n, d)
				}
			}
		}
	})
}
