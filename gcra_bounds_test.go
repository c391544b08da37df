package limits

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

// TestGCRADatedRequestsRemembered dates requests an hour and a minute in
// the past for more keys than one shard holds: each key's charge is still
// owed at the date of its next request, so that request is refused, as it
// is with one key.
func TestGCRADatedRequestsRemembered(t *testing.T) {
	for _, back := range []time.Duration{time.Hour, time.Minute} {
		t.Run(back.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := NewGCRA(10, time.Second, WithMaxKeys(100))
				at := time.Now().Add(-back)
				for i := range 50 {
					if d := g.AllowNAt(at, fmt.Sprint("k", i), 10); !d.Allowed {
						t.Fatalf("%v back: key %d's burst refused: %+v", back, i, d)
					}
				}
				allowed := 0
				for i := range 50 {
					if d := g.AllowNAt(at, fmt.Sprint("k", i), 1); d.Allowed {
						allowed++
					}
				}
				if allowed != 0 {
					t.Errorf("%v back: %d of 50 keys allowed past their burst at the same date", back, allowed)
				}
			})
		})
	}
}

// TestGCRATableFullOnlyWhenFull fills a table of several shards (16, and
// 261) to its cap with keys owing a minute, but for one owing 6 s: 7 s
// later a new key takes that key's place, in every trial, and the next new
// key finds the table full of keys in use.
func TestGCRATableFullOnlyWhenFull(t *testing.T) {
	for trial := range 8 {
		maxKeys := 12_000
		if trial%4 == 3 {
			maxKeys = 200_000
		}
		t.Run(fmt.Sprint(trial), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := NewGCRA(10, time.Minute, WithMaxKeys(maxKeys))
				if len(g.shards) < 2 {
					t.Fatalf("%d shards: the test needs several", len(g.shards))
				}
				for i := range maxKeys - 1 {
					g.AllowN(fmt.Sprint("k", i), 10)
				}
				g.AllowN("short", 1)
				time.Sleep(7 * time.Second)
				if d := g.Allow("new"); !d.Allowed {
					t.Fatalf("trial %d, %d shards: a new key with one key expired: %+v", trial, len(g.shards), d)
				}
				if d := g.Allow("newer"); d.Reason != ReasonTableFull {
					t.Errorf("trial %d: a new key with every key in use: %+v", trial, d)
				}
				if n := g.TableFull(); n != 1 {
					t.Errorf("trial %d: TableFull = %d, want 1", trial, n)
				}
			})
		})
	}
}

// TestGCRAPeekTableFull checks that Peek reports the table_full refusal
// that Allow would give a new key.
func TestGCRAPeekTableFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGCRA(1, time.Minute, WithMaxKeys(1))
		g.Allow("a")
		p := g.Peek("b")
		d := g.Allow("b")
		if d.Reason != ReasonTableFull {
			t.Fatalf("Allow(b) in a full table: %+v", d)
		}
		if !sameDecision(p, d) {
			t.Errorf("Peek(b) = %+v, Allow(b) = %+v", p, d)
		}
		if p := g.PeekAt(time.Now().Add(time.Minute), "b"); p.Reason != ReasonTableFull {
			t.Errorf("PeekAt a minute ahead, with a still owing by the clock: %+v", p)
		}
		time.Sleep(time.Minute)
		if p, d := g.Peek("b"), g.Allow("b"); !p.Allowed || p.Remaining != 1 || !d.Allowed {
			t.Errorf("once a expired: Peek %+v, Allow %+v", p, d)
		}
		if p, d := g.Peek("c"), g.Allow("c"); !sameDecision(p, d) || d.Reason != ReasonTableFull {
			t.Errorf("with b in use: Peek %+v, Allow %+v", p, d)
		}
	})
}

// TestGCRARefundOrders takes two and three overlapping requests for a key
// and refunds them in every order, at once and with time passing: the key
// is left as it was before them.
func TestGCRARefundOrders(t *testing.T) {
	orders := [][]int{{0, 1}, {1, 0}, {0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}
	for _, order := range orders {
		for _, pause := range []time.Duration{0, 30 * time.Millisecond, 150 * time.Millisecond} {
			t.Run(fmt.Sprint(order, pause), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					g := NewGCRA(10, time.Second, WithBurst(5)) // T = 100ms
					ctx := context.Background()
					g.AllowN("k", 1)
					ds := make([]Decision, len(order))
					for i := range ds {
						ds[i] = g.AllowN("k", 1)
					}
					time.Sleep(pause)
					want := NewGCRA(10, time.Second, WithBurst(5))
					want.start = g.start
					want.AllowNAt(g.start, "k", 1)
					for _, i := range order {
						if err := g.Refund(ctx, "k", ds[i]); err != nil {
							t.Fatal(err)
						}
					}
					if got, w := g.Peek("k"), want.Peek("k"); !sameDecision(got, w) {
						t.Errorf("refunds in order %v after %v: %+v, want %+v", order, pause, got, w)
					}
				})
			})
		}
	}
}
