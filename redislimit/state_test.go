package redislimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/internal/gcra"
	"github.com/limitsgo/limits/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// formatTAT returns t, a TAT in nanoseconds since the Unix epoch and units,
// as the scripts store it.
func formatTAT(t gcra.Time) string {
	s := strconv.FormatInt(t.NS, 10)
	if t.Frac > 0 {
		s += ":" + strconv.FormatUint(t.Frac, 10)
	}
	return s
}

// parseTAT reads a stored TAT back.
func parseTAT(t *testing.T, v string) gcra.Time {
	t.Helper()
	whole, frac, _ := strings.Cut(v, ":")
	ns, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		t.Fatalf("stored %q: %v", v, err)
	}
	tat := gcra.Time{NS: ns}
	if frac != "" {
		if tat.Frac, err = strconv.ParseUint(frac, 10, 64); err != nil {
			t.Fatalf("stored %q: %v", v, err)
		}
	}
	return tat
}

// expiryOf returns the expiry the scripts give a key whose TAT is tat: the
// TAT rounded up to the millisecond.
func expiryOf(tat gcra.Time) time.Duration {
	ns := gcra.Ceil(tat)
	return time.Duration((ns + 999_999) / 1e6 * 1e6)
}

// checkStored checks that key holds tat and expires with it. A TAT due
// within a few milliseconds may have been reached meanwhile: the key, read
// with the server's time in one transaction, may then be gone, as it
// should.
func checkStored(t *testing.T, c *redis.Client, key string, tat gcra.Time) {
	t.Helper()
	ctx := context.Background()
	var get *redis.StringCmd
	var exp *redis.DurationCmd
	var clock *redis.TimeCmd
	if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get, exp, clock = p.Get(ctx, key), p.PExpireTime(ctx, key), p.Time(ctx)
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("%s: %v", key, err)
	}
	want := expiryOf(tat)
	if errors.Is(get.Err(), redis.Nil) && exp.Val() == -2 && time.Duration(clock.Val().UnixNano()) >= want {
		return // expired with its TAT, before the check
	}
	if got, want := get.Val(), formatTAT(tat); got != want {
		t.Errorf("%s holds %q, want %q", key, got, want)
	}
	if got := exp.Val(); got != want {
		t.Errorf("%s expires at %v, want %v", key, got, want)
	}
}

// TestFarFutureTAT stores TATs far ahead of now, which the scripts never
// write (another writer's, or a corrupt copy's), some beyond what an int64
// of nanoseconds holds, and checks that each is taken as a key that has just
// used its whole burst: refused with Remaining 0, RetryAfter T and
// ResetAfter burst*T exactly, counted from the decision's At, and stored
// again as such, with the matching expiry. A look repairs it too.
func TestFarFutureTAT(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	hour := strconv.FormatInt(time.Now().Add(time.Hour).UnixNano(), 10)
	values := []string{
		hour,
		hour + ":3",
		"9223372036854775807",         // the largest int64
		"99999999999999999999999",     // 1e23ns: ahead of now by more than an int64 holds
		"18446744073709551616:5",      // 2^64, with a fraction
		strings.Repeat("9", 40),       // beyond 2^53 in seconds
		strings.Repeat("9", 400),      // beyond what a double holds
		"0" + strings.Repeat("9", 30), // leading zeros
	}
	for _, tt := range []struct {
		limit  int
		period time.Duration
		burst  int
	}{
		{10, time.Second, 10}, // T = 100ms exactly
		{7, time.Second, 3},   // T = 142857142+6/7 ns
	} {
		g := must(New(c, tt.limit, tt.period, WithBurst(tt.burst), WithPrefix(freshPrefix())))
		key := g.Key("k")
		for _, v := range values {
			for _, peek := range []bool{false, true} {
				what := fmt.Sprintf("%d/%v burst %d, stored %.30s, peek %v", tt.limit, tt.period, tt.burst, v, peek)
				if err := c.Set(ctx, key, v, 0).Err(); err != nil {
					t.Fatal(err)
				}
				var d limits.Decision
				var err error
				if peek {
					d, err = g.Peek(ctx, "k")
				} else {
					d, err = g.Allow(ctx, "k")
				}
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				want := limits.Decision{
					Reason: limits.ReasonRateLimited, Limit: tt.limit, Period: tt.period, Burst: tt.burst, Cost: 1,
					Remaining:  0,
					RetryAfter: time.Duration(gcra.Ceil(g.lim.Load().p.T)),
					ResetAfter: time.Duration(gcra.Ceil(g.lim.Load().p.D)),
					At:         d.At,
				}
				if public(d) != public(want) {
					t.Errorf("%s:\n got %+v\nwant %+v", what, public(d), public(want))
				}
				checkStored(t, c, key, g.lim.Load().p.Add(gcra.Time{NS: d.At.UnixNano()}, g.lim.Load().p.D))
			}
		}
	}
}

