package bench

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/httprate"
	"github.com/limitsgo/limits"
	golimiter "github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	"github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ulmemory "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// Kind says where a Structure comes from.
type Kind int

const (
	// Baseline is a plain Go map or sync.Map: what a service writes before
	// it reaches for a library.
	Baseline Kind = iota
	// Ours is a type of package limits.
	Ours
	// Peer is another Go library.
	Peer
)

// String returns "baseline", "limits" or "peer".
func (k Kind) String() string {
	switch k {
	case Baseline:
		return "baseline"
	case Ours:
		return "limits"
	case Peer:
		return "peer"
	}
	return "unknown"
}

// Structure is one of the counters or limiters compared.
type Structure struct {
	// Name names the structure in benchmark names and on the command line
	// of cmd/memory, such as "MutexMap".
	Name string
	// Label names it in tables and charts, such as "sync.Mutex + map".
	Label string
	// Kind says where it comes from.
	Kind Kind
	// Config says how it is configured and what one call does.
	Config string
	// Refuses reports that, once filled, the structure refuses most calls:
	// it measures the refusal path. Every other structure is configured
	// with a limit no key reaches in a run, so that every call counts.
	Refuses bool
	// New returns a new, empty instance.
	New func() Instance
	// Churn, for the limiters, returns a new, empty instance whose keys
	// expire a millisecond after each request (one event per millisecond,
	// in bursts of one): every key's state has expired by the time the
	// benchmark comes back to it, as with a short-period limit on keys
	// that come and go. ChurnConfig says how it is configured. Nil for the
	// structures that keep no state per key that could expire.
	Churn       func() Instance
	ChurnConfig string
}

// Instance is a Structure made ready for use.
type Instance struct {
	// Op records one event for key, as one request would, and reports
	// whether the structure allowed it (plain counters always do).
	Op func(key string) bool
	// Fill brings key into the structure before any timing. Structures
	// that keep their keys keep the string passed, so pass a copy.
	Fill func(key string)
	// Close stops what the structure runs in the background, if anything.
	Close func()
}

// instance returns an Instance whose Fill is op and whose Close does
// nothing.
func instance(op func(string) bool) Instance {
	return Instance{Op: op, Fill: func(k string) { op(k) }, Close: func() {}}
}

// Policy of the limiters that must not refuse: no key reaches it in a run
// (a key sees a few hundred calls at most), and no key's state expires
// during one.
const (
	// gcraPeriod is the emission interval of the GCRA limiters: one event
	// a minute, so a key's state lasts at least a minute after its last
	// call.
	gcraPeriod = time.Minute
	// bigBurst is the burst of the GCRA and token-bucket limiters, and the
	// limit per window of the window counters.
	bigBurst = 1_000_000
	// window is the window of the window counters: an hour, so windows
	// change at most once in a run, at the turn of the hour.
	window = time.Hour
)

