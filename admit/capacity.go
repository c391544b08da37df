package admit

// This file is the engine's gate: the requests it serves at once in the
// process, with, if adaptive, the controller that moves the gate's maximum
// from the latency of the requests it admits.

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
)

// capacity is an engine's gate.
type capacity struct {
	gate *limits.Gate
	ctrl *adaptive.Controller // moves the gate's maximum, if set
	// wait is how long a request may wait for a place; 0 means none, or
	// with ctrl, ctrl's wait.
	wait time.Duration
	// shared says the gate was given to the engine, which then shares it
	// with others: its counters are the gate's own, exported once by
	// whoever made it.
	shared bool
	// shadow says the gate only measures: a request it would refuse is
	// counted, and let in without a place.
	shadow bool
	// max, reserve, adapt and adaptive are what the configuration said,
	// for an update to tell what changed; apply, if set, changes the gate
	// as the update that made c lands.
	max      int
	reserve  map[limits.Priority]int
	adapt    time.Duration
	adaptive *adaptive.Config
	apply    func()
}

// enter lets a request of class p in, waiting at most c.wait for a place,
// and reports whether it did; h then holds the place. c may be nil: no
// gate, and every request is let in.
func (c *capacity) enter(ctx context.Context, h *held, p limits.Priority) bool {
	if c == nil {
		return true
	}
	var ok bool
	switch {
	case c.wait > 0:
		h.permit, ok = c.gate.EnterPriority(ctx, c.wait, p)
	case c.ctrl != nil:
		h.permit, ok = c.ctrl.EnterPriority(ctx, p)
	default:
		h.permit, ok = c.gate.TryEnterPriority(p)
	}
	if ok && c.ctrl != nil {
		h.ctrl, h.start = c.ctrl, time.Since(epoch)
	}
	return ok
}

// stats returns the gate's counters and the controller's, each nil where
// there is none.
func (c *capacity) stats() (*limits.GateStats, *adaptive.Stats) {
	if c == nil {
		return nil, nil
	}
	if c.ctrl != nil {
		s := c.ctrl.Stats()
		return &s.Gate, &s
	}
	g := c.gate.Stats()
	return &g, nil
}

// held is a place in a gate, held from enter until leave. The zero held
// holds nothing.
type held struct {
	permit limits.Permit
	ctrl   *adaptive.Controller
	start  time.Duration // when it was let in, on the clock of epoch
	left   atomic.Bool
}

// epoch starts the monotonic clock that held reads: a Duration since it is
// half the size of a time.Time.
var epoch = time.Now()

// leave gives the place back, telling the controller, if any, how the
// request went and how long it took since it was let in. Only the first
// call does anything; it is safe for concurrent use.
func (h *held) leave(o adaptive.Outcome) {
	if h.ctrl == nil {
		h.permit.Release() // idempotent itself
		return
	}
	if !h.permit.Held() || !h.left.CompareAndSwap(false, true) {
		return
	}
	h.ctrl.Observe(time.Since(epoch)-h.start, o)
	h.permit.Release()
}
