package redislimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

func mustPanic(t *testing.T, f func()) (msg string) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Fatal("no panic")
		}
		msg = fmt.Sprint(r)
	}()
	f()
	return ""
}

func TestNewPanics(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never contacted
	defer c.Close()
	tests := []struct {
		name string
		f    func()
		want string
	}{
		{"nil client", func() { New(nil, 1, time.Second) }, "redislimit: nil client"},
		{"zero limit", func() { New(c, 0, time.Second) }, "redislimit: limit must be >= 1, got 0"},
		{"negative limit", func() { New(c, -3, time.Second) }, "redislimit: limit must be >= 1, got -3"},
		{"zero period", func() { New(c, 1, 0) }, "redislimit: period must be > 0, got 0s"},
		{"zero burst", func() { New(c, 1, time.Second, WithBurst(0)) }, "redislimit: burst must be >= 1, got 0"},
		{"zero timeout", func() { New(c, 1, time.Second, WithTimeout(0)) }, "redislimit: timeout must be > 0, got 0s"},
		{"hash tag, no prefix", func() { New(c, 1, time.Second, WithPrefix(""), WithHashTag()) }, `redislimit: a hash tag needs a non-empty prefix without braces, got ""`},
		{"hash tag, braces", func() { New(c, 1, time.Second, WithPrefix("a{b}:"), WithHashTag()) }, `redislimit: a hash tag needs a non-empty prefix without braces, got "a{b}:"`},
		{"huge burst", func() { New(c, 1, time.Hour, WithBurst(1_000_000)) }, "redislimit: a burst of 1000000 at one event per 1h0m0s takes too long to recover"},
		{"nil fallback", func() { Fallback(nil) }, "redislimit: nil fallback GCRA"},
	}
	for _, tt := range tests {
		if got := mustPanic(t, tt.f); got != tt.want {
			t.Errorf("%s: panic %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestAccessorsAndKeys(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	g := New(c, 3, time.Second)
	if g.Limit() != 3 || g.Period() != time.Second || g.Burst() != 3 || g.EmissionInterval() != 333333334 {
		t.Errorf("accessors: %d %v %d %v", g.Limit(), g.Period(), g.Burst(), g.EmissionInterval())
	}
	for _, tt := range []struct {
		opts []Option
		want string
	}{
		{nil, "limits:alice"},
		{[]Option{WithPrefix("rl:login:")}, "rl:login:alice"},
		{[]Option{WithPrefix("")}, "alice"},
		{[]Option{WithHashTag()}, "{limits:}alice"},
		{[]Option{WithPrefix("rl:login:"), WithHashTag()}, "{rl:login:}alice"},
	} {
		if got := New(c, 1, time.Second, tt.opts...).Key("alice"); got != tt.want {
			t.Errorf("Key = %q, want %q", got, tt.want)
		}
	}
}

// TestStoredState checks the state in Redis: the TAT as an exact integer of
// nanoseconds since the Unix epoch, set to expire when it passes, and
// untouched by refusals and looks, with periods whose times no double holds
// exactly.
func TestStoredState(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	for _, period := range []time.Duration{time.Second, 7 * time.Hour, 50 * 365 * 24 * time.Hour} {
		g := New(c, 3, period, WithPrefix(freshPrefix()))
		key := g.Key("k")
		if _, _, err := g.decide(ctx, "k", 0, true); err != nil {
			t.Fatal(err)
		}
		if _, err := g.Peek(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if n := c.Exists(ctx, key).Val(); n != 0 {
			t.Fatalf("period %v: a look stored the key", period)
		}
		d, now, err := g.decide(ctx, "k", 2, true)
		if err != nil || !d.Allowed {
			t.Fatalf("period %v: %+v, %v", period, d, err)
		}
		tat := now + 2*int64(g.EmissionInterval())
		want := strconv.FormatInt(tat, 10)
		if got := c.Get(ctx, key).Val(); got != want {
			t.Errorf("period %v: stored %q, want %q (server time %d + 2T)", period, got, want, now)
		}
		if d.ResetAfter != 2*g.EmissionInterval() {
			t.Errorf("period %v: ResetAfter %v, want 2T = %v", period, d.ResetAfter, 2*g.EmissionInterval())
		}
		// The key expires when the TAT passes, rounded up to a millisecond.
		expire := c.PExpireTime(ctx, key).Val()
		if want := time.Duration((tat + 999_999) / 1e6 * 1e6); expire != want {
			t.Errorf("period %v: key expires at %v, want %v", period, expire, want)
		}
		if d, err := g.AllowN(ctx, "k", 2); err != nil || d.Allowed {
			t.Fatalf("period %v: over the burst: %+v, %v", period, d, err)
		}
		if got := c.Get(ctx, key).Val(); got != want {
			t.Errorf("period %v: a refusal changed the state to %q", period, got)
		}
	}
}

// TestKeyExpires checks that a key is gone from Redis once its TAT has
// passed.
func TestKeyExpires(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	g := New(c, 500, time.Second, WithBurst(2), WithPrefix(freshPrefix())) // T = 2ms
	d, err := g.AllowN(ctx, "k", 2)
	if err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	time.Sleep(d.ResetAfter + 2*time.Millisecond) // Redis expires a key once its millisecond has passed
	if n := c.Exists(ctx, g.Key("k")).Val(); n != 0 {
		t.Errorf("key still there %v after its TAT", d.ResetAfter)
	}
}

// TestAgreesWithLocal sends random requests to the Redis GCRA, replays them
// in a limits.GCRA at the times the server read from its clock, and checks
// that every decision is the same, field for field.
func TestAgreesWithLocal(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	for seed := range uint64(3) {
		rng := rand.New(rand.NewPCG(seed, 7))
		limit := 100 + rng.IntN(2000)
		burst := 1 + rng.IntN(8)
		g := New(c, limit, time.Second, WithBurst(burst), WithPrefix(freshPrefix()), WithTimeout(10*time.Second))
		local := limits.NewGCRA(limit, time.Second, limits.WithBurst(burst))
		origin := time.Now()
		var first int64
		allowed, refused := 0, 0
		for i := range 600 {
			key := strconv.Itoa(rng.IntN(3))
			n := rng.IntN(burst+3) - 1
			charge := rng.IntN(8) != 0
			if !charge {
				n = 1 // a Peek
			}
			got, now, err := g.decide(ctx, key, n, charge)
			if err != nil {
				t.Fatal(err)
			}
			if first == 0 {
				first = now
			}
			at := origin.Add(time.Duration(now - first))
			var want limits.Decision
			if charge {
				want = local.AllowNAt(at, key, n)
			} else {
				want = local.PeekAt(at, key)
			}
			if got != want {
				t.Fatalf("seed %d request %d: key %s cost %d charge %v at +%v:\nRedis %+v\nlocal %+v", seed, i, key, n, charge, time.Duration(now-first), got, want)
			}
			if got.Allowed {
				allowed++
			} else if got.Reason == limits.ReasonRateLimited {
				refused++
			}
			if rng.IntN(4) == 0 {
				time.Sleep(time.Duration(rng.Int64N(int64(g.EmissionInterval()))))
			}
		}
		if allowed == 0 || refused == 0 {
			t.Errorf("seed %d: %d allowed, %d refused: both should occur", seed, allowed, refused)
		}
	}
}

// TestNoScript checks that decisions go on after the server has lost its
// script cache, and load the script again.
func TestNoScript(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	g := New(c, 10, time.Hour, WithPrefix(freshPrefix()))
	for i := range 3 {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		d, err := g.Allow(ctx, "k")
		if err != nil || !d.Allowed || d.Remaining != 9-i {
			t.Fatalf("after SCRIPT FLUSH: %+v, %v", d, err)
		}
		if ok := c.ScriptExists(ctx, script.Hash()).Val(); len(ok) != 1 || !ok[0] {
			t.Errorf("the script was not loaded again")
		}
	}
	if s := g.Stats(); s != (Stats{Answered: 3}) {
		t.Errorf("Stats = %+v", s)
	}
}

// TestForeignValue checks that a key holding something other than a TAT
// gives an error, handled by the failure policy, and is left alone.
func TestForeignValue(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	g := New(c, 10, time.Hour, WithPrefix(freshPrefix()))
	c.Set(ctx, g.Key("string"), "hello", 0)
	c.Set(ctx, g.Key("short"), "12345", 0)
	c.RPush(ctx, g.Key("list"), "x")
	for _, k := range []string{"string", "short", "list"} {
		d, err := g.Allow(ctx, k)
		if !errors.Is(err, ErrUnavailable) || d.Allowed || d.Reason != limits.ReasonUnavailable {
			t.Errorf("%s: %+v, %v", k, d, err)
		}
		t.Logf("%s: %v", k, err)
	}
	if err := func() error { _, err := g.Allow(ctx, "string"); return err }(); err == nil || !strings.Contains(err.Error(), "does not hold a TAT") {
		t.Errorf("error %v does not say what is wrong", err)
	}
	if v := c.Get(ctx, g.Key("string")).Val(); v != "hello" {
		t.Errorf("the foreign value became %q", v)
	}
}
