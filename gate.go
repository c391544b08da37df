package limits

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Gate admits at most a number of callers at once, for the whole process:
// the answer to "can this process take one more request now?". The number
// is fixed unless SetMax changes it, as a controller that finds the
// process's capacity from latency does (package adaptive).
//
// TryEnter succeeds or fails at once. Enter may also wait a short, bounded
// time for a place, for contention that clears within milliseconds; at most
// as many callers may wait as the gate admits, and the rest are refused at
// once, so the gate never builds an unbounded queue. With AdaptWait, the
// gate also stops letting callers wait while waiting does not help: under
// sustained overload refusals stay immediate. A caller that enters gets a
// Permit and must Release it, typically with defer.
//
// Entering and leaving are a compare-and-swap and an atomic add on the
// count inside when nobody waits; a place freed while callers wait goes to
// the one that has waited longest, under a lock. The count inside never
// exceeds the maximum, and the counters are exact.
//
// A Gate fails closed: when it cannot admit, it refuses. All methods are
// safe for concurrent use. The zero value is not usable; call NewGate.
type Gate struct {
	inside atomic.Int64 // callers holding a place
	max    atomic.Int64 // the most admitted at once
	// nwait counts the callers in Enter's wait, or about to be: a Release
	// that sees it at 0 after freeing a place has no one to hand it to.
	nwait atomic.Int64

	mu      sync.Mutex
	waiters []*gateWaiter // first come, first served; guarded by mu

	// AdaptWait's state. Times are nanoseconds on the gate's own clock,
	// which starts at epoch.
	epoch    time.Time
	interval atomic.Int64 // 0: waits are never cut
	cutUntil atomic.Int64 // Enter refuses at once before this time
	judge    waitJudge    // guarded by mu

	peak      atomic.Int64
	admitted  atomic.Uint64
	shed      atomic.Uint64
	timedOut  atomic.Uint64
	waited    atomic.Uint64
	waitNanos atomic.Int64
	overloads atomic.Uint64
}

// waitJudge counts, over one interval, the callers that waited and those
// among them whose wait ran out, to tell a queue that drains from one that
// stands.
type waitJudge struct {
	since  int64 // start of the interval counted
	waited int   // callers that stopped waiting, having started after since
	gaveUp int   // of which the wait ran out
	hold   int64 // how long the last cut lasted; it ended at Gate.cutUntil
}

// Thresholds of AdaptWait.
const (
	// judgeMin is the fewest waiters an interval needs to be judged.
	judgeMin = 4
	// maxHold is the longest cut, in intervals.
	maxHold = 16
)

// gateWaiter is a caller waiting in Enter for a place.
type gateWaiter struct {
	granted chan struct{} // receives once the place is the waiter's
	start   int64         // when it began to wait, on the gate's clock
}

// GateStats is a snapshot of a Gate's counters, in callers unless said
// otherwise; counters only grow, from 0 when the gate was made. It
// marshals to JSON with the field names in snake case.
type GateStats struct {
	// Max is the most callers the gate admits at once.
	Max int `json:"max"`
	// InFlight is the number of callers inside now.
	InFlight int `json:"in_flight"`
	// Peak is the highest InFlight seen.
	Peak int `json:"peak"`
	// Waiting is the number of callers waiting in Enter now.
	Waiting int `json:"waiting"`
	// Admitted counts the callers let in.
	Admitted uint64 `json:"admitted"`
	// Shed counts the callers refused without waiting.
	Shed uint64 `json:"shed"`
	// TimedOut counts the callers that waited and gave up, because the wait
	// allowed ran out or their context ended.
	TimedOut uint64 `json:"timed_out"`
	// Waited counts the callers that waited in Enter and have stopped
	// waiting, let in or not.
	Waited uint64 `json:"waited"`
	// WaitTime is the time those callers spent waiting, added up: divided
	// by Waited, the mean wait. It marshals to JSON in nanoseconds.
	WaitTime time.Duration `json:"wait_time_ns"`
	// Overloaded reports whether Enter refuses at once now, without
	// letting callers wait, having judged waiting futile (see AdaptWait).
	Overloaded bool `json:"overloaded"`
	// Overloads counts the times Enter began to refuse at once.
	Overloads uint64 `json:"overloads"`
}

