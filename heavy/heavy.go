// Package heavy names the keys with the largest counts, next to the
// sketches of package limits, which count every key in fixed memory but
// cannot list them: so that logs and dashboards can say who the top
// offenders are.
package heavy

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// Hitters names the keys with the largest counts, so that logs can say
// who the top offenders are: a sketch counts keys but cannot list them.
//
// It is the second stage of a two-stage filter. The first stage is a sketch
// (a limits.Rate or limits.Estimator) that counts every key in fixed
// memory; its caller passes each estimate to Offer. Keys whose estimate
// is below the threshold, nearly all of them, cost one comparison and are
// not remembered. A key whose estimate reaches the threshold enters a small
// exact table, of at most capacity keys, which keeps its name, the largest
// estimate offered for it, and the exact sum of the events offered for it
// since it entered.
//
// As estimates are never too low, a key enters no later than its true count
// reaches the threshold, if there is room. Offered every event of a key, one
// at a time, the table then misses fewer than threshold of them (those before
// the key entered): its Exact count is short of its true count by less than
// the threshold, unless it was evicted and entered again. When the table is
// full, a key enters only by evicting the key with the smallest Estimate, and
// only if its own estimate is larger: filling the table with small keys
// cannot push out a large one.
//
// # Cost and concurrency
//
// All methods are safe for concurrent use. Offer below the threshold costs a
// comparison. Above it, Offer takes a read lock and looks the key up; a key
// in the table is then updated with atomic operations, allocating nothing. A
// key that enters copies its name, and, when the table is full, scans it for
// the smallest entry under the write lock; keys that could not evict anyone
// are turned away after the look-up and one atomic load.
//
// The table counts from its creation or its last Reset: with a Rate, call Top
// then Reset once per window to name the window's top keys. The zero value is
// not usable; call New.
type Hitters struct {
	threshold int64
	capacity  int

	mu    sync.RWMutex
	table map[string]*hitter // guarded by mu; entries update atomically
	// floor is, while the table is full, the smallest Estimate in it when
	// last computed (entries only grow, so it may be low, never high); 0
	// while there is room.
	floor atomic.Int64
}

// hitter is one entry of the table.
type hitter struct {
	key      string
	estimate atomic.Int64 // the largest estimate offered
	exact    atomic.Int64 // events offered since the key entered
}

// Hitter is one key of a Hitters table, as Top reports it; counts are in
// events.
type Hitter struct {
	// Key is the key, copied when it entered the table.
	Key string
	// Estimate is the largest estimate offered for the key: at least its
	// true count when offered, unless offers raced.
	Estimate int64
	// Exact is the sum of the events offered for the key since it entered
	// the table: never more than its true count.
	Exact int64
}

// New returns a table that admits keys whose estimate reaches
// threshold and holds at most capacity of them (about 100 bytes each, plus
// the key's bytes). It panics if threshold < 1 or capacity < 1.
func New(threshold int64, capacity int) *Hitters {
	if threshold < 1 {
		panic(fmt.Sprintf("heavy: threshold must be >= 1, got %d", threshold))
	}
	if capacity < 1 {
		panic(fmt.Sprintf("heavy: capacity must be >= 1, got %d", capacity))
	}
	return &Hitters{threshold: threshold, capacity: capacity, table: make(map[string]*hitter, capacity)}
}

// Offer records that n events for key were just counted by the first-stage
// sketch, which gave estimate as key's count, these events included (what
// Rate.Observe and Incr return). Keys below the threshold are ignored; see
// Hitters for what it costs.
func (hh *Hitters) Offer(key string, estimate, n int64) {
	if estimate < hh.threshold {
		return
	}
	hh.mu.RLock()
	e := hh.table[key]
	if e != nil {
		e.add(estimate, n)
	}
	hh.mu.RUnlock()
	if e != nil {
		return
	}
	if f := hh.floor.Load(); f > 0 && estimate <= f {
		return // the table is full of keys at least as large
	}
	hh.admit(key, estimate, n)
}

// add counts n more events in e and raises its estimate to at least est.
func (e *hitter) add(est, n int64) {
	e.exact.Add(n)
	for {
		old := e.estimate.Load()
		if est <= old || e.estimate.CompareAndSwap(old, est) {
			return
		}
	}
}

// admit enters key in the table, evicting the smallest entry if the table
// is full and that entry is smaller than estimate.
func (hh *Hitters) admit(key string, estimate, n int64) {
	hh.mu.Lock()
	defer hh.mu.Unlock()
	if e := hh.table[key]; e != nil { // entered while we waited
		e.add(estimate, n)
		return
	}
	if len(hh.table) >= hh.capacity {
		var low *hitter
		for _, e := range hh.table {
			if low == nil || e.estimate.Load() < low.estimate.Load() {
				low = e
			}
		}
		if estimate <= low.estimate.Load() {
			hh.floor.Store(low.estimate.Load())
			return
		}
		delete(hh.table, low.key)
	}
	e := &hitter{key: strings.Clone(key)}
	e.estimate.Store(estimate)
	e.exact.Store(n)
	hh.table[e.key] = e
	if len(hh.table) >= hh.capacity {
		f := estimate
		for _, e := range hh.table {
			f = min(f, e.estimate.Load())
		}
		hh.floor.Store(f)
	}
}

// Top returns up to n keys of the table, largest Estimate first (ties:
// largest Exact, then by key). It allocates the slice it returns.
func (hh *Hitters) Top(n int) []Hitter {
	hh.mu.RLock()
	out := make([]Hitter, 0, len(hh.table))
	for _, e := range hh.table {
		out = append(out, Hitter{Key: e.key, Estimate: e.estimate.Load(), Exact: e.exact.Load()})
	}
	hh.mu.RUnlock()
	slices.SortFunc(out, func(a, b Hitter) int {
		return cmp.Or(cmp.Compare(b.Estimate, a.Estimate), cmp.Compare(b.Exact, a.Exact), strings.Compare(a.Key, b.Key))
	})
	return out[:min(max(n, 0), len(out))]
}

// Len returns the number of keys in the table.
func (hh *Hitters) Len() int {
	hh.mu.RLock()
	defer hh.mu.RUnlock()
	return len(hh.table)
}

// Reset empties the table. Offers that run concurrently may land before or
// after it.
func (hh *Hitters) Reset() {
	hh.mu.Lock()
	clear(hh.table)
	hh.floor.Store(0)
	hh.mu.Unlock()
}
