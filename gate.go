package limits

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"strings"
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
// the one that has waited longest among those whose class may take it,
// under a lock. The count inside never exceeds the maximum, and the
// counters are exact.
//
// Callers come in classes (Priority): TryEnter and Enter are for
// PriorityDefault, TryEnterPriority and EnterPriority for any class. With
// WithReserve, the gate keeps places that lower classes may not take, so
// that under a flood of sheddable work the critical work still gets in: a
// class may take a place only while fewer than Max less reserved(class)
// callers are inside, where reserved(class) is the sum of the reserves of
// the classes above it.
//
// A Gate fails closed: when it cannot admit, it refuses. All methods are
// safe for concurrent use. The zero value is not usable; call NewGate.
type Gate struct {
	// What entering and leaving write, in the Gate's first cache line
	// (see the padding at the end): the count inside, the classes'
	// limits, the admissions and the peak.
	inside atomic.Int64 // callers holding a place
	// lim[c] is the most callers inside below which class c may enter:
	// max less the places reserved for the classes above c.
	lim      [numClasses]atomic.Int64
	admitted [numClasses]atomic.Uint64
	peak     atomic.Int64
	// nwait counts the callers in Enter's wait, or about to be: a Release
	// that sees it at 0 after freeing a place has no one to hand it to.
	nwait atomic.Int64

	max atomic.Int64 // the most admitted at once

	// The reserves given to NewGate, by class, and the max they were
	// given for; SetMax scales them.
	reserve0 [numClasses]int64
	max0     int64

	mu sync.Mutex
	// waiters holds the waiting callers of each class, first come first;
	// guarded by mu, as is seq, the number of the next to come.
	waiters [numClasses][]*gateWaiter
	seq     uint64
	// queued is the number of waiters, written under mu, for Stats: nwait
	// may count a caller that has not joined the queue, and will not.
	queued atomic.Int64

	// AdaptWait's state. Times are nanoseconds on the gate's own clock,
	// which starts at epoch.
	epoch    time.Time
	interval atomic.Int64 // 0: waits are never cut
	cutUntil atomic.Int64 // Enter refuses at once before this time
	judge    waitJudge    // guarded by mu

	shed      [numClasses]atomic.Uint64
	timedOut  atomic.Uint64
	waited    atomic.Uint64
	waitNanos atomic.Int64
	overloads atomic.Uint64

	// Padding to 384 bytes, a size class of the allocator that is a
	// multiple of 64, so that every Gate starts a cache line and its
	// first line holds what entering and leaving touch (BenchmarkGate).
	_ [48]byte
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
	// granted receives once: true when the place is the waiter's, false
	// when its place in the queue went to a caller of a higher class.
	granted chan bool
	start   int64    // when it began to wait, on the gate's clock
	class   Priority // the caller's
	seq     uint64   // its order of arrival among the waiters
}

// Priority is the class of a caller at a Gate: with WithReserve, a gate
// keeps places that only the classes at or above a priority may take. The
// classes are PrioritySheddable, PriorityDefault and PriorityCritical, in
// the manner of gRPC's and Google SRE's criticality. The zero value is
// PriorityDefault. A Gate takes a Priority above PriorityCritical as
// PriorityCritical and one below PrioritySheddable as PrioritySheddable.
type Priority int8

const (
	// PrioritySheddable is for work that may be refused first under
	// overload: prefetches, batch jobs, retries of an idempotent request.
	PrioritySheddable Priority = -1
	// PriorityDefault is the class of TryEnter and Enter.
	PriorityDefault Priority = 0
	// PriorityCritical is for the cheap, valuable work that must get in
	// under overload: a reconnect, joining an existing session, a health
	// check.
	PriorityCritical Priority = 1
)

// numClasses is the number of classes; a class's index is its Priority
// less PrioritySheddable.
const numClasses = int(PriorityCritical-PrioritySheddable) + 1

// String returns "sheddable", "default" or "critical", the class's name as
// metrics label it, or "Priority(n)" for another value.
func (p Priority) String() string {
	switch p {
	case PrioritySheddable:
		return "sheddable"
	case PriorityDefault:
		return "default"
	case PriorityCritical:
		return "critical"
	}
	return fmt.Sprintf("Priority(%d)", int8(p))
}

