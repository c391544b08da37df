package redislimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	_ "time/tzdata"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/quota"
	"github.com/limitsgo/limits/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// The tests of a Quota that need a given time run it on a test clock: the
// scripts then take the server's time from their last two arguments in
// place of TIME (fixedClock), and the client's clock is the test's too.
// The times are years ahead, so that Redis, which expires keys on its own
// clock, keeps every count the test writes.

// fixedClock is quotaClock's stand-in for the tests: the time the Quota
// sends as the scripts' last two arguments.
const fixedClock = "local clock = {ARGV[#ARGV - 1], ARGV[#ARGV]}\n"

var (
	fixedDecide = redis.NewScript(fixedClock + quotaDecideLua)
	fixedRefund = redis.NewScript(fixedClock + quotaRefundLua)
)

// testClock is a clock the test sets, to the microsecond.
type testClock struct{ ns atomic.Int64 }

func (c *testClock) now() time.Time  { return time.Unix(0, c.ns.Load()) }
func (c *testClock) set(t time.Time) { c.ns.Store(t.UnixNano()) }

// onClocks makes q take server's time as the Redis server's and client's
// as its own clock.
func onClocks(q *Quota, server, client func() time.Time) *Quota {
	q.fixed, q.clock = server, client
	q.decideLua, q.refundLua = fixedDecide, fixedRefund
	return q
}