// NewGate returns a Gate admitting at most max callers at once, or an
// error wrapping ErrInvalidLimit if max < 1.
func NewGate(max int) (*Gate, error) {
	if max < 1 {
		return nil, fmt.Errorf("%w: gate size must be >= 1, got %d", ErrInvalidLimit, max)
	}
	g := &Gate{epoch: time.Now()}
	g.max.Store(int64(max))
	return g, nil
}

// now returns the time on g's clock.
func (g *Gate) now() int64 { return int64(time.Since(g.epoch)) }

// TryEnter lets the caller in if there is room, without waiting. It returns
// false if the gate is full.
func (g *Gate) TryEnter() (Permit, bool) {
	if !g.acquire() {
		g.shed.Add(1)
		return Permit{}, false
	}
	return Permit{g: g}, true
}

// acquire takes a place if one is free, and records the admission.
func (g *Gate) acquire() bool {
	for {
		n := g.inside.Load()
		if n >= g.max.Load() {
			return false
		}
		if g.inside.CompareAndSwap(n, n+1) {
			g.admitted.Add(1)
			for p := g.peak.Load(); n+1 > p && !g.peak.CompareAndSwap(p, n+1); p = g.peak.Load() {
			}
			return true
		}
	}
}

// Enter lets the caller in, waiting at most wait for room, and reports
// whether it did. It refuses at once if the gate is full and wait <= 0, or
// as many callers as the gate admits are waiting already, or AdaptWait
// has judged the gate overloaded (counted as Shed); otherwise it gives up
// when the gate has stayed full for the whole wait or ctx ends first
// (counted as TimedOut; ctx.Err tells which). Waiting callers are let in
// first come, first served; a caller that does not wait (TryEnter) may
// take a place freed between two waiters.
func (g *Gate) Enter(ctx context.Context, wait time.Duration) (Permit, bool) {
	if g.acquire() {
		return Permit{g: g}, true
	}
	if wait <= 0 {
		g.shed.Add(1)
		return Permit{}, false
	}
	var now int64
	adapt := g.interval.Load() > 0
	if adapt {
		now = g.now()
		if now < g.cutUntil.Load() {
			g.shed.Add(1)
			return Permit{}, false
		}
	}
	g.mu.Lock()
	// Count in as waiting before looking again, so that a Release that
	// frees a place after this look sees a waiter to hand it to.
	g.nwait.Add(1)
	if g.acquire() {
		g.nwait.Add(-1)
		g.mu.Unlock()
		return Permit{g: g}, true
	}
	if len(g.waiters) >= int(g.max.Load()) || (adapt && g.judgeLocked(now)) {
		g.nwait.Add(-1)
		g.mu.Unlock()
		g.shed.Add(1)
		return Permit{}, false
	}
	if !adapt {
		now = g.now()
	}
	w := &gateWaiter{granted: make(chan struct{}, 1), start: now}
	g.waiters = append(g.waiters, w)
	g.mu.Unlock()

	timer := time.NewTimer(wait)
	defer timer.Stop()
	expired := false
	select {
	case <-w.granted:
		g.waitedFor(w, g.now())
		return Permit{g: g}, true
	case <-timer.C:
		expired = true
	case <-ctx.Done():
	}
	end := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.waitedFor(w, end)
	for i, o := range g.waiters {
		if o == w {
			g.waiters = slices.Delete(g.waiters, i, i+1)
			g.nwait.Add(-1)
			g.timedOut.Add(1)
			if g.interval.Load() > 0 && w.start >= g.judge.since {
				g.judge.waited++
				if expired {
					g.judge.gaveUp++
				}
				g.judgeLocked(end)
			}
			return Permit{}, false
		}
	}
	// Granted a place as the wait ended: take it.
	return Permit{g: g}, true
}

// waitedFor counts a wait that began at w.start and ended at end.
func (g *Gate) waitedFor(w *gateWaiter, end int64) {
	g.waited.Add(1)
	g.waitNanos.Add(max(end-w.start, 0))
}