// MarshalText returns the class's name, as String does, so that a
// Priority keys a map in JSON.
func (p Priority) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText sets p to the class named "sheddable", "default" or
// "critical", in any case, or returns an error for another name.
func (p *Priority) UnmarshalText(text []byte) error {
	for _, c := range []Priority{PrioritySheddable, PriorityDefault, PriorityCritical} {
		if strings.EqualFold(string(text), c.String()) {
			*p = c
			return nil
		}
	}
	return fmt.Errorf("limits: no class is named %q: want sheddable, default or critical", text)
}

// class returns p's index, taking a value out of range as the nearest
// class.
func (p Priority) class() int {
	return min(max(int(p)-int(PrioritySheddable), 0), numClasses-1)
}

// reserve is what one WithReserve gave.
type reserve struct {
	p Priority
	n int
}

// WithReserve is an Option of NewGate: it keeps n of the gate's places for
// the callers of class p and above, so that the classes below p may not
// take them. A class may take a place only while fewer than Max less
// reserved(class) callers are inside, reserved(class) being the sum of the
// reserves of the classes above it: with NewGate(60,
// WithReserve(PriorityCritical, 12)), default and sheddable callers take
// at most 48 places, and critical ones all 60. p is PriorityDefault or
// PriorityCritical (the lowest class has nobody below it to keep places
// from); n >= 0; and the reserves add up to at most max-1, so that they
// leave at least one place for PrioritySheddable. NewGate returns an error
// naming the option otherwise. Given twice for one class, the last one
// counts. There are no reserves by default.
//
// When SetMax moves the limit (as package adaptive does), the reserves
// scale with it: at a limit of m, the reserve of p is n*m/max rounded to
// the nearest place, max being the size given to NewGate, and at least 1
// while n > 0; if the reserves would then leave less than one place for
// PrioritySheddable, the lower one (PriorityDefault's) is cut first, then
// PriorityCritical's, so that a gate of 1 has no reserve.
func WithReserve(p Priority, n int) Option {
	return optionFunc(func(o *options) {
		o.reserves, o.set = append(o.reserves, reserve{p, n}), o.set|optReserve
	})
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
	// Waiting is the number of callers waiting in Enter now: at most Max,
	// unless SetMax lowered Max below the callers already waiting.
	Waiting int `json:"waiting"`
	// Admitted counts the callers let in, of all classes.
	Admitted uint64 `json:"admitted"`
	// Shed counts the callers refused without waiting, of all classes,
	// and the waiters whose place in the queue went to a caller of a
	// higher class (see EnterPriority).
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
	// Classes holds each class's figures, lowest first: Classes[0] is
	// PrioritySheddable, Classes[1] PriorityDefault, Classes[2]
	// PriorityCritical. Their Admitted and Shed add up to the gate's.
	Classes [numClasses]struct {
		// Priority is the class.
		Priority Priority `json:"priority"`
		// Limit is the most callers inside below which the class may
		// enter now: Max less the places reserved for the classes above
		// it.
		Limit int `json:"limit"`
		// Admitted counts the callers of the class let in.
		Admitted uint64 `json:"admitted"`
		// Shed counts the callers of the class refused without waiting,
		// or whose place in the queue went to a caller of a higher class.
		// Those that waited and gave up are counted in TimedOut only.
		Shed uint64 `json:"shed"`
	} `json:"classes"`
}

// NewGate returns a Gate admitting at most max callers at once, with the
// reserves of WithReserve, its only option. It returns an error wrapping
// an error if max < 1, if the reserves are not valid (the error
// names the option), or if an option does not apply to a Gate.
func NewGate(max int, opts ...Option) (*Gate, error) {
	g := &Gate{epoch: time.Now()}
	max0, reserves, err := gateSize(max, opts)
	if err != nil {
		return nil, err
	}
	g.max0, g.reserve0 = max0, reserves
	g.setMaxLocked(max0)
	return g, nil
}

