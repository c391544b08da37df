package redislimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/internal/gcra"
	"github.com/limitsgo/limits/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// TestRefundState checks what a refund stores: the TAT gcra.Policy.Refund
// gives for a charge known to the nanosecond above, with the expiry that
// goes with it; the key deleted when it owes nothing; an absent key left
// absent.
func TestRefundState(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	take := func(g *GCRA, key string, n int) limits.Decision {
		t.Helper()
		d, err := g.Take(ctx, key, n)
		if err != nil || !d.Allowed {
			t.Fatalf("Take(%s, %d): %+v, %v", key, n, d, err)
		}
		return d
	}
	refund := func(g *GCRA, key string, d limits.Decision) {
		t.Helper()
		if err := g.Refund(ctx, key, d); err != nil {
			t.Fatalf("Refund(%s): %v", key, err)
		}
	}

	// 7 an hour: the TATs have fractions of a nanosecond. The second
	// charge is given back from its rounded TAT, so the key is left owing
	// at most a nanosecond more than after the first charge alone.
	g := must(New(c, 7, time.Hour, WithPrefix(freshPrefix())))
	first := take(g, "k", 2)
	afterFirst := parseTAT(t, c.Get(ctx, g.Key("k")).Val())
	d := take(g, "k", 3)
	cur := parseTAT(t, c.Get(ctx, g.Key("k")).Val())
	refund(g, "k", d)
	charged := gcra.Time{NS: d.At.Add(d.ResetAfter).UnixNano()}
	// The charge lies far ahead of any time the refund could have read,
	// so all of it is taken off, whatever that time.
	want := g.lim.Load().p.Refund(cur, charged, gcra.Time{NS: d.At.UnixNano()}, 3, true)
	checkStored(t, c, g.Key("k"), want)
	if gcra.Less(want, afterFirst) || gcra.Less(gcra.Time{NS: 1}, g.lim.Load().p.Sub(want, afterFirst)) {
		t.Errorf("after the refund the key's TAT is %+v, want within a nanosecond above %+v", want, afterFirst)
	}
	if d := take(g, "k", 0); d.Remaining != 5 {
		t.Errorf("after the refund: %+v, want 5 remaining", d)
	}
	// The first charge too: the key then owes under a nanosecond.
	refund(g, "k", first)
	if d := take(g, "k", 0); d.Remaining != 7 {
		t.Errorf("after both refunds: %+v, want the full burst", d)
	}

	// 10 an hour: T is whole, and a refund of the only charge leaves
	// nothing owed, so the key goes.
	g = must(New(c, 10, time.Hour, WithPrefix(freshPrefix())))
	d = take(g, "k", 4)
	refund(g, "k", d)
	if n := c.Exists(ctx, g.Key("k")).Val(); n != 0 {
		t.Errorf("the key owes nothing after the refund of its only charge, and is still there: %q", c.Get(ctx, g.Key("k")).Val())
	}
	refund(g, "k", d) // of an absent key: nothing
	if n := c.Exists(ctx, g.Key("k")).Val(); n != 0 {
		t.Errorf("a refund stored an absent key")
	}
	if s := g.Stats(); s.Answered != 1 || s.Refunds != 2 || s.Errors+s.RefundErrors != 0 {
		t.Errorf("Stats %+v, want 1 answered, 2 refunds", s)
	}
}

// TestRefundFarFutureTAT checks that a refund takes a stored TAT further
// ahead than burst*T as now + burst*T, as a decision does.
func TestRefundFarFutureTAT(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	g := must(New(c, 10, time.Hour, WithPrefix(freshPrefix())))
	d, err := g.Take(ctx, "k", 2)
	if err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	c.Set(ctx, g.Key("k"), strings.Repeat("9", 30), 0)
	if err := g.Refund(ctx, "k", d); err != nil {
		t.Fatal(err)
	}
	tat := parseTAT(t, c.Get(ctx, g.Key("k")).Val())
	checkStored(t, c, g.Key("k"), tat)
	// burst*T is an hour, and T 6 minutes: the key is taken to run an
	// hour ahead, then the 12 minutes of the charge are taken off.
	if ahead := time.Duration(tat.NS - time.Now().UnixNano()); ahead > 48*time.Minute+time.Second || ahead < 47*time.Minute {
		t.Errorf("after the refund the key runs %v ahead, want 48m", ahead)
	}
}

