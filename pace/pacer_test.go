package pace

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitsgo/limits"
)

func newPacer(t *testing.T, cfg Config) *Pacer {
	t.Helper()
	cfg.Prefix = "test"
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// departures runs n callers of key at once, each answering accepted as
// soon as it leaves, and returns when each left, from start, sorted.
func departures(t *testing.T, p *Pacer, key string, n int) []time.Duration {
	t.Helper()
	start := time.Now()
	var mu sync.Mutex
	var got []time.Duration
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			tk, err := p.Acquire(context.Background(), key, true)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			got = append(got, time.Since(start))
			mu.Unlock()
			p.Done(context.Background(), tk, Answer{Outcome: OutcomeAccepted}, false)
		})
	}
	wg.Wait()
	slices.Sort(got)
	return got
}

// atMost checks that no window of length w holds more than q of the
// sorted times ts (windows half open: [t, t+w)).
func atMost(t *testing.T, ts []time.Duration, q int, w time.Duration) {
	t.Helper()
	for i := range ts {
		j := i
		for j < len(ts) && ts[j] < ts[i]+w {
			j++
		}
		if j-i > q {
			t.Fatalf("%d departures within %v of %v, want at most %d: %v", j-i, w, ts[i], q, ts)
		}
	}
}

func TestPaceIsExact(t *testing.T) {
	for _, tc := range []struct {
		pace limits.Limit
		n    int
	}{
		{limits.Limit{Events: 10, Period: time.Second}, 25},
		{limits.Limit{Events: 3, Period: time.Second}, 10}, // 333333333.3ns apart
		{limits.Limit{Events: 7, Period: time.Minute}, 15},
	} {
		t.Run(tc.pace.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := newPacer(t, Config{Rate: tc.pace})
				got := departures(t, p, "k", tc.n)
				for k, d := range got {
					// Slot k leaves at ceil(k*Period/Events), no sooner, no later.
					num := int64(k) * int64(tc.pace.Period)
					want := time.Duration((num + int64(tc.pace.Events) - 1) / int64(tc.pace.Events))
					if d != want {
						t.Fatalf("departure %d at %v, want %v", k, d, want)
					}
				}
				atMost(t, got, tc.pace.Events, tc.pace.Period)
			})
		})
	}
}

func TestUnpacedGoesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, Config{})
		for _, d := range departures(t, p, "k", 20) {
			if d != 0 {
				t.Fatalf("an unpaced key held a request %v", d)
			}
		}
		if s := p.Stats(); s.Waited != 0 || s.Sent != 20 || s.Requests != 20 {
			t.Errorf("Stats = %+v, want 20 requests sent, none waiting", s)
		}
	})
}

// queue starts n callers of key, one after the other in the queue, and
// returns a channel of the times they leave, in the order of the queue
// (by their index).
func queue(t *testing.T, p *Pacer, key string, n int, answer func(i int) Answer) []chan time.Duration {
	t.Helper()
	start := time.Now()
	out := make([]chan time.Duration, n)
	for i := range n {
		out[i] = make(chan time.Duration, 1)
		go func() {
			tk, err := p.Acquire(context.Background(), key, true)
			if err != nil {
				t.Error(err)
				close(out[i])
				return
			}
			out[i] <- time.Since(start)
			var a Answer
			if answer != nil {
				a = answer(i)
			}
			p.Done(context.Background(), tk, a, false)
		}()
		synctest.Wait() // each in its turn
	}
	return out
}

func TestPauseResumesAtPace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, Config{Rate: limits.Limit{Events: 10, Period: time.Second}})
		// The first caller's answer asks for a 3s pause; eight callers
		// queued behind it then leave one every 100ms from the pause's end,
		// in the order they came.
		out := queue(t, p, "k", 9, func(i int) Answer {
			if i == 0 {
				return Answer{Outcome: OutcomeRefused, Pause: 3 * time.Second}
			}
			return Answer{Outcome: OutcomeAccepted}
		})
		if d := <-out[0]; d != 0 {
			t.Fatalf("first caller left at %v", d)
		}
		for i := 1; i < 9; i++ {
			want := 3*time.Second + time.Duration(i-1)*100*time.Millisecond
			if d := <-out[i]; d != want {
				t.Errorf("caller %d left at %v, want %v", i, d, want)
			}
		}
		if s := p.Stats(); s.Paused != 1 || s.Waited != 8 {
			t.Errorf("Stats = %+v, want 1 pause and 8 waits", s)
		}
	})
}

func TestUnpacedPauseHoldsUntilItsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, Config{})
		tk, _ := p.Acquire(context.Background(), "k", true)
		p.Done(context.Background(), tk, Answer{Outcome: OutcomeRefused, Pause: 2 * time.Second}, false)
		for _, d := range departures(t, p, "k", 5) {
			if d != 2*time.Second {
				t.Fatalf("a request left at %v of a pause of 2s", d)
			}
		}
	})
}

func TestDeadlineShorterThanPauseFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, Config{Rate: limits.Limit{Events: 10, Period: time.Second}})
		tk, _ := p.Acquire(context.Background(), "k", true)
		p.Done(context.Background(), tk, Answer{Outcome: OutcomeRefused, Pause: 5 * time.Second}, false)

		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		_, err := p.Acquire(ctx, "k", true)
		if time.Since(start) != 0 {
			t.Errorf("failed after %v, want at once", time.Since(start))
		}
		var we *WaitError
		if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &we) || !we.Paused || we.Wait != 5*time.Second {
			t.Fatalf("err = %v, want a WaitError for the pause of 5s wrapping context.DeadlineExceeded", err)
		}
		if !strings.Contains(err.Error(), "pause") {
			t.Errorf("error %q does not say it is the pause", err)
		}
		if s := p.Stats(); s.DeadlineExceeded != 1 {
			t.Errorf("DeadlineExceeded = %d, want 1", s.DeadlineExceeded)
		}
	})
}

func TestDeadlineShorterThanPaceFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, Config{Rate: limits.Limit{Events: 10, Period: time.Second}})
		queue(t, p, "k", 20, nil) // the last leaves at 1.9s
		ctx, cancel := context.WithTimeout(context.Background(), 1950*time.Millisecond)
		defer cancel()
		_, err := p.Acquire(ctx, "k", true) // would leave at 2s
		var we *WaitError
		if !errors.As(err, &we) || we.Paused || we.Wait != 2*time.Second || !strings.Contains(err.Error(), "pace") {
			t.Fatalf("err = %v, want a WaitError for the pace, a wait of 2s", err)
		}
		// One that fits waits its turn.
		ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel2()
		start := time.Now()
		if _, err := p.Acquire(ctx2, "k", true); err != nil || time.Since(start) != 2*time.Second {
			t.Fatalf("Acquire = %v after %v, want nil after 2s", err, time.Since(start))
		}
	})
}

func TestPauseFailsWaitersPastTheirDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, Config{Rate: limits.Limit{Events: 10, Period: time.Second}})
		first, _ := p.Acquire(context.Background(), "k", true)
		start := time.Now()
		errs := make(chan error, 6)
		for i := range 6 {
			// Three with a deadline of 1s, three without, alternating.
			ctx := context.Background()
			if i%2 == 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Second)
				defer cancel()
			}
			go func() {
				tk, err := p.Acquire(ctx, "k", true)
				if err == nil {
					p.Done(ctx, tk, Answer{Outcome: OutcomeAccepted}, false)
				}
				errs <- err
			}()
			synctest.Wait()
		}
		// The pause comes while they wait: the ones with a deadline fail
		// at once; the others keep their order and leave at its end.
		p.Done(context.Background(), first, Answer{Outcome: OutcomeRefused, Pause: 4 * time.Second}, false)
		for range 3 {
			if err := <-errs; !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 0 {
				t.Fatalf("err = %v after %v, want DeadlineExceeded at once", err, time.Since(start))
			}
		}
		for i := range 3 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
			if want := 4*time.Second + time.Duration(i)*100*time.Millisecond; time.Since(start) != want {
				t.Errorf("waiter %d left at %v, want %v", i, time.Since(start), want)
			}
		}
	})
}

func TestCancelledWaiterLeavesNoGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, Config{Rate: limits.Limit{Events: 10, Period: time.Second}})
		start := time.Now()
		p.Acquire(context.Background(), "k", true)
		ctx, cancel := context.WithCancel(context.Background())
		got := make(chan error, 1)
		go func() {
			_, err := p.Acquire(ctx, "k", true)
			got <- err
		}()
		synctest.Wait()
		out := make(chan time.Duration, 1)
		go func() {
			p.Acquire(context.Background(), "k", true)
			out <- time.Since(start)
		}()
		synctest.Wait()
		cancel()
		if err := <-got; !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want Canceled", err)
		}
		if d := <-out; d != 100*time.Millisecond {
			t.Errorf("the caller behind a cancelled one left at %v, want 100ms", d)
		}
	})
}

func TestQuotaCountsRequestsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, Config{})
		ctx := context.Background()
		var tks []Ticket
		for range 3 {
			tk, _ := p.Acquire(ctx, "k", true)
			tks = append(tks, tk)
		}
		// The answer to the first says 3 left for 10s; two were sent since,
		// so one is left.
		p.Done(ctx, tks[0], Answer{Outcome: OutcomeAccepted, HasLeft: true, Left: 3, Reset: 10 * time.Second}, false)
		// An older answer, come late, says nothing new.
		start := time.Now()
		if _, err := p.Acquire(ctx, "k", true); err != nil || time.Since(start) != 0 {
			t.Fatalf("the request left: %v after %v", err, time.Since(start))
		}
		if _, err := p.Acquire(ctx, "k", true); err != nil || time.Since(start) != 10*time.Second {
			t.Fatalf("the request over the quota: %v after %v, want to wait for the reset, 10s", err, time.Since(start))
		}
	})
}

func TestStaleQuotaIsIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, Config{})
		ctx := context.Background()
		a, _ := p.Acquire(ctx, "k", true)
		b, _ := p.Acquire(ctx, "k", true)
		p.Done(ctx, b, Answer{Outcome: OutcomeAccepted, HasLeft: true, Left: 5, Reset: 10 * time.Second}, false)
		// a's answer is older than b's: its r=0 is out of date.
		p.Done(ctx, a, Answer{Outcome: OutcomeAccepted, HasLeft: true, Left: 0, Reset: 10 * time.Second}, false)
		start := time.Now()
		if _, err := p.Acquire(ctx, "k", true); err != nil || time.Since(start) != 0 {
			t.Fatalf("Acquire: %v after %v, want at once", err, time.Since(start))
		}
	})
}

func TestLearntPaceReplacesTheDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, Config{Rate: limits.Limit{Events: 100, Period: time.Second}})
		ctx := context.Background()
		tk, _ := p.Acquire(ctx, "k", true)
		p.Done(ctx, tk, Answer{Outcome: OutcomeAccepted, Quota: 4, Window: time.Second}, false)
		got := departures(t, p, "k", 5)
		// The old pace's next slot was at 10ms, but the new pace counts
		// from the last request, at 0: 250ms apart from it.
		want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, 750 * time.Millisecond, time.Second, 1250 * time.Millisecond}
		if !slices.Equal(got, want) {
			t.Errorf("departures %v, want %v", got, want)
		}
		// A faster pace starts at the old pace's next slot.
		tk, _ = p.Acquire(ctx, "k", true) // at 1.5s, next at 1.75s
		p.Done(ctx, tk, Answer{Outcome: OutcomeAccepted, Quota: 10, Window: time.Second}, false)
		got = departures(t, p, "k", 3)
		want = []time.Duration{250 * time.Millisecond, 350 * time.Millisecond, 450 * time.Millisecond}
		if !slices.Equal(got, want) {
			t.Errorf("after a faster pace: departures %v, want %v", got, want)
		}
		// Another key keeps the default.
		if got := departures(t, p, "other", 2); got[1] != 10*time.Millisecond {
			t.Errorf("other key: %v", got)
		}
	})
}

func TestBackoffDoubles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, Config{})
		ctx := context.Background()
		var waits []time.Duration
		for range 9 {
			start := time.Now()
			tk, _ := p.Acquire(ctx, "k", true)
			waits = append(waits, time.Since(start))
			p.Done(ctx, tk, Answer{Outcome: OutcomeRefused, Backoff: true}, false)
		}
		want := []time.Duration{0, 1, 2, 4, 8, 16, 32, 60, 60}
		for i := range want {
			want[i] *= time.Second
		}
		if !slices.Equal(waits, want) {
			t.Errorf("waits %v, want %v", waits, want)
		}
		// An accepted answer ends the run.
		start := time.Now()
		tk, _ := p.Acquire(ctx, "k", true)
		p.Done(ctx, tk, Answer{Outcome: OutcomeAccepted}, false)
		tk, _ = p.Acquire(ctx, "k", true)
		p.Done(ctx, tk, Answer{Outcome: OutcomeRefused, Backoff: true}, false)
		if _, _ = p.Acquire(ctx, "k", true); time.Since(start) != time.Minute+time.Second {
			t.Errorf("after an accepted answer, the backoff is %v, want 1s", time.Since(start)-time.Minute)
		}
	})
}

func TestRetryBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, Config{RetryTokens: 2, RetryRatio: 0.5})
		ctx := context.Background()
		refuse := Answer{Outcome: OutcomeRefused}
		try := func() bool {
			tk, _ := p.Acquire(ctx, "k", true)
			return p.Done(ctx, tk, refuse, true)
		}
		accept := func() {
			tk, _ := p.Acquire(ctx, "k", true)
			p.Done(ctx, tk, Answer{Outcome: OutcomeAccepted}, false)
		}
		if got := []bool{try(), try(), try()}; !slices.Equal(got, []bool{true, true, false}) {
			t.Fatalf("retries granted %v, want the 2 tokens then none", got)
		}
		accept()
		if try() {
			t.Fatal("half a token granted a retry")
		}
		accept()
		if !try() {
			t.Fatal("two accepted answers at 0.5 did not give a token back")
		}
		if s := p.Stats(); s.Retries != 3 || s.RetryBudgetSpent != 2 {
			t.Errorf("Stats = %+v, want 3 retries and 2 refused for the budget", s)
		}
		// Another key has its own budget.
		tk, _ := p.Acquire(ctx, "other", true)
		if !p.Done(ctx, tk, refuse, true) {
			t.Error("another key's budget is spent too")
		}
		// The server forbade retrying.
		tk, _ = p.Acquire(ctx, "other", true)
		if p.Done(ctx, tk, Answer{Outcome: OutcomeRefused, NoRetry: true}, true) {
			t.Error("retry granted against NoRetry")
		}
	})
}

func TestRetryOnlyBeforeTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, Config{MaxRetryWait: 10 * time.Second})
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		tk, _ := p.Acquire(ctx, "k", true)
		if p.Done(ctx, tk, Answer{Outcome: OutcomeRefused, Pause: 5 * time.Second}, true) {
			t.Error("retry granted past the deadline")
		}
		tk, _ = p.Acquire(context.Background(), "j", true)
		if p.Done(context.Background(), tk, Answer{Outcome: OutcomeRefused, Pause: 11 * time.Second}, true) {
			t.Error("retry granted past MaxRetryWait")
		}
		tk, _ = p.Acquire(ctx, "i", true)
		if !p.Done(ctx, tk, Answer{Outcome: OutcomeRefused, Pause: 2 * time.Second}, true) {
			t.Error("retry refused within the deadline")
		}
		if s := p.Stats(); s.Retries != 1 || s.RetryBudgetSpent != 0 {
			t.Errorf("Stats = %+v, want 1 retry", s)
		}
	})
}

func TestThrottleProbability(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var roll float64
		p := newPacer(t, Config{Throttle: 2, ThrottleWindow: time.Minute, Rand: func() float64 { return roll }})
		ctx := context.Background()
		send := func(a Outcome) {
			roll = 1 // never refuses
			tk, err := p.Acquire(ctx, "k", true)
			if err != nil {
				t.Fatal(err)
			}
			p.Done(ctx, tk, Answer{Outcome: a}, false)
		}
		for range 2 {
			send(OutcomeAccepted)
		}
		for range 8 {
			send(OutcomeRefused)
		}
		// 10 requests, 2 accepts: p = (10 - 2*2) / 11 = 6/11 = 0.5454...
		roll = 0.55
		if _, err := p.Acquire(ctx, "k", true); err != nil {
			t.Fatalf("refused at a roll of 0.55 > 6/11: %v", err)
		}
		// That request is in flight and not yet counted.
		roll = 0.54
		if _, err := p.Acquire(ctx, "k", true); err != p.throttled {
			t.Fatalf("err = %v at a roll of 0.54 < 6/11, want a local refusal", err)
		}
		// Now 11 requests (the refusal counts), 2 accepts: p = 7/12.
		roll = 7.0/12 - 1e-9
		if _, err := p.Acquire(ctx, "k", true); err != p.throttled {
			t.Fatalf("err = %v, want a local refusal", err)
		}
		// Half a window later, the first window's counts weigh half:
		// 12 requests, 2 accepts, in the current window... still there.
		time.Sleep(90 * time.Second) // the first window is the previous one, half gone
		// prev = 12 req, 2 acc weighted 0.5: p = (6 - 2) / 7 = 4/7.
		roll = 4.0/7 + 1e-9
		if _, err := p.Acquire(ctx, "k", true); err != nil {
			t.Fatalf("refused at a roll just above 4/7: %v", err)
		}
		time.Sleep(3 * time.Minute) // everything gone
		roll = 0
		if _, err := p.Acquire(ctx, "k", true); err != nil {
			t.Fatalf("refused with no history: %v", err)
		}
		if s := p.Stats(); s.Throttled != 2 {
			t.Errorf("Throttled = %d, want 2", s.Throttled)
		}
	})
}

func TestTableFailsClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const max = 10_000
		p := newPacer(t, Config{MaxKeys: max, Rate: limits.Limit{Events: 1, Period: time.Second}})
		ctx := context.Background()
		for i := range max {
			tk, err := p.Acquire(ctx, fmt.Sprint(i), true)
			if err != nil {
				t.Fatalf("key %d: %v", i, err)
			}
			p.Done(ctx, tk, Answer{Outcome: OutcomeAccepted}, false)
		}
		// Every key's next slot is a second away: all in use.
		_, err := p.Acquire(ctx, "new", true)
		if err == nil || !strings.Contains(err.Error(), "table full") {
			t.Fatalf("err = %v, want table full", err)
		}
		// An old key is still served, in its turn.
		tk, err := p.Acquire(ctx, "17", true)
		if err != nil {
			t.Fatal(err)
		}
		p.Done(ctx, tk, Answer{Outcome: OutcomeAccepted}, false)
		// Now all but key 17 are out of use; a new key takes a place.
		if _, err := p.Acquire(ctx, "new", true); err != nil {
			t.Fatalf("after a second: %v", err)
		}
		if s := p.Stats(); s.TableFull != 1 || s.Keys != max {
			t.Errorf("Stats = %+v, want 1 refusal, %d keys", s, max)
		}
	})
}

func TestTableKeepsKeysInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, Config{MaxKeys: 2, Throttle: 2})
		ctx := context.Background()
		a, _ := p.Acquire(ctx, "a", true)
		b, _ := p.Acquire(ctx, "b", true)
		time.Sleep(time.Hour)
		if _, err := p.Acquire(ctx, "c", true); err == nil {
			t.Fatal("a key in flight was dropped")
		}
		p.Done(ctx, a, Answer{Outcome: OutcomeAccepted}, false)
		if _, err := p.Acquire(ctx, "c", true); err != nil {
			t.Fatalf("the idle key made no room: %v", err)
		}
		// With throttling, a refusal's history is kept for two windows.
		p.Done(ctx, b, Answer{Outcome: OutcomeRefused}, false)
		time.Sleep(2*DefaultThrottleWindow - time.Second)
		if _, err := p.Acquire(ctx, "d", true); err == nil {
			t.Fatal("a key with a recent refusal was dropped")
		}
		time.Sleep(time.Second)
		if _, err := p.Acquire(ctx, "d", true); err != nil {
			t.Fatalf("b's history has expired, yet d found no place: %v", err)
		}
		if _, err := p.Acquire(ctx, "e", true); err == nil {
			t.Fatal("c and d are in flight, yet e found a place")
		}
	})
}

func TestManyCallersManyKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, Config{Rate: limits.Limit{Events: 20, Period: time.Second}, MaxKeys: 4})
		start := time.Now()
		var mu sync.Mutex
		times := map[string][]time.Duration{}
		var wg sync.WaitGroup
		for i := range 200 {
			key := fmt.Sprint(i % 4)
			wg.Go(func() {
				time.Sleep(time.Duration(i%7) * 30 * time.Millisecond)
				for range 3 {
					tk, err := p.Acquire(context.Background(), key, true)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					times[key] = append(times[key], time.Since(start))
					mu.Unlock()
					a := Answer{Outcome: OutcomeAccepted}
					if i == 100 {
						a = Answer{Outcome: OutcomeRefused, Pause: time.Second}
					}
					p.Done(context.Background(), tk, a, false)
				}
			})
		}
		wg.Wait()
		for key, ts := range times {
			if len(ts) != 150 {
				t.Errorf("key %s: %d departures, want 150", key, len(ts))
			}
			slices.Sort(ts)
			atMost(t, ts, 1, 50*time.Millisecond)
		}
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Rate: limits.Limit{Events: 0, Period: time.Second}},
		{MaxKeys: -1},
		{RetryTokens: -1},
		{RetryRatio: -0.1},
		{MaxRetryWait: -1},
		{Throttle: 0.5},
		{Throttle: -1},
		{ThrottleWindow: -1},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) = nil error", cfg)
		}
	}
}