// gateSize checks a gate's size and its options, as NewGate takes them,
// and returns the size and each class's reserve.
func gateSize(max int, opts []Option) (int64, [numClasses]int64, error) {
	var reserves [numClasses]int64
	if max < 1 {
		return 0, reserves, fmt.Errorf("%w: gate size must be >= 1, got %d", errInvalidLimit, max)
	}
	var o options
	if err := collect(&o, opts, optReserve, "a Gate"); err != nil {
		return 0, reserves, fmt.Errorf("%w: %s", errInvalidLimit, err)
	}
	for _, r := range o.reserves {
		if r.p != PriorityDefault && r.p != PriorityCritical {
			return 0, reserves, fmt.Errorf("%w: WithReserve(%v, %d): the priority must be PriorityDefault or PriorityCritical", errInvalidLimit, r.p, r.n)
		}
		if r.n < 0 {
			return 0, reserves, fmt.Errorf("%w: WithReserve(%v, %d): the places reserved must be >= 0", errInvalidLimit, r.p, r.n)
		}
		reserves[r.p.class()] = int64(r.n)
	}
	// Two reserves of at most math.MaxInt each add up within a uint64.
	var sum uint64
	for _, n := range reserves {
		sum += uint64(n)
	}
	if sum > uint64(max-1) {
		return 0, reserves, fmt.Errorf("%w: WithReserve: %d places reserved in a gate of %d leave none for PrioritySheddable", errInvalidLimit, sum, max)
	}
	return int64(max), reserves, nil
}

// SetSize changes the size g was made with, and its reserves, to max and
// those of opts, as NewGate would make them: a configuration changed
// while serving. The callers inside keep their places, and waiting
// callers are let in as places free, as after SetMax; the reserves are
// those opts give, none if it gives none. It returns an error, and
// changes nothing, where NewGate would return one. A new size becomes the
// maximum, and a controller that moves g's maximum (package adaptive)
// moves it from there on; with the size unchanged, the maximum SetMax or
// a controller set is kept, and only the reserves change, scaled to it.
func (g *Gate) SetSize(max int, opts ...Option) error {
	max0, reserves, err := gateSize(max, opts)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	m := max0
	if max0 == g.max0 {
		m = g.max.Load()
	}
	g.max0, g.reserve0 = max0, reserves
	g.setMaxLocked(m)
	g.grant()
	return nil
}

// setMaxLocked sets the gate's size and each class's limit, scaling the
// reserves as WithReserve documents. g.mu is held, or g is not shared yet.
// NewGate holds the reserves to max0-1 in all, so nothing overflows for
// any m >= 1: from m >= max0/2 the scaled reserves add up to at most m;
// below, each is at most m.
func (g *Gate) setMaxLocked(m int64) int64 {
	var res [numClasses]int64
	sum := int64(0)
	for c, n := range g.reserve0 {
		if n > 0 {
			// n*m/max0 rounded, in 128 bits: n < max0, so it fits in m.
			hi, lo := bits.Mul64(uint64(n), uint64(m))
			lo, carry := bits.Add64(lo, uint64(g.max0/2), 0)
			q, _ := bits.Div64(hi+carry, lo, uint64(g.max0))
			res[c] = max(int64(q), 1)
			sum += res[c]
		}
	}
	// Leave a place for the lowest class: cut the lowest reserves first.
	for c := 1; c < numClasses && sum > m-1; c++ {
		cut := min(res[c], sum-(m-1))
		res[c] -= cut
		sum -= cut
	}
	above := int64(0)
	for c := numClasses - 1; c >= 0; c-- {
		g.lim[c].Store(m - above)
		above += res[c]
	}
	return g.max.Swap(m)
}

// now returns the time on g's clock.
func (g *Gate) now() int64 { return int64(time.Since(g.epoch)) }

// TryEnter lets the caller in if there is room, without waiting, as
// TryEnterPriority(PriorityDefault) does. It returns false if the gate is
// full.
func (g *Gate) TryEnter() (Permit, bool) {
	if !g.acquire(PriorityDefault, true) {
		return Permit{}, false
	}
	return Permit{g: g}, true
}

