package limits

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// shardIndex returns the index of the shard holding key in g.
func shardIndex(g *GCRA, key string) int {
	s := g.shardOf(maphash.String(g.seed, key))
	return int(s.id)
}

// TestGCRATableFullRechargedShards fills a table of many shards to its
// cap, then charges every key again but one, kept in the last shard: in
// every other shard the key that expired soonest now owes longer. Once
// the one key left has expired, a new key takes its place, wherever the
// new key's shard is, and the next new key finds the table full of keys
// in use.
func TestGCRATableFullRechargedShards(t *testing.T) {
	for _, maxKeys := range []int{12_000, 60_000} {
		for trial := range 3 {
			t.Run(fmt.Sprint(maxKeys, "/", trial), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					g := NewGCRA(2, 20*time.Second, WithMaxKeys(maxKeys)) // T = 10s, burst 2
					last := len(g.shards) - 1
					if last < 4 {
						t.Fatalf("%d shards: the test needs several", len(g.shards))
					}
					keys := make([]string, maxKeys)
					kept := -1
					for i := range keys {
						keys[i] = fmt.Sprint("k", trial, "-", i)
						if d := g.AllowN(keys[i], 1); !d.Allowed {
							t.Fatalf("key %d refused while filling: %+v", i, d)
						}
						if kept < 0 && shardIndex(g, keys[i]) == last {
							kept = i
						}
					}
					if kept < 0 {
						t.Fatal("no key in the last shard")
					}
					time.Sleep(5 * time.Second)
					for i, k := range keys {
						if i == kept {
							continue
						}
						if d := g.AllowN(k, 1); !d.Allowed {
							t.Fatalf("key %d's second request refused: %+v", i, d)
						}
					}
					time.Sleep(6 * time.Second) // the kept key expired 1s ago, the others owe 9s
					for j := 0; ; j++ {
						k := fmt.Sprint("new", j)
						if shardIndex(g, k) == last {
							continue // a new key whose own shard holds the expired key proves nothing
						}
						if d := g.Allow(k); !d.Allowed {
							t.Fatalf("%d shards: a new key in shard %d with one key expired in shard %d: %+v",
								len(g.shards), shardIndex(g, k), last, d)
						}
						break
					}
					if d := g.Allow("newer"); d.Reason != ReasonTableFull {
						t.Errorf("a new key with every key in use: %+v", d)
					}
				})
			})
		}
	}
}

// TestGCRATableFullAgainstModelRecharges fills tables of several sizes
// to their cap, charges every key again but a few chosen at random, whose
// places are the only ones free once they expire, and sends new keys and
// more charges at random: every decision, ReasonTableFull included, is the
// map model's, which refuses a new key exactly when every key it holds is
// in use.
func TestGCRATableFullAgainstModelRecharges(t *testing.T) {
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 19))
		maxKeys := []int{3_000, 12_000, 20_000}[rng.IntN(3)]
		t.Run(fmt.Sprint(seed, "/", maxKeys), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const limit, period, burst = 4, 40 * time.Second, 4 // T = 10s
				g := NewGCRA(limit, period, WithBurst(burst), WithMaxKeys(maxKeys))
				m := newMapGCRA(limit, period, burst, maxKeys)
				check := func(step int, k string, n int, charge bool) Decision {
					real := g.now()
					var got Decision
					if charge {
						got = g.AllowN(k, n)
					} else {
						got = g.Peek(k)
					}
					want := m.allowN(real, false, 0, k, n, charge)
					if !want.same(g, got) {
						t.Fatalf("step %d: %s(%s, %d) = %+v, model %+v", step, map[bool]string{true: "AllowN", false: "Peek"}[charge], k, n, got, want)
					}
					return got
				}
				keys := make([]string, maxKeys)
				for i := range keys {
					keys[i] = fmt.Sprint("k", i)
					check(-1, keys[i], 1, true) // owes 10s
				}
				kept := map[int]bool{}
				for range 1 + rng.IntN(3) {
					kept[rng.IntN(maxKeys)] = true
				}
				time.Sleep(5 * time.Second)
				for i, k := range keys {
					if !kept[i] {
						check(-1, k, 1+rng.IntN(2), true) // owes 15 or 25s
					}
				}
				time.Sleep(time.Duration(6+rng.IntN(9)) * time.Second) // the kept keys have expired
				full := 0
				for step := range 300 {
					switch r := rng.IntN(10); {
					case r < 5:
						if d := check(step, fmt.Sprint("new", step), 1, true); d.Reason == ReasonTableFull {
							full++
						}
					case r < 7:
						check(step, fmt.Sprint("new", step), 1, false)
					default:
						check(step, keys[rng.IntN(maxKeys)], 1, true)
					}
				}
				if full == 0 {
					t.Errorf("no new key refused: the test needs the table kept full")
				}
				checkSoonest(t, g)
			})
		})
	}
}