// AdaptWait makes Enter stop letting callers wait while waiting does not
// help, and start again once it may, in the manner of CoDel: a short wait
// absorbs bursts near capacity, but under sustained overload it only turns
// each refusal into a slow one. Every interval, the gate looks at the
// callers that waited in Enter: if at least four did and more than a third
// of them waited their whole wait in vain, the queue is standing rather
// than draining, and Enter refuses at once, without waiting, for an
// interval. Waiting then resumes for one interval, to judge again; while
// overload persists, each refusal period lasts twice as long as the one
// before, up to 16 intervals, so that under steady overload only about one
// caller in seventeen that finds the gate full is made to wait. An interval
// of 100ms, twenty times a wait of 5ms, suits most services; interval <= 0
// turns adaptation off, the default, and ends a refusal period at once.
// TryEnter, which never waits, is unaffected.
func (g *Gate) AdaptWait(interval time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.interval.Store(max(int64(interval), 0))
	g.cutUntil.Store(0)
	g.judge = waitJudge{since: g.now()}
}

// judgeLocked judges the interval counted, if it has ended, and reports
// whether Enter now refuses at once. g.mu is held.
func (g *Gate) judgeLocked(now int64) bool {
	iv := g.interval.Load()
	j := &g.judge
	if now-j.since < iv {
		return false
	}
	standing := j.waited >= judgeMin && 3*j.gaveUp > j.waited
	j.waited, j.gaveUp, j.since = 0, 0, now
	if !standing {
		return false
	}
	// A queue that stands again right after a cut is the same overload:
	// cut for longer.
	hold := iv
	if last := g.cutUntil.Load(); last != 0 && now-last <= 2*iv {
		hold = min(2*j.hold, maxHold*iv)
	}
	j.hold = hold
	// Judge afresh when the cut ends, on callers that waited after it.
	j.since = now + hold
	g.cutUntil.Store(now + hold)
	g.overloads.Add(1)
	return true
}

// release frees a place, and hands a free place to the callers waiting
// longest, if any.
func (g *Gate) release() {
	g.inside.Add(-1)
	if g.nwait.Load() == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.grant()
}

// grant hands free places to the callers waiting longest. g.mu is held.
func (g *Gate) grant() {
	for len(g.waiters) > 0 && g.acquire() {
		w := g.waiters[0]
		g.waiters = g.waiters[1:]
		g.nwait.Add(-1)
		if w.start >= g.judge.since {
			g.judge.waited++
		}
		w.granted <- struct{}{}
	}
}

// SetMax changes the most callers g admits at once, such as a controller
// that finds the process's capacity from latency does (package adaptive),
// and returns the previous maximum. It panics if max < 1. A larger maximum
// lets waiting callers in at once; a smaller one admits nobody new until
// enough callers inside have left, and never turns anyone out. At most
// max callers may wait.
func (g *Gate) SetMax(max int) int {
	if max < 1 {
		panic(fmt.Sprintf("limits: gate size must be >= 1, got %d", max))
	}
	old := g.max.Swap(int64(max))
	if int64(max) > old && g.nwait.Load() > 0 {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.grant()
	}
	return int(old)
}

// InFlight returns the number of callers inside g now: one atomic load,
// cheap enough for every request.
func (g *Gate) InFlight() int { return int(g.inside.Load()) }

// Stats returns a snapshot of g's counters. Each counter is read
// atomically, but not all at the same instant.
func (g *Gate) Stats() GateStats {
	return GateStats{
		Max:        int(g.max.Load()),
		InFlight:   int(g.inside.Load()),
		Peak:       int(g.peak.Load()),
		Waiting:    int(g.nwait.Load()),
		Admitted:   g.admitted.Load(),
		Shed:       g.shed.Load(),
		TimedOut:   g.timedOut.Load(),
		Waited:     g.waited.Load(),
		WaitTime:   time.Duration(g.waitNanos.Load()),
		Overloaded: g.interval.Load() > 0 && g.now() < g.cutUntil.Load(),
		Overloads:  g.overloads.Load(),
	}
}

// Permit is a caller's place in a Gate, given back by Release.
//
// Release is idempotent and safe for concurrent use, so it may be called
// early, for instance by a handler that has finished the costly part of its
// work, and again by a deferred call on every way out. Keep the Permit in
// one variable and pass a pointer to it around: a copy would be a second
// permit to release, and go vet reports copies. The zero Permit holds no
// place.
type Permit struct {
	g        *Gate
	released atomic.Bool // also makes go vet report copies
}

// Release gives the place back. Calls after the first do nothing.
func (p *Permit) Release() {
	if p.g != nil && p.released.CompareAndSwap(false, true) {
		p.g.release()
	}
}

// Held reports whether the Permit holds a place that has not been released.
func (p *Permit) Held() bool {
	return p.g != nil && !p.released.Load()
}