func mustQuota(t testing.TB, c redis.UniversalClient, cfg quota.Config, opts ...Option) *Quota {
	t.Helper()
	q, err := NewQuota(c, cfg, append([]Option{WithPrefix(freshPrefix())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func mustLoad(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// stripAt returns d's exported fields, At excepted.
func stripAt(d limits.Decision) limits.Decision {
	return limits.Decision{
		Allowed: d.Allowed, Reason: d.Reason, Limit: d.Limit, Period: d.Period, Burst: d.Burst, Cost: d.Cost,
		Remaining: d.Remaining, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter,
	}
}

// quotaOp is a call of a conformance sequence, at a time.
type quotaOp struct {
	at   time.Time
	kind string // "allow", "peek", "refund" or "limit"
	key  string
	n    int // the cost, the index of the op whose decision is refunded, or the new limit
}

func (o quotaOp) String() string {
	return fmt.Sprintf("%s %s(%q, %d)", o.at.Format(time.RFC3339Nano), o.kind, o.key, o.n)
}

// quotaOps returns a sequence of n calls of every kind, starting at start,
// with costs 0, negative and above the limit, refunds of earlier calls in
// any order (refused ones, twice, of a past period), changes of limit,
// and times that step by up to step, or to a period's start or the
// microsecond before it.
func quotaOps(seed uint64, cfg quota.Config, start time.Time, step time.Duration, n int) []quotaOp {
	rng := rand.New(rand.NewPCG(seed, 1))
	ops := make([]quotaOp, 0, n)
	var allows []int
	limit, at, loc := cfg.Limit, start, cfg.Location
	if loc == nil {
		loc = time.UTC
	}
	for len(ops) < n {
		switch r := rng.IntN(20); {
		case r < 2:
			_, end := cfg.Per.Bounds(at, loc)
			at = end.Add(-time.Duration(r) * time.Microsecond)
		case r < 4:
		default:
			at = at.Add(time.Duration(rng.Int64N(int64(step))).Truncate(time.Microsecond))
		}
		op := quotaOp{at: at, key: []string{"a", "b"}[rng.IntN(2)]}
		switch r := rng.IntN(20); {
		case r < 11:
			op.kind = "allow"
			costs := []int{-1, 0, 1, 1, 1, 1, 2, 3, limit, limit + 1}
			op.n = costs[rng.IntN(len(costs))]
			allows = append(allows, len(ops))
		case r < 14:
			op.kind = "peek"
		case r < 19:
			if len(allows) == 0 {
				continue
			}
			op.kind, op.n = "refund", allows[rng.IntN(len(allows))]
			op.key = ops[op.n].key
		default:
			op.kind, op.n = "limit", 1+rng.IntN(2*cfg.Limit)
			limit = op.n
		}
		ops = append(ops, op)
	}
	return ops
}

// TestQuotaConformance runs sequences of calls on a Quota in Redis and on
// a quota.Quota at the same times, the first on a test clock, the second
// in a synctest bubble, and checks that every Decision is the same, field
// for field, At included: costs 0, negative and above the limit, refunds
// in any order, changes of limit, over many periods of a day (days of 23
// and 25 hours in Paris), a week and a month.
func TestQuotaConformance(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	paris, ny := mustLoad(t, "Europe/Paris"), mustLoad(t, "America/New_York")
	for i, tc := range []struct {
		cfg   quota.Config
		start time.Time
		step  time.Duration
	}{
		{quota.Config{Limit: 5, Location: paris}, time.Date(2031, 3, 29, 20, 0, 0, 0, paris), 9 * time.Hour},
		{quota.Config{Limit: 4, Per: quota.Day, Location: paris}, time.Date(2031, 10, 25, 21, 0, 0, 0, paris), 5 * time.Hour},
		{quota.Config{Limit: 7, Per: quota.Week}, time.Date(2031, 6, 5, 0, 0, 0, 0, time.UTC), 2 * 24 * time.Hour},
		{quota.Config{Limit: 10, Per: quota.Month, Location: ny}, time.Date(2031, 10, 20, 0, 0, 0, 0, ny), 6 * 24 * time.Hour},
	} {
		t.Run(fmt.Sprintf("%d/%v", tc.cfg.Limit, tc.start.Format(time.DateOnly)), func(t *testing.T) {
			ops := quotaOps(uint64(i), tc.cfg, tc.start, tc.step, 400)
			clk := &testClock{}
			q := onClocks(mustQuota(t, c, tc.cfg), clk.now, clk.now)
			ctx := context.Background()
			got := make([]limits.Decision, len(ops))
			for j, op := range ops {
				clk.set(op.at)
				var err error
				switch op.kind {
				case "allow":
					got[j], err = q.AllowN(ctx, op.key, op.n)
				case "peek":
					got[j], err = q.Peek(ctx, op.key)
				case "refund":
					err = q.Refund(ctx, op.key, got[op.n])
				case "limit":
					err = q.SetLimit(op.n)
				}
				if err != nil {
					t.Fatalf("%v: %v", op, err)
				}
			}
			want := make([]limits.Decision, len(ops))
			synctest.Test(t, func(t *testing.T) {
				ref, err := quota.New(tc.cfg)
				if err != nil {
					t.Fatal(err)
				}
				for j, op := range ops {
					time.Sleep(time.Until(op.at))
					switch op.kind {
					case "allow":
						want[j] = ref.AllowN(op.key, op.n)
					case "peek":
						want[j] = ref.Peek(op.key)
					case "refund":
						ref.Refund(ctx, op.key, want[op.n])
					case "limit":
						ref.SetLimit(op.n)
					}
				}
			})
			kinds := map[string]int{}
			for j, op := range ops {
				if stripAt(got[j]) != stripAt(want[j]) || !got[j].At.Equal(want[j].At) {
					t.Fatalf("call %d, %v:\n got %+v\nwant %+v", j, op, got[j], want[j])
				}
				k := op.kind
				if op.kind == "allow" || op.kind == "peek" {
					k += "/" + got[j].Reason.String()
				}
				kinds[k]++
			}
			t.Logf("%d calls alike: %v", len(ops), kinds)
			for _, k := range []string{"allow/allowed", "allow/rate_limited", "allow/cost_above_burst", "allow/invalid_cost", "peek/rate_limited", "refund"} {
				if kinds[k] == 0 {
					t.Errorf("no call of kind %s: the sequence misses a case", k)
				}
			}
		})
	}
}

// TestQuotaClockChanges checks days of 23 and 25 hours in Paris: the
// period is the local day, however long, RetryAfter runs to the next
// local midnight to the microsecond, and the count expires then.
func TestQuotaClockChanges(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	paris := mustLoad(t, "Europe/Paris")
	clk := &testClock{}
	q := onClocks(mustQuota(t, c, quota.Config{Limit: 1, Location: paris}), clk.now, clk.now)
	ctx := context.Background()
	for _, day := range []struct {
		start  time.Time
		length time.Duration
	}{
		{time.Date(2031, 3, 30, 0, 0, 0, 0, paris), 23 * time.Hour}, // clocks go forward
		{time.Date(2031, 3, 31, 0, 0, 0, 0, paris), 24 * time.Hour},
		{time.Date(2031, 10, 26, 0, 0, 0, 0, paris), 25 * time.Hour}, // and back
	} {
		end := day.start.Add(day.length)
		clk.set(day.start.Add(30 * time.Minute))
		d, err := q.Allow(ctx, "k")
		if err != nil || !d.Allowed || d.Period != day.length || d.ResetAfter != day.length-30*time.Minute || !d.At.Equal(clk.now()) {
			t.Errorf("%v: %+v, %v; want allowed in a day of %v", day.start, d, err, day.length)
		}
		if at, err := c.PExpireTime(ctx, q.Key("k", d.At)).Result(); err != nil || at != time.Duration(end.UnixMilli())*time.Millisecond {
			t.Errorf("%v: the count expires at %v (%v), want %v", day.start, at, err, end)
		}
		clk.set(end.Add(-time.Microsecond))
		if d, err := q.Allow(ctx, "k"); err != nil || d.Allowed || d.Reason != limits.ReasonRateLimited || d.RetryAfter != time.Microsecond || d.Period != day.length {
			t.Errorf("%v: a microsecond before midnight: %+v, %v", day.start, d, err)
		}
		clk.set(end)
		if d, err := q.Peek(ctx, "k"); err != nil || !d.Allowed || d.Remaining != 1 || d.ResetAfter != 0 {
			t.Errorf("%v: at midnight: %+v, %v", day.start, d, err)
		}
	}
}

// TestQuotaExpiry checks on the server's own clock that a count is stored
// under the key's name and the period's first day, expires when its
// period ends, is deleted when refunds bring it to 0, and that a refund
// of a period past gives nothing back.
func TestQuotaExpiry(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), false)
	ctx := context.Background()
	tokyo := mustLoad(t, "Asia/Tokyo")
	q, err := NewQuota(c, quota.Config{Limit: 3, Location: tokyo}, WithPrefix("expiry:"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := q.AllowN(ctx, "k", 2)
	if err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	start, end := quota.Day.Bounds(d.At, tokyo)
	key := "expiry:k:" + start.Format(time.DateOnly)
	if q.Key("k", d.At) != key {
		t.Errorf("Key is %q, want %q", q.Key("k", d.At), key)
	}
	if v, err := c.Get(ctx, key).Result(); err != nil || v != "2" {
		t.Errorf("%s holds %q, %v; want 2", key, v, err)
	}
	if at, err := c.PExpireTime(ctx, key).Result(); err != nil || at != time.Duration(end.UnixMilli())*time.Millisecond {
		t.Errorf("%s expires at %v, %v; want %v, the next midnight in Tokyo", key, at, err, end)
	}
	if d.ResetAfter != end.Sub(d.At) || d.Period != 24*time.Hour || d.Remaining != 1 {
		t.Errorf("%+v", d)
	}
	if err := q.Refund(ctx, "k", d); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(ctx, key).Result(); err != nil || n != 0 {
		t.Errorf("the count refunded to 0 still exists: %d, %v", n, err)
	}

	// On a test clock: a refund once the period has ended leaves the next
	// period's count as it is, and does not bring the old one back.
	clk := &testClock{}
	q = onClocks(mustQuota(t, c, quota.Config{Limit: 3, Location: tokyo}), clk.now, clk.now)
	clk.set(time.Date(2031, 1, 1, 23, 0, 0, 0, tokyo))
	old, err := q.AllowN(ctx, "k", 3)
	if err != nil || !old.Allowed {
		t.Fatal(old, err)
	}
	clk.set(time.Date(2031, 1, 2, 0, 0, 0, 0, tokyo))
	now, err := q.AllowN(ctx, "k", 3)
	if err != nil || !now.Allowed {
		t.Fatalf("the next day: %+v, %v", now, err)
	}
	if err := q.Refund(ctx, "k", old); err != nil {
		t.Fatal(err)
	}
	if d, err := q.Peek(ctx, "k"); err != nil || d.Allowed || d.Remaining != 0 {
		t.Errorf("after a refund of yesterday's charge: %+v, %v", d, err)
	}
	if v, err := c.Get(ctx, q.Key("k", old.At)).Result(); err != nil || v != "3" {
		t.Errorf("yesterday's count: %q, %v; want it as it was, until it expires", v, err)
	}
	if q.Stats().Refunds != 1 {
		t.Errorf("Stats: %+v", q.Stats())
	}
}

// TestQuotaClocksDisagree runs a Quota whose client's clock is days off
// the server's: the first decision takes a second call, with the bounds
// of the server's period, and is the server's; the next take one call.
func TestQuotaClocksDisagree(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	for _, off := range []time.Duration{-3 * 24 * time.Hour, 40 * 24 * time.Hour, -time.Microsecond} {
		t.Run(off.String(), func(t *testing.T) {
			server := &testClock{}
			server.set(time.Date(2031, 5, 17, 0, 0, 0, 0, time.UTC))
			q := onClocks(mustQuota(t, c, quota.Config{Limit: 2}), server.now, func() time.Time { return server.now().Add(off) })
			for i, calls := range []uint64{2, 3} {
				d, err := q.Allow(ctx, "k")
				if err != nil || !d.Allowed || d.Remaining != 1-i || !d.At.Equal(server.now()) || d.ResetAfter != 24*time.Hour {
					t.Errorf("decision %d: %+v, %v", i, d, err)
				}
				if n := q.CallStats().Latency.Count; n != calls {
					t.Errorf("decision %d: %d calls so far, want %d", i, n, calls)
				}
			}
		})
	}
}

// TestQuotaFleet has two processes, each with its own client and Quota
// and 8 goroutines, send unit requests for one key on the server's clock:
// together they are allowed exactly the limit.
func TestQuotaFleet(t *testing.T) {
	const limit = 100
	srv := redistest.Start(t)
	prefix := freshPrefix()
	var allowed atomic.Int64
	var mu sync.Mutex
	months := map[time.Time]bool{}
	var wg sync.WaitGroup
	for p := range 2 {
		c := newClient(t, srv.Addr(), p == 0) // one client of each kind
		q, err := NewQuota(c, quota.Config{Limit: limit, Per: quota.Month}, WithPrefix(prefix), WithTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for range 8 {
			wg.Go(func() {
				for range 30 {
					d, err := q.Allow(context.Background(), "shared")
					if err != nil {
						t.Error(err)
						return
					}
					start, _ := quota.Month.Bounds(d.At, time.UTC)
					mu.Lock()
					months[start] = true
					mu.Unlock()
					if d.Allowed {
						allowed.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	if len(months) > 1 {
		t.Skip("the run crossed the start of a month")
	}
	if n := allowed.Load(); n != limit {
		t.Errorf("%d of 480 requests allowed, want exactly %d", n, limit)
	}
}

// TestQuotaRefundsConcurrent has many goroutines on two clients spend a
// key's quota, giving back a third of what they are allowed at once, until
// refused, then give back all they kept, in shuffled order, at once: the
// key is full exactly when they stop, and empty once they are done.
func TestQuotaRefundsConcurrent(t *testing.T) {
	const limit = 120
	srv := redistest.Start(t)
	prefix := freshPrefix()
	ctx := context.Background()
	var qs [2]*Quota
	for p := range qs {
		qs[p] = mustQuota(t, newClient(t, srv.Addr(), p == 0), quota.Config{Limit: limit, Per: quota.Month}, WithPrefix(prefix), WithTimeout(10*time.Second))
	}
	var mu sync.Mutex
	var kept []limits.Decision
	var wg sync.WaitGroup
	for w := range 16 {
		q := qs[w%2]
		wg.Go(func() {
			for i := 0; ; i++ {
				d, err := q.Allow(ctx, "k")
				if err != nil {
					t.Error(err)
					return
				}
				if !d.Allowed {
					return
				}
				if i%3 == 0 {
					if err := q.Refund(ctx, "k", d); err != nil {
						t.Error(err)
					}
					continue
				}
				mu.Lock()
				kept = append(kept, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	start, _ := quota.Month.Bounds(kept[0].At, time.UTC)
	for _, d := range kept {
		if s, _ := quota.Month.Bounds(d.At, time.UTC); !s.Equal(start) {
			t.Skip("the run crossed the start of a month")
		}
	}
	if len(kept) != limit {
		t.Errorf("%d kept, want exactly %d", len(kept), limit)
	}
	if d, err := qs[0].Peek(ctx, "k"); err != nil || d.Remaining != 0 || d.Allowed {
		t.Errorf("full: %+v, %v", d, err)
	}
	rand.Shuffle(len(kept), func(i, j int) { kept[i], kept[j] = kept[j], kept[i] })
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < len(kept); i += 16 {
				if err := qs[i%2].Refund(ctx, "k", kept[i]); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if d, err := qs[1].Peek(ctx, "k"); err != nil || d.Remaining != limit || d.ResetAfter != 0 {
		t.Errorf("after every refund: %+v, %v", d, err)
	}
	if n, err := newClient(t, srv.Addr(), true).Exists(ctx, qs[0].Key("k", kept[0].At)).Result(); err != nil || n != 0 {
		t.Errorf("the count still exists: %d, %v", n, err)
	}
}

// TestQuotaSetLimit checks a live change of limit: the counts of the
// period are kept, a lower limit refuses a key that has used more, a cost
// of 0 is still allowed, and a higher limit adds only its room; and under
// -race, changes while goroutines decide.
func TestQuotaSetLimit(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	clk := &testClock{}
	clk.set(time.Date(2031, 2, 3, 22, 0, 0, 0, time.UTC))
	q := onClocks(mustQuota(t, c, quota.Config{Limit: 5}), clk.now, clk.now)
	for range 4 {
		if d, err := q.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatal(d, err)
		}
	}
	if err := q.SetLimit(2); err != nil || q.Limit() != 2 {
		t.Fatal(err, q.Limit())
	}
	d, err := q.Allow(ctx, "k")
	if err != nil || d.Allowed || d.Remaining != 0 || d.Limit != 2 || d.Burst != 2 || d.RetryAfter != 2*time.Hour {
		t.Errorf("over a lower limit: %+v, %v", d, err)
	}
	if d, err := q.AllowN(ctx, "k", 0); err != nil || !d.Allowed || d.Remaining != 0 {
		t.Errorf("a cost of 0 over a lower limit: %+v, %v", d, err)
	}
	if err := q.SetLimit(6); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		d, err := q.Allow(ctx, "k")
		if err != nil || d.Allowed != (i < 2) || d.Limit != 6 {
			t.Errorf("under a higher limit, request %d: %+v, %v", i, d, err)
		}
	}
	for _, bad := range []int{0, -1, maxQuotaLimit + 1} {
		if err := q.SetLimit(bad); err == nil || q.Limit() != 6 {
			t.Errorf("SetLimit(%d): %v, limit %d", bad, err, q.Limit())
		}
	}

	// Live: each decision is by one limit, and no more is allowed than
	// the highest.
	q.SetLimit(10)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			q.SetLimit(10 + i%3*10)
			time.Sleep(10 * time.Microsecond)
		}
	})
	var deciders sync.WaitGroup
	for range 8 {
		deciders.Go(func() {
			for range 20 {
				d, err := q.Allow(ctx, "live")
				if err != nil || d.Limit != d.Burst || d.Limit%10 != 0 || d.Limit < 10 || d.Limit > 30 {
					t.Errorf("%+v, %v", d, err)
				}
				if d.Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	deciders.Wait()
	close(stop)
	wg.Wait()
	if n := allowed.Load(); n > 30 || n < 10 {
		t.Errorf("%d allowed while the limit moved between 10 and 30", n)
	}
}

// TestQuotaRedisDown checks each failure policy with Redis down, back,
// and paused: FailClosed refuses with an error wrapping ErrUnavailable,
// FailOpen allows what Refund then knows counted nothing; costs above the
// limit and negative ones are refused without a call; failures are
// counted by kind and handed to the error handler; refunds that fail
// say so; decisions resume once Redis is back.
func TestQuotaRedisDown(t *testing.T) {
	for name, policy := range map[string]ErrorPolicy{"FailClosed": FailClosed, "FailOpen": FailOpen} {
		t.Run(name, func(t *testing.T) {
			srv := redistest.Start(t)
			c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialerRetries: 1})
			t.Cleanup(func() { c.Close() })
			ctx := context.Background()
			var handled atomic.Int64
			q := mustQuota(t, c, quota.Config{Limit: 3}, OnError(policy), WithTimeout(200*time.Millisecond),
				WithErrorHandler(func(err error) {
					if !errors.Is(err, ErrUnavailable) {
						t.Errorf("handler got %v", err)
					}
					handled.Add(1)
				}))
			charged, err := q.Allow(ctx, "k")
			if err != nil || !charged.Allowed {
				t.Fatal(charged, err)
			}
			srv.Kill()
			for i := range 2 {
				d, err := q.Allow(ctx, "k")
				want := limits.Decision{Limit: 3, Burst: 3, Period: 24 * time.Hour, Cost: 1}
				if policy == FailClosed {
					want.Reason = limits.ReasonUnavailable
					if !errors.Is(err, ErrUnavailable) {
						t.Errorf("request %d: error %v, want ErrUnavailable", i, err)
					}
				} else {
					want.Allowed = true
					if err != nil {
						t.Errorf("request %d: error %v", i, err)
					}
				}
				if d != want {
					t.Errorf("request %d: %+v, want %+v", i, d, want)
				}
				if err := q.Refund(ctx, "k", d); err != nil {
					t.Errorf("a refund of a decision Redis did not make: %v", err)
				}
			}
			for _, n := range []int{4, -1} {
				d, err := q.AllowN(ctx, "k", n)
				if err != nil || d.Allowed || d.Reason != map[int]limits.Reason{4: limits.ReasonCostAboveBurst, -1: limits.ReasonInvalidCost}[n] {
					t.Errorf("cost %d with Redis down: %+v, %v", n, d, err)
				}
			}
			if err := q.Refund(ctx, "k", charged); !errors.Is(err, ErrUnavailable) {
				t.Errorf("a refund with Redis down: %v", err)
			}
			want := Stats{Answered: 1, Errors: 2, RefundErrors: 1}
			if s := q.Stats(); s != want {
				t.Errorf("Stats %+v, want %+v", s, want)
			}
			if f := q.CallStats().Failures; f.Connection != 3 || handled.Load() != 3 {
				t.Errorf("Failures %+v and %d handled, want 3 connection failures", f, handled.Load())
			}

			srv.Restart() // empty
			if d, err := q.Allow(ctx, "k"); err != nil || !d.Allowed || d.Remaining != 2 {
				t.Errorf("back: %+v, %v", d, err)
			}
			srv.Pause()
			d, err := q.Allow(ctx, "k")
			srv.Resume()
			if policy == FailClosed && (!errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || d.Reason != limits.ReasonUnavailable) ||
				policy == FailOpen && (err != nil || !d.Allowed) {
				t.Errorf("paused: %+v, %v", d, err)
			}
			if f := q.CallStats().Failures; f.Timeout != 1 {
				t.Errorf("paused: Failures %+v, want one timeout", f)
			}
		})
	}
}

// TestQuotaLateRefund checks that a refund the server runs after its
// caller's deadline, on the server's clock as the Quota estimates it,
// gives nothing back and says so.
func TestQuotaLateRefund(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	clk := &testClock{}
	clk.set(time.Date(2031, 8, 1, 12, 0, 0, 0, time.UTC))
	var late atomic.Bool
	server := func() time.Time {
		if late.Load() {
			return clk.now().Add(time.Minute) // the script runs a minute after it was sent
		}
		return clk.now()
	}
	q := onClocks(mustQuota(t, c, quota.Config{Limit: 3}, WithTimeout(time.Second)), server, clk.now)
	d, err := q.AllowN(ctx, "k", 2)
	if err != nil || !d.Allowed {
		t.Fatal(d, err)
	}
	late.Store(true)
	if err := q.Refund(ctx, "k", d); !errors.Is(err, ErrUnavailable) || !errors.Is(err, errLate) {
		t.Errorf("a late refund: %v", err)
	}
	late.Store(false)
	if p, err := q.Peek(ctx, "k"); err != nil || p.Remaining != 1 {
		t.Errorf("after a late refund: %+v, %v", p, err)
	}
	if f := q.CallStats().Failures; f.Timeout != 1 || q.Stats().RefundErrors != 1 {
		t.Errorf("%+v, %+v", f, q.Stats())
	}
}

// TestQuotaForeignValue checks that a count key holding something else
// gives an error naming it, counted as a server failure.
func TestQuotaForeignValue(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	clk := &testClock{}
	clk.set(time.Date(2031, 8, 1, 12, 0, 0, 0, time.UTC))
	q := onClocks(mustQuota(t, c, quota.Config{Limit: 3}), clk.now, clk.now)
	c.Set(ctx, q.Key("text", clk.now()), "many", 0)
	c.HSet(ctx, q.Key("hash", clk.now()), "n", 1)
	for _, k := range []string{"text", "hash"} {
		if _, err := q.Allow(ctx, k); !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s: %v", k, err)
		} else if want := q.Key(k, clk.now()); !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v does not name %s", k, err, want)
		}
	}
	if f := q.CallStats().Failures; f.Server != 2 {
		t.Errorf("%+v", f)
	}
}

// TestNewQuotaErrors checks that NewQuota refuses the Configs quota.New
// refuses, the options that do not apply to a quota, and bad option
// values.
func TestNewQuotaErrors(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	ok := quota.Config{Limit: 1}
	for i, tc := range []struct {
		cfg  quota.Config
		opts []Option
	}{
		{quota.Config{Limit: 0}, nil},
		{quota.Config{Limit: 1, Per: 9}, nil},
		{quota.Config{Limit: 1, MaxKeys: -1}, nil},
		{quota.Config{Limit: 1, MaxKeys: 100}, nil},
		{quota.Config{Limit: maxQuotaLimit + 1}, nil},
		{ok, []Option{WithBurst(3)}},
		{ok, []Option{WithLeases(4, 0)}},
		{ok, []Option{WithFallback(limits.NewGCRA(1, time.Hour))}},
		{ok, []Option{WithTimeout(0)}},
		{ok, []Option{WithPrefix(""), WithHashTag()}},
		{ok, []Option{WithPrefix("a{b"), WithHashTag()}},
		{ok, []Option{OnError(9)}},
	} {
		if _, err := NewQuota(c, tc.cfg, tc.opts...); err == nil {
			t.Errorf("case %d: %+v accepted", i, tc.cfg)
		} else {
			t.Logf("case %d: %v", i, err)
		}
	}
	q, err := NewQuota(c, quota.Config{Limit: maxQuotaLimit, Per: quota.Week}, WithPrefix("p"), WithHashTag(), OnError(FailOpen))
	if err != nil {
		t.Fatal(err)
	}
	if k := q.Key("k", time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)); k != "{p}k:2030-12-30" {
		t.Errorf("Key: %q", k)
	}
	if q.Per() != quota.Week || q.Location() != time.UTC || q.Limit() != maxQuotaLimit {
		t.Errorf("Per %v, Location %v, Limit %d", q.Per(), q.Location(), q.Limit())
	}
}

// TestQuotaCluster checks a Quota on a Redis Cluster: the keys of one
// key's periods are single keys, decided on their own nodes, and a key is
// allowed exactly the limit, with a hash tag or without.
func TestQuotaCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: cluster.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	for _, opts := range [][]Option{nil, {WithHashTag()}} {
		q := mustQuota(t, c, quota.Config{Limit: 2, Per: quota.Month}, append(opts, WithTimeout(10*time.Second))...)
		for i := range 16 {
			k := "client-" + strconv.Itoa(i)
			for j := range 3 {
				if d, err := q.Allow(ctx, k); err != nil || d.Allowed != (j < 2) {
					t.Fatalf("%s, request %d: %+v, %v", k, j, d, err)
				}
			}
		}
	}
}