// checkSoonest checks, with no call running, that every shard is swept,
// that each chunk's recorded soonest expiry is exact or, if the chunk holds
// an expired key, earlier; that each shard's next is the least of its
// chunks'; and that soon holds each shard's next, or an earlier time if
// that next has passed, and at each node the least of its children.
func checkSoonest(t *testing.T, g *GCRA) {
	t.Helper()
	clock := g.clock(g.now())
	if n := g.swept.Load(); n != int64(len(g.shards)) {
		t.Errorf("%d of %d shards swept, with the table at its cap", n, len(g.shards))
	}
	for i := range g.shards {
		s := &g.shards[i]
		s.mu.Lock()
		next := int64(math.MaxInt64)
		for c := range s.chunks() {
			m := int64(math.MaxInt64)
			for j := c << chunkShift; j < min((c+1)<<chunkShift, len(s.slots)); j++ {
				if e := &s.slots[j]; e.tag > tombstone {
					m = min(m, g.expiry(e))
				}
			}
			if got := s.chunk(g)[c]; got != m && (got > m || m > clock) {
				t.Errorf("shard %d chunk %d: soonest %d, exactly %d, clock %d", i, c, got, m, clock)
			}
			next = min(next, s.chunk(g)[c])
		}
		if s.next != next {
			t.Errorf("shard %d: next %d, least of its chunks' %d", i, s.next, next)
		}
		if leaf := g.soon[0][i].Load(); leaf != next && (leaf > next || next > clock) {
			t.Errorf("shard %d: soon holds %d, next %d, clock %d", i, leaf, next, clock)
		}
		s.mu.Unlock()
	}
	for l := 1; l < len(g.soon); l++ {
		for i := range g.soon[l] {
			m := int64(math.MaxInt64)
			for j := i * soonFan; j < (i+1)*soonFan && j < len(g.soon[l-1]); j++ {
				m = min(m, g.soon[l-1][j].Load())
			}
			if got := g.soon[l][i].Load(); got != m {
				t.Errorf("soon level %d node %d: %d, least of its children %d", l, i, got, m)
			}
		}
	}
}

// TestGCRASoonestExactConcurrent runs goroutines charging keys held, new
// keys, resets and refunds on a table at its cap while time moves on, then
// checks that every shard's soonest expiry and the tree of them are exact:
// racing raises and lowers of the lock-free tree lose nothing.
func TestGCRASoonestExactConcurrent(t *testing.T) {
	for trial := range 4 {
		t.Run(fmt.Sprint(trial), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const maxKeys = 6_000
				g := NewGCRA(4, 40*time.Second, WithMaxKeys(maxKeys)) // T = 10s
				var wg sync.WaitGroup
				for w := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rng := rand.New(rand.NewPCG(uint64(trial), uint64(w)))
						ctx := context.Background()
						for i := range 3000 {
							if i%200 == 0 {
								time.Sleep(time.Duration(rng.Int64N(int64(3 * time.Second))))
							}
							k := fmt.Sprint("k", rng.IntN(2*maxKeys))
							switch r := rng.IntN(20); {
							case r < 16:
								g.AllowN(k, 1+rng.IntN(2))
							case r < 18:
								if d := g.AllowN(k, 1); d.Allowed {
									g.Refund(ctx, k, d)
								}
							case r < 19:
								g.Reset(k)
							default:
								g.Peek(k)
							}
						}
					}()
				}
				wg.Wait()
				if g.TableFull() == 0 {
					t.Errorf("no new key refused: the test needs the table kept full")
				}
				checkSoonest(t, g)
			})
		})
	}
}

// TestGCRAExpiredKeysChargedAgain fills a one-shard table to its cap with
// two keys that expire a second apart and others owing long, then charges
// the two again once both have expired: after the first, the record of
// their chunk may stay early, as the other still has expired; after the
// second it must be exact again, and a new key finds the table full.
func TestGCRAExpiredKeysChargedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := NewGCRA(2, 20*time.Second, WithMaxKeys(16)) // T = 10s, burst 2
		if len(g.shards) != 1 || g.shardMax > 1<<chunkShift {
			t.Fatalf("%d shards of up to %d slots: the test needs one chunk", len(g.shards), g.shardMax)
		}
		g.AllowN("a", 1) // owes until 10s
		time.Sleep(time.Second)
		g.AllowN("b", 1) // until 11s
		for i := range 14 {
			g.AllowN(fmt.Sprint("k", i), 2) // until 21s
		}
		checkSoonest(t, g)
		time.Sleep(11 * time.Second)
		for _, k := range []string{"a", "b"} {
			if d := g.AllowN(k, 1); !d.Allowed {
				t.Fatalf("%s refused once expired: %+v", k, d)
			}
			checkSoonest(t, g)
		}
		if got, want := g.shards[0].next, int64(21*time.Second); got != want {
			t.Errorf("next %v, want the soonest expiry, 21s", time.Duration(got))
		}
		if d := g.Allow("new"); d.Reason != ReasonTableFull {
			t.Errorf("a new key with every key in use: %+v", d)
		}
	})
}

