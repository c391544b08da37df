package admit

import (
	"github.com/limitsgo/limits"

	"hash/maphash"
	"sync"
	"sync/atomic"
)

// slots counts the requests each client has in progress, exactly, in a
// table of at most a fixed number of clients: a client's entry lives while
// it has a request in progress. It fails closed: a new client finding the
// table full is refused.
type slots struct {
	max     atomic.Int32 // requests per client
	maxKeys atomic.Int64
	keys    atomic.Int64
	seed    maphash.Seed
	shards  [64]slotShard
}

type slotShard struct {
	mu sync.Mutex
	n  map[string]int32
	_  [48]byte
}

// newSlots returns a table allowing max requests in progress per client,
// for at most maxKeys clients at once.
func newSlots(max, maxKeys int) *slots {
	s := &slots{seed: maphash.MakeSeed()}
	s.set(max, maxKeys)
	for i := range s.shards {
		s.shards[i].n = make(map[string]int32)
	}
	return s
}

// set changes the caps: clients already over a lower max keep their
// requests, and get no new one until they are under it.
func (s *slots) set(max, maxKeys int) {
	s.max.Store(int32(min(max, 1<<31-1)))
	s.maxKeys.Store(int64(maxKeys))
}

// acquire counts a request of key in, if key has fewer than max in
// progress and the table has room for it. It returns Allowed when it does,
// and otherwise the reason for the refusal: ConcurrencyLimited or
// ConcurrencyTableFull. Each request counted in must be counted out with
// one release.
func (s *slots) acquire(key string) limits.Reason {
	sh := &s.shards[maphash.String(s.seed, key)>>58]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n, ok := sh.n[key]
	switch {
	case n >= s.max.Load():
		return ConcurrencyLimited
	case !ok && s.keys.Add(1) > s.maxKeys.Load():
		s.keys.Add(-1)
		return ConcurrencyTableFull
	}
	sh.n[key] = n + 1
	return Allowed
}

// release counts out a request of key that acquire counted in.
func (s *slots) release(key string) {
	sh := &s.shards[maphash.String(s.seed, key)>>58]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if n := sh.n[key]; n > 1 {
		sh.n[key] = n - 1
	} else if n == 1 {
		delete(sh.n, key)
		s.keys.Add(-1)
	}
}

// len returns the number of clients with requests in progress.
func (s *slots) len() int { return int(s.keys.Load()) }