// TryEnterPriority lets a caller of class p in if there is a place its
// class may take, without waiting. It returns false if there is none.
func (g *Gate) TryEnterPriority(p Priority) (Permit, bool) {
	if !g.acquire(p, true) {
		return Permit{}, false
	}
	return Permit{g: g}, true
}

// acquire takes a place if class p may take one, and records the
// admission, or the refusal if shed.
func (g *Gate) acquire(p Priority, shed bool) bool {
	c := p.class()
	for {
		n := g.inside.Load()
		if n >= g.lim[c].Load() {
			if shed {
				g.shed[c].Add(1)
			}
			return false
		}
		if g.inside.CompareAndSwap(n, n+1) {
			g.admitted[c].Add(1)
			for p := g.peak.Load(); n+1 > p && !g.peak.CompareAndSwap(p, n+1); p = g.peak.Load() {
			}
			return true
		}
	}
}

// Enter lets the caller in, waiting at most wait for room, as
// EnterPriority(ctx, wait, PriorityDefault) does, and reports whether it
// did. It refuses at once if the gate is full and wait <= 0, or as many
// callers as the gate admits are waiting already, or AdaptWait has judged
// the gate overloaded (counted as Shed); otherwise it gives up when the
// gate has stayed full for the whole wait or ctx ends first (counted as
// TimedOut; ctx.Err tells which). Waiting callers are let in first come,
// first served; a caller that does not wait (TryEnter) may take a place
// freed between two waiters.
func (g *Gate) Enter(ctx context.Context, wait time.Duration) (Permit, bool) {
	return g.EnterPriority(ctx, wait, PriorityDefault)
}

