package quota

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	_ "time/tzdata"

	"github.com/limitsgo/limits"
)

func mustNew(t *testing.T, cfg Config) *Quota {
	t.Helper()
	q, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// sleepUntil moves the bubble's clock to t.
func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

func TestDaily(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		paris, err := time.LoadLocation("Europe/Paris")
		if err != nil {
			t.Fatal(err)
		}
		q := mustNew(t, Config{Limit: 3, Location: paris})
		sleepUntil(time.Date(2026, 6, 10, 22, 30, 0, 0, paris))
		for i := range 3 {
			d := q.Allow("k")
			if !d.Allowed || d.Remaining != 2-i || d.ResetAfter != 90*time.Minute || d.Period != 24*time.Hour || d.Limit != 3 {
				t.Fatalf("request %d: %+v", i, d)
			}
		}
		d := q.Allow("k")
		if d.Allowed || d.Reason != limits.ReasonRateLimited || d.RetryAfter != 90*time.Minute {
			t.Fatalf("over the quota: %+v, want refused until midnight in Paris, 90m", d)
		}
		// A nanosecond before midnight: still refused; at midnight: a new day.
		time.Sleep(d.RetryAfter - 1)
		if d := q.Allow("k"); d.Allowed || d.RetryAfter != 1 {
			t.Errorf("a nanosecond before midnight: %+v", d)
		}
		time.Sleep(time.Nanosecond)
		if d := q.Allow("k"); !d.Allowed || d.Remaining != 2 || d.ResetAfter != 24*time.Hour {
			t.Errorf("at midnight: %+v", d)
		}
		if q.Len() != 1 {
			t.Errorf("%d keys counted, want 1: yesterday's are gone", q.Len())
		}
	})
}

// TestClockChanges checks days of 23 and 25 hours: the period is the
// local day, however long, and the quota resets at local midnight.
func TestClockChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ny, err := time.LoadLocation("America/New_York")
		if err != nil {
			t.Fatal(err)
		}
		q := mustNew(t, Config{Limit: 1, Location: ny})
		for _, c := range []struct {
			day    time.Time
			length time.Duration
		}{
			{time.Date(2026, 3, 8, 0, 0, 0, 0, ny), 23 * time.Hour},  // clocks go forward
			{time.Date(2026, 11, 1, 0, 0, 0, 0, ny), 25 * time.Hour}, // and back
			{time.Date(2026, 11, 2, 0, 0, 0, 0, ny), 24 * time.Hour},
		} {
			sleepUntil(c.day.Add(30 * time.Minute))
			d := q.Allow("k")
			if !d.Allowed || d.Period != c.length || d.ResetAfter != c.length-30*time.Minute {
				t.Errorf("%v: %+v, want a day of %v", c.day, d, c.length)
			}
			if d := q.Allow("k"); d.Allowed || d.RetryAfter != c.length-30*time.Minute {
				t.Errorf("%v, again: %+v", c.day, d)
			}
		}
	})
}

func TestBounds(t *testing.T) {
	at := time.Date(2026, 12, 10, 15, 4, 5, 0, time.UTC) // a Thursday
	for _, c := range []struct {
		per        Calendar
		start, end time.Time
	}{
		{Day, time.Date(2026, 12, 10, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 11, 0, 0, 0, 0, time.UTC)},
		{Week, time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 14, 0, 0, 0, 0, time.UTC)},
		{Month, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		s, e := c.per.Bounds(at, time.UTC)
		if !s.Equal(c.start) || !e.Equal(c.end) {
			t.Errorf("%v: %v to %v, want %v to %v", c.per, s, e, c.start, c.end)
		}
	}
	// A Monday is its week's start, and a Sunday in its week.
	if s, _ := Week.Bounds(time.Date(2026, 12, 13, 23, 0, 0, 0, time.UTC), time.UTC); s.Day() != 7 {
		t.Errorf("Sunday's week starts %v", s)
	}
	if s, _ := Week.Bounds(time.Date(2026, 12, 14, 0, 0, 0, 0, time.UTC), time.UTC); s.Day() != 14 {
		t.Errorf("Monday's week starts %v", s)
	}
}