// TestGCRARaiseRacingLower lowers a shard's record in soon while another
// shard's raise has read the children of their node and not yet written
// it: the raise reads them again, and the node ends the least of them.
func TestGCRARaiseRacingLower(t *testing.T) {
	g := NewGCRA(1, time.Hour, WithMaxKeys(2000))
	if len(g.shards) < 2 || len(g.soon) != 2 {
		t.Fatalf("%d shards, %d levels: the test needs two shards under one node", len(g.shards), len(g.soon))
	}
	g.lower(0, 5)
	g.lower(1, 7)
	once := false
	testHookRaise = func() {
		if !once {
			once = true
			g.lower(1, 5) // the node already holds 5: the lower stops there
		}
	}
	defer func() { testHookRaise = nil }()
	g.raise(0, 9)
	if got := g.soon[1][0].Load(); got != 5 {
		t.Errorf("root %d after raising shard 0 to 9 while shard 1 was lowered to 5", got)
	}
}

// TestGCRAFreedPlaceKept lets another new key in between a new key's
// freeing a place at the cap and its taking one: the first keeps the place
// it freed, and the second, finding every key held in use, is refused.
func TestGCRAFreedPlaceKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const maxKeys = 8
		g := NewGCRA(1, time.Second, WithBurst(10), WithMaxKeys(maxKeys))
		for i := range maxKeys - 1 {
			if d := g.AllowN(fmt.Sprint("busy", i), 10); !d.Allowed {
				t.Fatalf("busy%d: %+v", i, d)
			}
		}
		if d := g.Allow("short"); !d.Allowed {
			t.Fatalf("short: %+v", d)
		}
		time.Sleep(2 * time.Second) // "short" has expired; the others owe 8 s
		// A new key whose probe meets an empty slot before any expired key,
		// so that it must free a place (with one shard, the only one).
		first := ""
		for i := 0; first == "" && i < 10000; i++ {
			k := fmt.Sprint("first", i)
			h := maphash.String(g.seed, k)
			s := g.shardOf(h)
			s.mu.Lock()
			at, free := s.lookup(g, g.tagOf(h), g.now())
			if at < 0 && free >= 0 && s.slots[free].tag == 0 {
				first = k
			}
			s.mu.Unlock()
		}
		if first == "" || len(g.shards) != 1 {
			t.Fatalf("no key found to test with, %d shards", len(g.shards))
		}
		var racer Decision
		calls := 0
		testHookFreed = func() {
			calls++
			if calls == 1 {
				racer = g.Allow("racer")
			}
		}
		defer func() { testHookFreed = nil }()
		if d := g.Allow(first); !d.Allowed {
			t.Errorf("the key that freed the place: %+v", d)
		}
		if calls == 0 {
			t.Fatal("no place was freed")
		}
		if racer.Reason != ReasonTableFull {
			t.Errorf("a new key while the only place freed is kept: %+v", racer)
		}
		if n := g.Len(); n != maxKeys {
			t.Errorf("%d keys held, want %d", n, maxKeys)
		}
	})
}

// TestGCRAPeekFullShard fills one shard with keys in use, the table
// below its cap: a new key of that shard finds no place, and Peek says so
// as Allow does, though places in the other shard are free.
func TestGCRAPeekFullShard(t *testing.T) {
	g := NewGCRA(1, time.Hour, WithMaxKeys(1536))
	if len(g.shards) != 2 || g.shardMax != 1024 {
		t.Fatalf("%d shards of up to %d slots: the test needs 2 of 1,024", len(g.shards), g.shardMax)
	}
	full := &g.shards[0]
	var fresh []string // new keys of shard 0
	for i := 0; len(fresh) < 5 && i < 100_000; i++ {
		k := fmt.Sprint("k", i)
		if g.shardOf(maphash.String(g.seed, k)) != full {
			continue
		}
		if int(full.used) < g.shardMax {
			if d := g.Allow(k); !d.Allowed {
				t.Fatalf("%s, shard 0 holding %d: %+v", k, full.used, d)
			}
			continue
		}
		fresh = append(fresh, k)
	}
	if len(fresh) == 0 {
		t.Fatalf("shard 0 holds %d of %d slots", full.used, g.shardMax)
	}
	for _, k := range fresh {
		p := g.Peek(k)
		a := g.Allow(k)
		if p.Reason != a.Reason || a.Reason != ReasonTableFull {
			t.Errorf("%s with shard 0 full of keys in use: Peek %v, Allow %v; want both table_full", k, p.Reason, a.Reason)
		}
	}
	if n := g.Len(); n != g.shardMax {
		t.Errorf("%d keys counted, want %d", n, g.shardMax)
	}
}