// EnterPriority lets a caller of class p in, waiting at most wait for a
// place its class may take, as Enter does for PriorityDefault. A place
// freed while callers wait goes to the one that has waited longest among
// those whose class may take it. A caller that finds the queue full takes
// the place in it of the waiter of the lowest class below its own that
// came last, if there is one, and that waiter is refused at once (counted
// as Shed, of its class); otherwise it is refused itself.
func (g *Gate) EnterPriority(ctx context.Context, wait time.Duration, p Priority) (Permit, bool) {
	c := p.class()
	if g.acquire(p, false) {
		return Permit{g: g}, true
	}
	if wait <= 0 {
		g.shed[c].Add(1)
		return Permit{}, false
	}
	var now int64
	adapt := g.interval.Load() > 0
	if adapt {
		now = g.now()
		if now < g.cutUntil.Load() {
			g.shed[c].Add(1)
			return Permit{}, false
		}
	}
	g.mu.Lock()
	// Count in as waiting before looking again, so that a Release that
	// frees a place after this look sees a waiter to hand it to.
	g.nwait.Add(1)
	if g.acquire(p, false) {
		g.nwait.Add(-1)
		g.mu.Unlock()
		return Permit{g: g}, true
	}
	if !adapt {
		now = g.now()
	}
	if (adapt && g.judgeLocked(now)) || (g.queued.Load() >= g.max.Load() && !g.evictLocked(c, now)) {
		g.nwait.Add(-1)
		g.mu.Unlock()
		g.shed[c].Add(1)
		return Permit{}, false
	}
	w := &gateWaiter{granted: make(chan bool, 1), start: now, class: p, seq: g.seq}
	g.seq++
	g.waiters[c] = append(g.waiters[c], w)
	g.queued.Add(1)
	g.mu.Unlock()

	timer := time.NewTimer(wait)
	defer timer.Stop()
	expired := false
	select {
	case ok := <-w.granted:
		if !ok {
			return Permit{}, false // counted by evictLocked
		}
		g.waitedFor(w, g.now())
		return Permit{g: g}, true
	case <-timer.C:
		expired = true
	case <-ctx.Done():
	}
	end := g.now()
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, o := range g.waiters[c] {
		if o == w {
			g.waiters[c] = slices.Delete(g.waiters[c], i, i+1)
			g.queued.Add(-1)
			g.nwait.Add(-1)
			g.waitedFor(w, end)
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
	// Granted a place, or refused, as the wait ended.
	if !<-w.granted {
		return Permit{}, false
	}
	g.waitedFor(w, end)
	return Permit{g: g}, true
}

// evictLocked makes room in the full queue for a caller of class c: it
// refuses the waiter of the lowest class below c that came last, if there
// is one, and reports whether it did. g.mu is held.
func (g *Gate) evictLocked(c int, now int64) bool {
	for k := range c {
		if n := len(g.waiters[k]); n > 0 {
			w := g.waiters[k][n-1]
			g.waiters[k][n-1] = nil
			g.waiters[k] = g.waiters[k][:n-1]
			g.queued.Add(-1)
			g.nwait.Add(-1)
			g.waitedFor(w, now)
			g.shed[k].Add(1)
			w.granted <- false
			return true
		}
	}
	return false
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
// of 100ms, twenty times a wait of 5ms, suits most services. Only the
// interval just ended is judged: an interval's counts are judged when the
// first caller after its end waits or stops waiting, and dropped if that
// is more than an interval after its end, so that a caller after a quiet
// spell is never refused for an overload long past. Interval <= 0
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
	// Judged when the next caller waits or stops waiting: if that is more
	// than an interval after the counted one ended, the interval just
	// ended saw no wait end, and the counts, however bad, are history.
	standing := now-j.since < 2*iv && j.waited >= judgeMin && 3*j.gaveUp > j.waited
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

// grant hands free places to the callers waiting longest whose class may
// take them: the first of each class is the longest waiting of its class,
// so this costs a few loads per class and place. g.mu is held.
func (g *Gate) grant() {
	for {
		best := -1
		n := g.inside.Load()
		for c := range g.waiters {
			if len(g.waiters[c]) > 0 && n < g.lim[c].Load() && (best < 0 || g.waiters[c][0].seq < g.waiters[best][0].seq) {
				best = c
			}
		}
		if best < 0 {
			return
		}
		w := g.waiters[best][0]
		if !g.acquire(w.class, false) {
			continue // a caller took the place meanwhile: look again
		}
		g.waiters[best][0] = nil
		g.waiters[best] = g.waiters[best][1:]
		g.queued.Add(-1)
		g.nwait.Add(-1)
		if w.start >= g.judge.since {
			g.judge.waited++
		}
		w.granted <- true
	}
}

// SetMax changes the most callers g admits at once, such as a controller
// that finds the process's capacity from latency does (package adaptive),
// and returns the previous maximum. It panics if max < 1. The reserves of
// WithReserve scale with it, as that option documents. A larger maximum
// lets waiting callers in at once; a smaller one admits nobody new until
// enough callers inside have left, and never turns anyone out. At most
// max callers may wait.
func (g *Gate) SetMax(max int) int {
	if max < 1 {
		panic(fmt.Sprintf("limits: gate size must be >= 1, got %d", max))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.setMaxLocked(int64(max))
	g.grant()
	return int(old)
}

// InFlight returns the number of callers inside g now: one atomic load,
// cheap enough for every request.
func (g *Gate) InFlight() int { return int(g.inside.Load()) }

// Stats returns a snapshot of g's counters. Each counter is read
// atomically, but not all at the same instant.
func (g *Gate) Stats() GateStats {
	s := GateStats{
		Max:        int(g.max.Load()),
		InFlight:   int(g.inside.Load()),
		Peak:       int(g.peak.Load()),
		Waiting:    int(g.queued.Load()),
		TimedOut:   g.timedOut.Load(),
		Waited:     g.waited.Load(),
		WaitTime:   time.Duration(g.waitNanos.Load()),
		Overloaded: g.interval.Load() > 0 && g.now() < g.cutUntil.Load(),
		Overloads:  g.overloads.Load(),
	}
	for c := range s.Classes {
		cs := &s.Classes[c]
		cs.Priority = PrioritySheddable + Priority(c)
		cs.Limit = int(g.lim[c].Load())
		cs.Admitted = g.admitted[c].Load()
		cs.Shed = g.shed[c].Load()
		s.Admitted += cs.Admitted
		s.Shed += cs.Shed
	}
	return s
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