// TestRefundNothingToDo checks the refunds that need no call to Redis: of a
// refused Decision, of a cost of 0 and of a Decision that charged nothing
// (FailOpen's, whose At is zero).
func TestRefundNothingToDo(t *testing.T) {
	c := newClient(t, closedAddr(t), true)
	g := must(New(c, 10, time.Second, OnError(FailOpen)))
	ctx := context.Background()
	open, err := g.Allow(ctx, "k")
	if err != nil || !open.Allowed || !open.At.IsZero() {
		t.Fatalf("FailOpen: %+v, %v", open, err)
	}
	at := time.Now().Round(0)
	for _, d := range []limits.Decision{
		open,
		{Reason: limits.ReasonRateLimited, Cost: 1, RetryAfter: time.Second, At: at},
		{Allowed: true, Cost: 0, At: at},
		{Allowed: true, Cost: -1, At: at},
		{Allowed: true, Cost: 11, At: at},
	} {
		if err := g.Refund(ctx, "k", d); err != nil {
			t.Errorf("Refund(%+v): %v", d, err)
		}
	}
	if s := g.Stats(); s.Refunds+s.RefundErrors != 0 {
		t.Errorf("Stats %+v: a refund called Redis", s)
	}
}

// TestRefundFailure checks that a refund Redis does not answer in time
// (within its context's deadline, here) returns an error wrapping
// ErrUnavailable, is counted and handled, and leaves the charge in place,
// whatever the failure policy.
func TestRefundFailure(t *testing.T) {
	for _, contextTimeout := range []bool{false, true} {
		t.Run(fmt.Sprintf("contextTimeout=%v", contextTimeout), func(t *testing.T) { testRefundFailure(t, contextTimeout) })
	}
}

func testRefundFailure(t *testing.T, contextTimeout bool) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), contextTimeout)
	ctx := context.Background()
	var handled atomic.Int64
	local := limits.NewGCRA(10, time.Hour)
	// The calls before the one that fails wait for Redis as long as it
	// takes: a Take past its deadline, on a busy machine, is decided by
	// the fallback, and its refund does not reach Redis.
	g := must(New(c, 10, time.Hour, WithPrefix(freshPrefix()), WithTimeout(10*time.Second), WithFallback(local),
		WithErrorHandler(func(error) { handled.Add(1) })))
	d, err := g.Take(ctx, "k", 4)
	if err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	// A refund for a key that has none loads the script, so that the late
	// one below runs rather than fail with NOSCRIPT.
	if err := g.Refund(ctx, "other", d); err != nil {
		t.Fatal(err)
	}
	before := c.Get(ctx, g.Key("k")).Val()
	srv.Pause()
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	err = g.Refund(short, "k", d)
	cancel()
	srv.Resume()
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Refund with the server paused: %v", err)
	}
	// The server runs the script it received before the refund gave up,
	// once resumed, past the deadline: it must give nothing back.
	time.Sleep(50 * time.Millisecond)
	if got := c.Get(ctx, g.Key("k")).Val(); got != before {
		t.Errorf("a failed refund changed the key from %q to %q", before, got)
	}
	if s := g.Stats(); s.RefundErrors != 1 || s.Refunds != 1 || s.Errors != 0 || handled.Load() != 1 {
		t.Errorf("Stats %+v, handler called %d times; want 1 refund, 1 refund error", s, handled.Load())
	}
	if d := local.Peek("k"); d.Remaining != 10 {
		t.Errorf("the refund of a Redis decision reached the fallback GCRA: %+v", d)
	}
	// A key holding something else: an error naming it.
	c.Set(ctx, g.Key("k"), "hello", 0)
	if err := g.Refund(ctx, "k", d); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "key "+g.Key("k")+" does not hold a TAT") {
		t.Errorf("Refund of a foreign value: %v", err)
	}
}

