package redislimit

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/limitsgo/limits/internal/gcra"
	"github.com/limitsgo/limits/redislimit/redistest"
)

// admission is an allowed request, known to have been decided between
// before and after on the test's monotonic clock, in ns.
type admission struct{ before, after int64 }

// TestLeaseFleet runs a fleet in lease mode against a real redis-server:
// several processes, each its own client and GCRA with goroutines of its
// own, at uneven rates, all far above the key's limit, for a few seconds.
// It counts every admission and checks, over windows of 10ms, 100ms and
// 1s slid by a millisecond, that the fleet never admits more than one GCRA
// would (burst + d/T + 1 in a window of length d, widened by the longest
// decision, as each admission's time is known within it), and that the
// under-admission, what one GCRA fed the same requests at the same times
// would admit less what the fleet did, is within the bound WithLeases
// states: (P+1)*slots plus the slots that expired.
func TestLeaseFleet(t *testing.T) {
	const (
		processes  = 4
		goroutines = 2
		limit      = 1000 // per second: T = 1ms
		burst      = 50
		slots      = 16
		run        = 3 * time.Second
	)
	srv := redistest.Start(t)
	prefix := freshPrefix()
	base := time.Now()
	clock := func() int64 { return int64(time.Since(base)) }
	var mu sync.Mutex
	var admitted []admission
	var requests []int64 // when each request was made
	decisions := 0
	gs := make([]*GCRA, processes)
	var wg sync.WaitGroup
	start := clock()
	for p := range processes {
		c := newClient(t, srv.Addr(), p%2 == 0) // both kinds of client
		gs[p] = must(New(c, limit, time.Second, WithBurst(burst), WithPrefix(prefix), WithTimeout(5*time.Second), WithLeases(slots, 0)))
		for gr := range goroutines {
			pause := time.Duration(100*(p+1)+50*gr) * time.Microsecond
			wg.Go(func() {
				var mine []admission
				var asked []int64
				n := 0
				for clock()-start < int64(run) {
					before := clock()
					d, err := gs[p].Allow(context.Background(), "hot")
					after := clock()
					if err != nil {
						t.Error(err)
						return
					}
					n++
					asked = append(asked, before)
					if d.Allowed {
						mine = append(mine, admission{before, after})
					}
					time.Sleep(pause)
				}
				mu.Lock()
				admitted = append(admitted, mine...)
				requests = append(requests, asked...)
				decisions += n
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	end := clock()
	if t.Failed() {
		return
	}
	var ls LeaseStats
	var calls uint64
	for _, g := range gs {
		s := g.LeaseStats()
		ls.Leases += s.Leases
		ls.Ahead += s.Ahead
		ls.Slots += s.Slots
		ls.Spent += s.Spent
		ls.Expired += s.Expired
		ls.Local += s.Local
		ls.Held += s.Held
		calls += g.Stats().Answered
		if s.Slots != s.Spent+s.Expired+s.Returned+s.Held {
			t.Errorf("lease counters %+v do not add up", s)
		}
	}
	slices.SortFunc(admitted, func(a, b admission) int { return int(a.after - b.after) })
	var longest int64
	for _, a := range admitted {
		longest = max(longest, a.after-a.before)
	}
	const T = int64(time.Second / limit)
	for _, w := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second} {
		worst, worstBound := 0, int64(0)
		lo, hi := 0, 0
		for x := start; x+int64(w) <= end; x += int64(time.Millisecond) {
			for lo < len(admitted) && admitted[lo].after < x {
				lo++
			}
			for hi < len(admitted) && admitted[hi].after <= x+int64(w) {
				hi++
			}
			count := hi - lo
			// Each admission counted lies in [x - longest, x + w].
			bound := burst + (int64(w)+longest)/T + 1
			if int64(count) > bound {
				t.Fatalf("%d admissions in the %v from %v, bound %d", count, w, time.Duration(x-start), bound)
			}
			if count > worst {
				worst, worstBound = count, bound
			}
		}
		t.Logf("windows of %v: at most %d admissions, bound %d", w, worst, worstBound)
	}
	// One GCRA fed the same requests, at the times they were made.
	slices.Sort(requests)
	p, err := gcra.New(limit, time.Second, burst)
	if err != nil {
		t.Fatal(err)
	}
	ideal := int64(ideal(p, requests))
	under := ideal - int64(len(admitted))
	bound := int64((processes+1)*slots) + int64(ls.Expired)
	t.Logf("%d decisions, %d admitted (one GCRA: %d): under-admission %d, bound (P+1)*slots + expired = %d; %d Redis calls (%.2f per 1000 decisions), %d leases (%d ahead) of %d slots, %d expired, %d in hand; longest decision %v",
		decisions, len(admitted), ideal, under, bound, calls, 1000*float64(calls)/float64(decisions), ls.Leases, ls.Ahead, ls.Slots, ls.Expired, ls.Held, time.Duration(longest))
	if under > bound+1 {
		t.Errorf("under-admission %d beyond the bound %d", under, bound)
	}
	if ls.Local == 0 || ls.Leases == 0 {
		t.Errorf("lease counters %+v: no decision made locally", ls)
	}
}
