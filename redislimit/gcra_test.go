package redislimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/internal/gcra"
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

func TestNewErrors(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never contacted
	defer c.Close()
	tests := []struct {
		name    string
		limit   int
		period  time.Duration
		opts    []Option
		want    string
		invalid bool // the error says the limit is invalid
	}{
		{"zero limit", 0, time.Second, nil, "redislimit: invalid limit: limit must be >= 1, got 0", true},
		{"negative limit", -3, time.Second, nil, "redislimit: invalid limit: limit must be >= 1, got -3", true},
		{"zero period", 1, 0, nil, "redislimit: invalid limit: period must be > 0, got 0s", true},
		{"zero burst", 1, time.Second, []Option{WithBurst(0)}, "redislimit: invalid limit: burst must be >= 1, got 0", true},
		{"negative burst", 1, time.Second, []Option{WithBurst(-1)}, "redislimit: invalid limit: burst must be >= 1, got -1", true},
		{"huge burst", 1, time.Hour, []Option{WithBurst(1_000_000)}, "redislimit: invalid limit: a burst of 1000000 at 1 per 1h0m0s takes too long to recover", true},
		{"zero timeout", 1, time.Second, []Option{WithTimeout(0)}, "redislimit: timeout must be > 0, got 0s", false},
		{"hash tag, no prefix", 1, time.Second, []Option{WithPrefix(""), WithHashTag()}, `redislimit: a hash tag needs a non-empty prefix without braces, got ""`, false},
		{"hash tag, braces", 1, time.Second, []Option{WithPrefix("a{b}:"), WithHashTag()}, `redislimit: a hash tag needs a non-empty prefix without braces, got "a{b}:"`, false},
		{"unknown policy", 1, time.Second, []Option{OnError(9)}, "redislimit: unknown failure policy 9", false},
	}
	for _, tt := range tests {
		g, err := New(c, tt.limit, tt.period, tt.opts...)
		if g != nil || err == nil || err.Error() != tt.want || strings.HasPrefix(err.Error(), "redislimit: invalid limit: ") != tt.invalid {
			t.Errorf("%s: New = %v, %v; want error %q", tt.name, g, err, tt.want)
		}
	}
	for name, f := range map[string]func(){
		"redislimit: nil client":        func() { New(nil, 1, time.Second) },
		"redislimit: nil fallback GCRA": func() { WithFallback(nil) },
	} {
		if got := mustPanic(t, f); got != name {
			t.Errorf("panic %q, want %q", got, name)
		}
	}
}

func TestAccessorsAndKeys(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	g := must(New(c, 3, time.Second))
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
		if got := must(New(c, 1, time.Second, tt.opts...)).Key("alice"); got != tt.want {
			t.Errorf("Key = %q, want %q", got, tt.want)
		}
	}
}

// TestStoredState checks the state in Redis: the TAT as an exact integer of
// nanoseconds since the Unix epoch, with ":" and the fraction of a
// nanosecond in units of 1/den when there is one, set to expire when it
// passes, and untouched by refusals and looks, with periods whose times no
// double holds exactly.
func TestStoredState(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	for _, tt := range []struct {
		limit  int
		period time.Duration
		twoT   string // 2T past the decision's At, as stored
	}{
		{3, time.Second, "666666666:2"},                       // T = 333333333+1/3 ns
		{7, time.Hour, "1028571428571:3"},                     // T = 514285714285+5/7 ns
		{3, 7 * time.Hour, "16800000000000"},                  // T = 2h20m exactly
		{3, 50 * 365 * 24 * time.Hour, "1051200000000000000"}, // 2T beyond 2^53
		{1_000_000_000, 3500 * time.Millisecond, "7"},         // T = 3.5ns
	} {
		g := must(New(c, tt.limit, tt.period, WithBurst(3), WithPrefix(freshPrefix())))
		key := g.Key("k")
		if _, err := g.AllowN(ctx, "k", 0); err != nil {
			t.Fatal(err)
		}
		if _, err := g.Peek(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if n := c.Exists(ctx, key).Val(); n != 0 {
			t.Fatalf("%d/%v: a look stored the key", tt.limit, tt.period)
		}
		d, err := g.AllowN(ctx, "k", 2)
		if err != nil || !d.Allowed {
			t.Fatalf("%d/%v: %+v, %v", tt.limit, tt.period, d, err)
		}
		twoT := parseTAT(t, tt.twoT)
		tat := g.lim.Load().p.Add(gcra.Time{NS: d.At.UnixNano()}, twoT)
		checkStored(t, c, key, tat)
		if want := time.Duration(gcra.Ceil(twoT)); d.ResetAfter != want {
			t.Errorf("%d/%v: ResetAfter %v, want 2T rounded up, %v", tt.limit, tt.period, d.ResetAfter, want)
		}
		if twoT.NS < int64(time.Second) {
			continue // the charge has passed already
		}
		if d, err := g.AllowN(ctx, "k", 2); err != nil || d.Allowed {
			t.Fatalf("%d/%v: over the burst: %+v, %v", tt.limit, tt.period, d, err)
		}
		if _, err := g.Peek(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		checkStored(t, c, key, tat)
	}
}

// TestKeyExpires checks that a key is gone from Redis once its TAT has
// passed.
func TestKeyExpires(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	g := must(New(c, 500, time.Second, WithBurst(2), WithPrefix(freshPrefix()))) // T = 2ms
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
		g := must(New(c, limit, time.Second, WithBurst(burst), WithPrefix(freshPrefix()), WithTimeout(10*time.Second)))
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
			got, err := g.decide(ctx, key, n, charge)
			if err != nil {
				t.Fatal(err)
			}
			now := got.At.UnixNano()
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
			if !want.At.Equal(at) {
				t.Fatalf("seed %d request %d: the local GCRA decided at %v, not at %v", seed, i, want.At, at)
			}
			got.At, want.At = time.Time{}, time.Time{}
			if public(got) != public(want) {
				t.Fatalf("seed %d request %d: key %s cost %d charge %v at +%v:\nRedis %+v\nlocal %+v", seed, i, key, n, charge, time.Duration(now-first), public(got), public(want))
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
	g := must(New(c, 10, time.Hour, WithPrefix(freshPrefix())))
	for i := range 3 {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		d, err := g.Allow(ctx, "k")
		if err != nil || !d.Allowed || d.Remaining != 9-i {
			t.Fatalf("after SCRIPT FLUSH: %+v, %v", d, err)
		}
		if ok := c.ScriptExists(ctx, decideScript.Hash()).Val(); len(ok) != 1 || !ok[0] {
			t.Errorf("the script was not loaded again")
		}
	}
	if s := g.Stats(); s != (Stats{Answered: 3}) {
		t.Errorf("Stats = %+v", s)
	}
}