// TestRefundFallback checks that under the Fallback policy the fallback
// GCRA's decisions are refunded to it, without a call to Redis, and
// Redis's decisions to Redis.
func TestRefundFallback(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	local := limits.NewGCRA(10, time.Hour, limits.WithBurst(5))
	g := must(New(c, 10, time.Hour, WithPrefix(freshPrefix()), WithFallback(local), WithTimeout(200*time.Millisecond)))

	fromRedis, err := g.Take(ctx, "k", 3)
	if err != nil || !fromRedis.Allowed || fromRedis.Burst != 10 {
		t.Fatalf("from Redis: %+v, %v", fromRedis, err)
	}
	srv.Kill()
	fromLocal, err := g.Take(ctx, "k", 3)
	if err != nil || !fromLocal.Allowed || fromLocal.Burst != 5 {
		t.Fatalf("from the fallback: %+v, %v", fromLocal, err)
	}
	if err := g.Refund(ctx, "k", fromLocal); err != nil {
		t.Errorf("Refund of the fallback's decision with Redis down: %v", err)
	}
	if d := local.Peek("k"); d.Remaining != 5 {
		t.Errorf("the fallback's charge was not given back to it: %+v", d)
	}
	if s := g.Stats(); s.Refunds+s.RefundErrors != 0 {
		t.Errorf("Stats %+v: the fallback's refund called Redis", s)
	}
	srv.Restart()
	fromRedis, err = g.Take(ctx, "k", 3)
	if err != nil || fromRedis.Burst != 10 {
		t.Fatalf("from Redis again: %+v, %v", fromRedis, err)
	}
	local.AllowN("k", 2)
	if err := g.Refund(ctx, "k", fromRedis); err != nil {
		t.Fatal(err)
	}
	if d, err := g.Peek(ctx, "k"); err != nil || d.Remaining != 10 {
		t.Errorf("Redis's charge was not given back to Redis: %+v, %v", d, err)
	}
	if d := local.Peek("k"); d.Remaining != 3 {
		t.Errorf("the refund of a Redis decision changed the fallback: %+v", d)
	}
	if s := g.Stats(); s.Refunds != 1 {
		t.Errorf("Stats %+v, want 1 refund", s)
	}
}

// TestRefundWithoutFallback checks that a Decision made in this process by
// a limits.GCRA is none of a GCRA without a fallback, and is not refunded
// in Redis.
func TestRefundWithoutFallback(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	g := must(New(c, 10, time.Hour, WithPrefix(freshPrefix())))
	if _, err := g.Take(ctx, "k", 3); err != nil {
		t.Fatal(err)
	}
	other := limits.NewGCRA(10, time.Hour).AllowN("k", 3)
	if err := g.Refund(ctx, "k", other); err != nil {
		t.Fatal(err)
	}
	if d, err := g.Peek(ctx, "k"); err != nil || d.Remaining != 7 {
		t.Errorf("a local Decision was refunded in Redis: %+v, %v", d, err)
	}
	// The same Decision with its monotonic reading dropped, as after a
	// trip through another process, is taken for Redis's.
	other.At = other.At.Round(0)
	other.ResetAfter = 18 * time.Minute // 3T, ahead of the key's TAT in Redis
	if err := g.Refund(ctx, "k", other); err != nil {
		t.Fatal(err)
	}
	if d, err := g.Peek(ctx, "k"); err != nil || d.Remaining != 10 {
		t.Errorf("a Decision with a wall-clock At was not refunded in Redis: %+v, %v", d, err)
	}
}
