package front

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
)

// Capacity is a front end's gate: the requests it serves at once in the
// process, with, if adaptive, the controller that moves the gate's maximum
// from the latency of the requests it admits.
type Capacity struct {
	Gate *limits.Gate
	// Ctrl moves the gate's maximum, if set.
	Ctrl *adaptive.Controller
	// Wait is how long a request may wait for a place; 0 means none, or
	// with Ctrl, Ctrl.Wait.
	Wait time.Duration
	// Shared says the gate was given to the front end, which then shares
	// it with others: its counters are the gate's own, exported once by
	// whoever made it, not under each front end that uses it.
	Shared bool
}

// CapacityConfig is what a front end's configuration says of its gate.
type CapacityConfig struct {
	// Max is the gate's size, or, with Adaptive, the most the controller
	// may set; 0 means no gate.
	Max int
	// Wait is how long a request may wait for a place; Adapt, if positive,
	// the interval of Gate.AdaptWait.
	Wait, Adapt time.Duration
	// Adaptive, if set, configures a controller for the gate. Its Max
	// must be 0 (meaning Max) or at most Max.
	Adaptive *adaptive.Config
	// Gate, if set, is a gate made elsewhere that the front end shares,
	// in place of one of its own; Ctrl, if set, is the controller that
	// moves a shared gate's maximum (its Gate, if Gate is nil). Either
	// excludes Max, Adapt and Adaptive, which configure a gate of the
	// front end's own.
	Gate *limits.Gate
	Ctrl *adaptive.Controller
}

// NewCapacity returns the Capacity cfg configures, nil if it configures no
// gate, or an error naming the front end's fields (MaxInFlight,
// QueueAdapt, Adaptive) for a configuration it cannot honour.
func NewCapacity(cfg CapacityConfig) (*Capacity, error) {
	if err := CheckNonNegative(Field{Name: "QueueAdapt", Value: int64(cfg.Adapt)}); err != nil {
		return nil, err
	}
	if cfg.Gate != nil || cfg.Ctrl != nil {
		return shared(cfg)
	}
	if cfg.Max <= 0 {
		switch {
		case cfg.Adaptive != nil:
			return nil, fmt.Errorf("Adaptive needs MaxInFlight, the most it may admit at once")
		case cfg.Adapt > 0:
			return nil, fmt.Errorf("QueueAdapt needs MaxInFlight, a gate whose queue to adapt")
		}
		return nil, nil
	}
	if cfg.Adapt > 0 && cfg.Wait <= 0 {
		return nil, fmt.Errorf("QueueAdapt needs QueueWait: a gate that lets nobody wait has no queue to adapt")
	}
	g, err := limits.NewGate(cfg.Max)
	if err != nil {
		return nil, err
	}
	c := &Capacity{Gate: g, Wait: cfg.Wait}
	if cfg.Adapt > 0 {
		g.AdaptWait(cfg.Adapt)
	}
	if cfg.Adaptive != nil {
		ac := *cfg.Adaptive
		switch {
		case ac.Max == 0:
			ac.Max = cfg.Max
		case ac.Max > cfg.Max:
			return nil, fmt.Errorf("Adaptive.Max (%d) must not exceed MaxInFlight (%d)", ac.Max, cfg.Max)
		}
		if c.Ctrl, err = adaptive.New(g, ac); err != nil {
			return nil, fmt.Errorf("Adaptive (with MaxInFlight %d as its Max unless set): %w", cfg.Max, err)
		}
	}
	return c, nil
}

// shared returns the Capacity of a shared gate.
func shared(cfg CapacityConfig) (*Capacity, error) {
	g := cfg.Gate
	switch {
	case g == nil:
		g = cfg.Ctrl.Gate()
	case cfg.Ctrl != nil && cfg.Ctrl.Gate() != g:
		return nil, errors.New("the Controller moves another gate than Gate: set one of them, or the Gate the Controller was made for")
	}
	switch {
	case cfg.Max != 0:
		return nil, fmt.Errorf("MaxInFlight makes a gate of the front end's own: leave it 0 with a shared Gate, which has the size it was made with")
	case cfg.Adaptive != nil:
		return nil, fmt.Errorf("Adaptive makes a controller of the front end's own: with a shared Gate, set Controller to the gate's controller")
	case cfg.Adapt > 0:
		return nil, fmt.Errorf("QueueAdapt configures a gate of the front end's own: call AdaptWait on the shared Gate")
	}
	return &Capacity{Gate: g, Ctrl: cfg.Ctrl, Wait: cfg.Wait, Shared: true}, nil
}

// Enter lets a request of class p in, waiting at most c.Wait for a
// place, and reports whether it did; h then holds the place. The gate's
// reserves (limits.WithReserve) keep the places of the classes above p
// from it. c may be nil: no gate, and every request is let in.
func (c *Capacity) Enter(ctx context.Context, h *Held, p limits.Priority) bool {
	if c == nil {
		return true
	}
	var ok bool
	switch {
	case c.Wait > 0:
		h.permit, ok = c.Gate.EnterPriority(ctx, c.Wait, p)
	case c.Ctrl != nil:
		// The controller's wait, two places' time, the mean latency
		// until its first window ends (adaptive.Controller.Wait).
		h.permit, ok = c.Ctrl.EnterPriority(ctx, p)
	default:
		h.permit, ok = c.Gate.TryEnterPriority(p)
	}
	if ok && c.Ctrl != nil {
		h.ctrl, h.start = c.Ctrl, time.Since(epoch)
	}
	return ok
}

// Stats returns the gate's counters and the controller's, each nil where
// there is none.
func (c *Capacity) Stats() (*limits.GateStats, *adaptive.Stats) {
	if c == nil {
		return nil, nil
	}
	if c.Ctrl != nil {
		s := c.Ctrl.Stats()
		return &s.Gate, &s
	}
	g := c.Gate.Stats()
	return &g, nil
}

// Held is a place in a Capacity's gate, held from Enter until Leave. The
// zero Held holds nothing.
type Held struct {
	permit limits.Permit
	ctrl   *adaptive.Controller
	start  time.Duration // when it was let in, on the clock of epoch
	left   atomic.Bool
}

// epoch starts the monotonic clock that Held reads: a Duration since it
// is half the size of a time.Time, and Held lives in every request.
var epoch = time.Now()

// Reports reports whether Leave tells a controller how the request went.
func (h *Held) Reports() bool { return h.ctrl != nil }

// Leave gives the place back, telling the controller, if any, how the
// request went and how long it took since it was let in. Only the first
// call does anything; it is safe for concurrent use.
func (h *Held) Leave(o adaptive.Outcome) {
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
