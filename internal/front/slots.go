package front

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// Slots counts the requests each client has in progress, exactly, in a
// table of at most a fixed number of clients: a client's entry lives while
// it has a request in progress. It fails closed: a new client finding the
// table full is refused.
type Slots struct {
	max     int32 // requests per client
	maxKeys int64
	keys    atomic.Int64
	seed    maphash.Seed
	shards  [64]slotShard
}

type slotShard struct {
	mu sync.Mutex
	n  map[string]int32
	_  [48]byte
}

// NewSlots returns a table allowing max requests in progress per client,
// for at most maxKeys clients at once.
func NewSlots(max, maxKeys int) *Slots {
	s := &Slots{max: int32(max), maxKeys: int64(maxKeys), seed: maphash.MakeSeed()}
	for i := range s.shards {
		s.shards[i].n = make(map[string]int32)
	}
	return s
}

// Acquire counts a request of key in, if key has fewer than max in
// progress and the table has room for it. It returns "" when it does, and
// otherwise the reason for the refusal: ReasonConcurrencyLimited or
// ReasonConcurrencyTableFull. Each request counted in must be counted out
// with one Release.
func (s *Slots) Acquire(key string) string {
	sh := &s.shards[maphash.String(s.seed, key)>>58]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n, ok := sh.n[key]
	switch {
	case n >= s.max:
		return ReasonConcurrencyLimited
	case !ok && s.keys.Add(1) > s.maxKeys:
		s.keys.Add(-1)
		return ReasonConcurrencyTableFull
	}
	sh.n[key] = n + 1
	return ""
}

// Release counts out a request of key that Acquire counted in.
func (s *Slots) Release(key string) {
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

// Len returns the number of clients with requests in progress.
func (s *Slots) Len() int { return int(s.keys.Load()) }