// Structures returns every structure compared: the baselines first, then
// the types of package limits, then the peers.
func Structures() []Structure {
	return []Structure{
		{
			Name:   "MutexMap",
			Label:  "sync.Mutex + map",
			Kind:   Baseline,
			Config: "A `map[string]int64` under one `sync.Mutex`; a call adds 1 to the key's count. The reference for every ratio.",
			New:    newMutexMap,
		},
		{
			Name:  "MutexMapClock",
			Label: "sync.Mutex + map + clock",
			Kind:  Baseline,
			Config: "The mutex map, with a `time.Now()` read before each call, as every limiter here reads the clock once per call: " +
				"it shows what the clock read costs on its own and next to a cache miss.",
			New: newMutexMapClock,
		},
		{
			Name:   "ShardedMap",
			Label:  "64 x (sync.Mutex + map)",
			Kind:   Baseline,
			Config: "64 maps, each under its own `sync.Mutex` and padded to 64 bytes; the key's `hash/maphash` hash picks the shard; a call adds 1.",
			New:    newShardedMap,
		},
		{
			Name:   "SyncMap",
			Label:  "sync.Map of *atomic.Int64",
			Kind:   Baseline,
			Config: "A `sync.Map` from key to `*atomic.Int64`; a call loads the key's counter and adds 1 (`LoadOrStore` for a new key).",
			New:    newSyncMap,
		},
		{
			Name:   "Estimator",
			Label:  "limits.Estimator",
			Kind:   Ours,
			Config: "`NewEstimator(4, 1024)`; a call is `Incr(key, 1)`. Fixed memory: 32 KiB.",
			New: func() Instance {
				e := limits.NewEstimator(4, 1024)
				return instance(func(k string) bool { e.Incr(k, 1); return true })
			},
		},
		{
			Name:   "Rate",
			Label:  "limits.Rate",
			Kind:   Ours,
			Config: "`NewRate(time.Hour)` (its default: each window counts exactly first, in a table of 1,024 lines of 16 key fingerprints and counts, and the keys that find their line full in a conservative 4 x 4096 sketch of 32-bit counters); a call is `Observe(key, 1)`, which reads the clock. Fixed memory: 256 KiB.",
			New: func() Instance {
				r := limits.NewRate(window)
				return instance(func(k string) bool { r.Observe(k, 1); return true })
			},
		},
		{
			Name:   "Inflight",
			Label:  "limits.Inflight",
			Kind:   Ours,
			Config: "`NewInflight()` (4 x 8192 counters); a call is `Incr(key, 1)` and `Close` on the guard. Fixed memory: 256 KiB.",
			New: func() Instance {
				in := limits.NewInflight()
				return instance(func(k string) bool {
					g, _ := in.Incr(k, 1)
					g.Close()
					return true
				})
			},
		},
		{
			Name:  "GCRA",
			Label: "limits.GCRA",
			Kind:  Ours,
			Config: "`NewGCRA(1_000_000, 1_000_000*time.Minute)`: one event a minute per key with a burst of 1,000,000, " +
				"so every call is allowed and charged; default table cap (1,048,576 keys). A call is `Allow(key)`.",
			New: func() Instance {
				g := limits.NewGCRA(bigBurst, bigBurst*gcraPeriod)
				return instance(func(k string) bool { return g.Allow(k).Allowed })
			},
			ChurnConfig: "`NewGCRA(1, time.Millisecond)`.",
			Churn: func() Instance {
				g := limits.NewGCRA(1, time.Millisecond)
				return instance(func(k string) bool { return g.Allow(k).Allowed })
			},
		},
		{
			Name:    "GCRARefused",
			Label:   "limits.GCRA (refusing)",
			Kind:    Ours,
			Refuses: true,
			Config: "`NewGCRA(100, time.Hour)`, each key filled with `AllowN(key, 100)`, its whole burst; a call is `Allow(key)`, " +
				"refused unless the key has earned a request back (one per 36 s): nearly every call takes the refusal path, " +
				"with its exact `RetryAfter`. (At 100 a second no key would be refused: with 1,000,000 keys each sees only a few calls a second.)",
			New: func() Instance {
				g := limits.NewGCRA(100, time.Hour)
				return Instance{
					Op:    func(k string) bool { return g.Allow(k).Allowed },
					Fill:  func(k string) { g.AllowN(k, 100) },
					Close: func() {},
				}
			},
		},
		{
			Name:  "XTimeRate",
			Label: "x/time/rate",
			Kind:  Peer,
			Config: "golang.org/x/time/rate: a `map[string]*rate.Limiter` under a `sync.Mutex`, one " +
				"`rate.NewLimiter(rate.Every(time.Minute), 1_000_000)` per key; a call finds the key's limiter and calls `Allow()`.",
			New:         newXTimeRate,
			ChurnConfig: "`rate.NewLimiter(rate.Every(time.Millisecond), 1)` per key.",
			Churn:       func() Instance { return newXTimeRateOf(rate.Every(time.Millisecond), 1) },
		},
		{
			Name:  "ThrottledMem",
			Label: "throttled memstore",
			Kind:  Peer,
			Config: "throttled/v2: `NewGCRARateLimiterCtx` over `memstore.NewCtx(0)` (a map under a `sync.RWMutex`, no key limit), " +
				"`RateQuota{MaxRate: PerDuration(1, time.Minute), MaxBurst: 999_999}` (a burst of 1,000,000); a call is `RateLimitCtx(ctx, key, 1)`.",
			New:         func() Instance { return newThrottled(0) },
			ChurnConfig: "`RateQuota{MaxRate: PerDuration(1, time.Millisecond), MaxBurst: 0}`.",
			Churn:       func() Instance { return newThrottledOf(0, throttled.PerDuration(1, time.Millisecond), 0) },
		},
		{
			Name:  "ThrottledLRU",
			Label: "throttled LRU memstore",
			Kind:  Peer,
			Config: "As throttled memstore, over `memstore.NewCtx(1 << 20)`: an LRU cache (hashicorp/golang-lru) " +
				"of up to 1,048,576 keys, so nothing is evicted. The store hands each key to the cache as an `interface{}`, " +
				"which allocates on each of the two lookups a call makes.",
			New: func() Instance { return newThrottled(1 << 20) },
		},
		{
			Name:  "GoLimiter",
			Label: "go-limiter memorystore",
			Kind:  Peer,
			Config: "sethvargo/go-limiter: `memorystore.New(&Config{Tokens: 1_000_000, Interval: time.Hour})`, " +
				"other fields default (sweep every 6 h); a call is `Take(ctx, key)`.",
			New:         newGoLimiter,
			ChurnConfig: "`Config{Tokens: 1, Interval: time.Millisecond}`.",
			Churn:       func() Instance { return newGoLimiterOf(1, time.Millisecond) },
		},
		{
			Name:  "Httprate",
			Label: "httprate LocalCounter",
			Kind:  Peer,
			Config: "go-chi/httprate: `NewLocalLimitCounter(time.Hour)`; a call does what its middleware does per request: " +
				"reads the clock, `Get` for the current and previous windows, the sliding estimate against a limit of " +
				"1,000,000 an hour, and `IncrementBy(key, window, 1)`.",
			New:         newHttprate,
			ChurnConfig: "`NewLocalLimitCounter(time.Millisecond)`, a limit of 1 per window.",
			Churn:       func() Instance { return newHttprateOf(time.Millisecond, 1) },
		},
		{
			Name:  "Ulule",
			Label: "ulule/limiter memory",
			Kind:  Peer,
			Config: "ulule/limiter/v3: `limiter.New(memory.NewStore(), Rate{Period: time.Hour, Limit: 1_000_000})` " +
				"(default prefix, cleanup every 30 s); a call is `Get(ctx, key)`, which adds 1. " +
				"The store builds the prefixed key (`limiter:` and the key) with a `strings.Builder` on every call, which allocates.",
			New:         newUlule,
			ChurnConfig: "`Rate{Period: time.Millisecond, Limit: 1}`.",
			Churn:       func() Instance { return newUluleOf(time.Millisecond, 1) },
		},
	}
}