func TestCostsAndRefunds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := mustNew(t, Config{Limit: 10, Per: Month})
		ctx := context.Background()
		if d := q.AllowN("k", 11); d.Allowed || d.Reason != limits.ReasonCostAboveBurst || d.RetryAfter != 0 {
			t.Errorf("above the limit: %+v", d)
		}
		if d := q.AllowN("k", -1); d.Allowed || d.Reason != limits.ReasonInvalidCost {
			t.Errorf("negative: %+v", d)
		}
		a, b := q.AllowN("k", 3), q.AllowN("k", 4)
		// PeekN says what AllowN would, counting nothing.
		if d := q.PeekN("k", 3); !d.Allowed || d.Remaining != 3 || d.Cost != 3 {
			t.Errorf("PeekN(3) with 3 left: %+v", d)
		}
		if d := q.PeekN("k", 4); d.Allowed || d.Reason != limits.ReasonRateLimited || d.RetryAfter <= 0 {
			t.Errorf("PeekN(4) with 3 left: %+v", d)
		}
		c := q.AllowN("k", 3)
		if d := q.AllowN("k", 1); d.Allowed {
			t.Fatalf("over: %+v", d)
		}
		if d := q.AllowN("k", 0); !d.Allowed || d.Remaining != 0 {
			t.Errorf("a cost of 0 at the limit: %+v", d)
		}
		// Refunds in any order leave the key as it was.
		for _, d := range []limits.Decision{b, c, a} {
			q.Refund(ctx, "k", d)
		}
		if d := q.Peek("k"); !d.Allowed || d.Remaining != 10 {
			t.Errorf("after the refunds: %+v", d)
		}
		q.Refund(ctx, "k", a) // once too often: never below nothing
		if d := q.AllowN("k", 10); !d.Allowed {
			t.Errorf("the whole quota after: %+v", d)
		}
		// A refund of last month's charge gives nothing back this month.
		_, end := Month.Bounds(time.Now(), time.UTC)
		sleepUntil(end)
		d := q.AllowN("k", 10)
		q.Refund(ctx, "k", a)
		if p := q.Peek("k"); p.Allowed || !d.Allowed {
			t.Errorf("a refund of a past period: %+v", p)
		}
		// A lower limit keeps this period's count.
		if err := q.SetLimit(5); err != nil || q.Limit() != 5 {
			t.Fatal(err)
		}
		if d := q.Allow("j"); !d.Allowed || d.Remaining != 4 || d.Limit != 5 {
			t.Errorf("after SetLimit: %+v", d)
		}
		if err := q.SetLimit(0); err == nil {
			t.Error("SetLimit(0) accepted")
		}
	})
}

func TestTableFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := mustNew(t, Config{Limit: 1, MaxKeys: 100})
		for i := range 100 {
			if d := q.Allow(fmt.Sprint(i)); !d.Allowed {
				t.Fatalf("key %d: %+v", i, d)
			}
		}
		if d := q.Allow("new"); d.Reason != limits.ReasonTableFull {
			t.Errorf("a new key in a full table: %+v", d)
		}
		if d := q.Allow("7"); d.Reason != limits.ReasonRateLimited {
			t.Errorf("a known key in a full table: %+v", d)
		}
		// The next day, yesterday's keys make room, though their shards
		// are not used again.
		_, end := Day.Bounds(time.Now(), time.UTC)
		sleepUntil(end)
		for i := range 100 {
			if d := q.Allow(fmt.Sprint("new", i)); !d.Allowed {
				t.Fatalf("new key %d the next day: %+v", i, d)
			}
		}
		if q.Len() != 100 {
			t.Errorf("%d keys, want 100", q.Len())
		}
	})
}

// TestConcurrent has many goroutines spend and refund on few keys under
// -race: no key is ever allowed more than the limit in a period, and a
// key's count is what was allowed less what was given back.
func TestConcurrent(t *testing.T) {
	synctest.Test(t, testConcurrent)
}

func testConcurrent(t *testing.T) {
	q := mustNew(t, Config{Limit: 50})
	var mu sync.Mutex
	net := map[string]int{}
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 500 {
				k := fmt.Sprint(i % 7)
				n := 1 + (w+i)%3
				d := q.AllowN(k, n)
				if !d.Allowed {
					continue
				}
				if i%4 == 0 {
					q.Refund(context.Background(), k, d)
					continue
				}
				mu.Lock()
				net[k] += n
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for k, n := range net {
		if n > 50 {
			t.Errorf("%s: %d allowed and kept, above the limit", k, n)
		}
		if left := q.Peek(k).Remaining; left != 50-n {
			t.Errorf("%s: %d left, want %d", k, left, 50-n)
		}
	}
}

func TestNewErrors(t *testing.T) {
	for _, c := range []Config{{Limit: 0}, {Limit: 1, Per: 9}, {Limit: 1, MaxKeys: -1}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}