// TestFarFutureTATRecovers checks that a key whose stored TAT ran far
// ahead recovers as any key that has used its burst does: gone from Redis
// and back to its full burst burst*T after the decision that repaired it.
func TestFarFutureTATRecovers(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	g := must(New(c, 100, time.Second, WithBurst(10), WithPrefix(freshPrefix()))) // T = 10ms, burst*T = 100ms
	c.Set(ctx, g.Key("k"), strconv.FormatInt(time.Now().Add(100*24*time.Hour).UnixNano(), 10), 0)
	d, err := g.Allow(ctx, "k")
	if err != nil || d.Allowed || d.ResetAfter != 100*time.Millisecond {
		t.Fatalf("%+v, %v; want refused with ResetAfter 100ms", d, err)
	}
	time.Sleep(time.Until(d.At.Add(d.ResetAfter)) + 2*time.Millisecond) // Redis expires a key once its millisecond has passed
	if n := c.Exists(ctx, g.Key("k")).Val(); n != 0 {
		t.Errorf("the key is still there %v after its repair", time.Since(d.At))
	}
	if d, err := g.AllowN(ctx, "k", 10); err != nil || !d.Allowed {
		t.Errorf("the full burst after ResetAfter: %+v, %v", d, err)
	}
}

// TestPastTAT checks that a stored TAT in the past, however old, is a key
// that owes nothing.
func TestPastTAT(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	g := must(New(c, 7, time.Second, WithBurst(3), WithPrefix(freshPrefix())))
	for _, v := range []string{"0", "12345", "1:6", "000", strconv.FormatInt(time.Now().Add(-time.Second).UnixNano(), 10) + ":1"} {
		c.Set(ctx, g.Key("k"), v, 0)
		d, err := g.Peek(ctx, "k")
		if err != nil || !d.Allowed || d.Remaining != 3 || d.ResetAfter != 0 {
			t.Errorf("stored %q: Peek %+v, %v; want the full burst", v, d, err)
		}
		if got := c.Get(ctx, g.Key("k")).Val(); got != v {
			t.Errorf("stored %q: a look changed it to %q", v, got)
		}
		d, err = g.AllowN(ctx, "k", 3)
		if err != nil || !d.Allowed || d.Remaining != 0 {
			t.Errorf("stored %q: AllowN(3) %+v, %v", v, d, err)
		}
	}
}

// TestFractionOfAnotherLimit checks that a fraction not below this
// limiter's den, as one of another limit would store, rounds the TAT up
// to the next nanosecond.
func TestFractionOfAnotherLimit(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	g := must(New(c, 7, time.Second, WithBurst(3), WithPrefix(freshPrefix()))) // den 7
	x := time.Now().Add(100 * time.Millisecond).UnixNano()
	for _, tt := range []struct {
		frac string
		want int64 // the TAT, in whole nanoseconds rounded up
	}{
		{"0", x}, {"1", x + 1}, {"6", x + 1}, {"7", x + 1}, {"4294967295", x + 1}, {strings.Repeat("9", 30), x + 1},
	} {
		c.Set(ctx, g.Key("k"), fmt.Sprintf("%d:%s", x, tt.frac), 0)
		d, err := g.Peek(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if got := d.At.Add(d.ResetAfter).UnixNano(); got != tt.want {
			t.Errorf("fraction %s: the key resets at %d, want %d", tt.frac, got, tt.want)
		}
	}
}

// TestForeignValue checks that a key holding something other than a TAT
// gives an error naming the key, handled by the failure policy and counted,
// and is left alone.
func TestForeignValue(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	g := must(New(c, 10, time.Hour, WithPrefix(freshPrefix())))
	values := map[string]string{
		"string": "hello", "empty": "", "negative": "-5", "decimal": "1.5", "spaced": " 123",
		"sign": "+123", "exponent": "1e18", "hex": "0x10",
		"colon": "123:", "lead": ":5", "letters": "123:x", "twice": "1:2:3", "signed": "123:-1", "fspace": "123: 1",
	}
	for k, v := range values {
		c.Set(ctx, g.Key(k), v, 0)
	}
	c.RPush(ctx, g.Key("list"), "x")
	values["list"] = ""
	errs := 0
	for k := range values {
		for _, peek := range []bool{false, true} {
			var d limits.Decision
			var err error
			if peek {
				d, err = g.Peek(ctx, k)
			} else {
				d, err = g.Allow(ctx, k)
			}
			errs++
			if !errors.Is(err, ErrUnavailable) || d.Allowed || d.Reason != limits.ReasonUnavailable {
				t.Errorf("%s: %+v, %v", k, d, err)
				continue
			}
			if !strings.Contains(err.Error(), "key "+g.Key(k)+" does not hold a TAT") {
				t.Errorf("%s: error %q does not name the key", k, err)
			}
		}
	}
	for k, v := range values {
		if k == "list" {
			continue
		}
		if got := c.Get(ctx, g.Key(k)).Val(); got != v {
			t.Errorf("%s: the foreign value %q became %q", k, v, got)
		}
	}
	if s := g.Stats(); s.Errors != uint64(errs) || s.Answered != 0 {
		t.Errorf("Stats %+v, want %d errors", s, errs)
	}
}

// public returns d's exported fields, with At's monotonic reading
// dropped, for comparisons.
func public(d limits.Decision) limits.Decision {
	return limits.Decision{
		Allowed: d.Allowed, Reason: d.Reason, Limit: d.Limit, Period: d.Period, Burst: d.Burst, Cost: d.Cost,
		Remaining: d.Remaining, RetryAfter: d.RetryAfter, ResetAfter: d.ResetAfter, At: d.At.Round(0),
	}
}