// Lookup returns the structure with the given name.
func Lookup(name string) (Structure, bool) {
	for _, s := range Structures() {
		if s.Name == name {
			return s, true
		}
	}
	return Structure{}, false
}

type mutexMap struct {
	mu sync.Mutex
	m  map[string]int64
}

func newMutexMap() Instance {
	m := &mutexMap{m: make(map[string]int64)}
	return instance(func(k string) bool {
		m.mu.Lock()
		m.m[k]++
		m.mu.Unlock()
		return true
	})
}

func newMutexMapClock() Instance {
	m := &mutexMap{m: make(map[string]int64)}
	return instance(func(k string) bool {
		now := time.Now()
		m.mu.Lock()
		m.m[k]++
		m.mu.Unlock()
		return !now.IsZero()
	})
}

// mapShard is one part of a shardedMap, padded to 64 bytes so that
// neighbouring locks do not share a cache line.
type mapShard struct {
	mu sync.Mutex
	m  map[string]int64
	_  [48]byte
}

type shardedMap struct {
	seed   maphash.Seed
	shards [64]mapShard
}

func newShardedMap() Instance {
	m := &shardedMap{seed: maphash.MakeSeed()}
	for i := range m.shards {
		m.shards[i].m = make(map[string]int64)
	}
	return instance(func(k string) bool {
		s := &m.shards[maphash.String(m.seed, k)>>58]
		s.mu.Lock()
		s.m[k]++
		s.mu.Unlock()
		return true
	})
}

