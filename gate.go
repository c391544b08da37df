package limits

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// Gate admits at most a fixed number of callers at once, for the whole
// process: the answer to "can this process take one more request now?".
//
// TryEnter succeeds or fails at once. Enter may also wait a short, bounded
// time for a place, for contention that clears within milliseconds; at most
// as many callers may wait as the gate admits, and the rest are refused at
// once, so the gate never builds an unbounded queue. A caller that enters
// gets a Permit and must Release it, typically with defer.
//
// A Gate fails closed: when it cannot admit, it refuses. All methods are
// safe for concurrent use. The zero value is not usable; call NewGate.
type Gate struct {
	max   int
	slots chan struct{} // one element per caller inside
	// waiting counts the callers in Enter's wait, against max.
	waiting atomic.Int64

	peak     atomic.Int64
	admitted atomic.Uint64
	shed     atomic.Uint64
	timedOut atomic.Uint64
}

// GateStats is a snapshot of a Gate's counters, in callers; counters only
// grow, from 0 when the gate was made. It marshals to JSON with the field
// names in snake case.
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
}

// NewGate returns a Gate admitting at most max callers at once, or an
// error wrapping ErrInvalidLimit if max < 1.
func NewGate(max int) (*Gate, error) {
	if max < 1 {
		return nil, fmt.Errorf("%w: gate size must be >= 1, got %d", ErrInvalidLimit, max)
	}
	return &Gate{max: max, slots: make(chan struct{}, max)}, nil
}

// TryEnter lets the caller in if there is room, without waiting. It returns
// false if the gate is full.
func (g *Gate) TryEnter() (Permit, bool) {
	select {
	case g.slots <- struct{}{}:
		g.entered()
		return Permit{g: g}, true
	default:
		g.shed.Add(1)
		return Permit{}, false
	}
}

// Enter lets the caller in, waiting at most wait for room, and reports
// whether it did. It refuses at once if the gate is full and wait <= 0, or
// as many callers as the gate admits are waiting already (counted as
// Shed); otherwise it gives up when the gate has stayed full for the whole
// wait or ctx ends first (counted as TimedOut; ctx.Err tells which).
// Waiting callers are let in first come, first served.
func (g *Gate) Enter(ctx context.Context, wait time.Duration) (Permit, bool) {
	select {
	case g.slots <- struct{}{}:
		g.entered()
		return Permit{g: g}, true
	default:
	}
	if wait <= 0 || g.waiting.Add(1) > int64(g.max) {
		if wait > 0 {
			g.waiting.Add(-1)
		}
		g.shed.Add(1)
		return Permit{}, false
	}
	defer g.waiting.Add(-1)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case g.slots <- struct{}{}:
		g.entered()
		return Permit{g: g}, true
	case <-timer.C:
	case <-ctx.Done():
	}
	g.timedOut.Add(1)
	return Permit{}, false
}

// entered records an admission.
func (g *Gate) entered() {
	g.admitted.Add(1)
	n := int64(len(g.slots))
	for p := g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
	}
}

// Stats returns a snapshot of g's counters. Each counter is read
// atomically, but not all at the same instant.
func (g *Gate) Stats() GateStats {
	return GateStats{
		Max:      g.max,
		InFlight: len(g.slots),
		Peak:     int(g.peak.Load()),
		Waiting:  int(g.waiting.Load()),
		Admitted: g.admitted.Load(),
		Shed:     g.shed.Load(),
		TimedOut: g.timedOut.Load(),
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
		<-p.g.slots
	}
}

// Held reports whether the Permit holds a place that has not been released.
func (p *Permit) Held() bool {
	return p.g != nil && !p.released.Load()
}