func newSyncMap() Instance {
	var m sync.Map
	return instance(func(k string) bool {
		v, ok := m.Load(k)
		if !ok {
			v, _ = m.LoadOrStore(k, new(atomic.Int64))
		}
		v.(*atomic.Int64).Add(1)
		return true
	})
}

func newXTimeRate() Instance { return newXTimeRateOf(rate.Every(gcraPeriod), bigBurst) }

func newXTimeRateOf(every rate.Limit, burst int) Instance {
	var mu sync.Mutex
	m := make(map[string]*rate.Limiter)
	return instance(func(k string) bool {
		mu.Lock()
		l := m[k]
		if l == nil {
			l = rate.NewLimiter(every, burst)
			m[k] = l
		}
		mu.Unlock()
		return l.Allow()
	})
}

func newThrottled(maxKeys int) Instance {
	return newThrottledOf(maxKeys, throttled.PerDuration(1, gcraPeriod), bigBurst-1)
}

func newThrottledOf(maxKeys int, r throttled.Rate, burst int) Instance {
	st, err := memstore.NewCtx(maxKeys)
	if err != nil {
		panic(err)
	}
	quota := throttled.RateQuota{MaxRate: r, MaxBurst: burst}
	rl, err := throttled.NewGCRARateLimiterCtx(st, quota)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	return instance(func(k string) bool {
		limited, _, err := rl.RateLimitCtx(ctx, k, 1)
		return err == nil && !limited
	})
}

func newGoLimiter() Instance { return newGoLimiterOf(bigBurst, window) }

func newGoLimiterOf(tokens uint64, interval time.Duration) Instance {
	st, err := golimiter.New(&golimiter.Config{Tokens: tokens, Interval: interval})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	in := instance(func(k string) bool {
		_, _, _, ok, err := st.Take(ctx, k)
		return err == nil && ok
	})
	in.Close = func() { st.Close(ctx) }
	return in
}

func newHttprate() Instance { return newHttprateOf(window, bigBurst) }

func newHttprateOf(window time.Duration, limit float64) Instance {
	var c httprate.LimitCounter = httprate.NewLocalLimitCounter(window)
	return instance(func(k string) bool {
		now := time.Now().UTC()
		cur := now.Truncate(window)
		curr, prev, err := c.Get(k, cur, cur.Add(-window))
		if err != nil {
			return false
		}
		est := float64(prev)*float64(window-now.Sub(cur))/float64(window) + float64(curr)
		if est+1 > limit {
			return false
		}
		return c.IncrementBy(k, cur, 1) == nil
	})
}

func newUlule() Instance { return newUluleOf(window, bigBurst) }

func newUluleOf(period time.Duration, limit int64) Instance {
	l := ulule.New(ulmemory.NewStore(), ulule.Rate{Period: period, Limit: limit})
	ctx := context.Background()
	return instance(func(k string) bool {
		c, err := l.Get(ctx, k)
		return err == nil && !c.Reached
	})
}
