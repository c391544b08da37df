package adaptive

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitsgo/limits"
)

// Outcome is how a request ended, as reported to Observe.
type Outcome uint8

const (
	// Success is a request served: its latency counts.
	Success Outcome = iota
	// Dropped is a request that failed in a way that signals overload,
	// such as a timeout or a dependency that refused it: its latency does
	// not count, but a law such as AIMD backs off.
	Dropped
	// Ignored is a request that says nothing of the service's capacity,
	// such as one a later layer refused (429) or a client error: it
	// completes its window, but neither its latency nor its outcome
	// counts.
	Ignored
)

// Defaults of Config.
const (
	DefaultMax        = 1000
	DefaultWindow     = 100 * time.Millisecond
	DefaultSamples    = 50
	DefaultProbeEvery = 30 * time.Second
	DefaultHistory    = 64
	// DefaultQuantile is the latency quantile whose shift from the
	// baseline Gradient and Vegas read as queueing.
	DefaultQuantile = 0.1
	// DefaultTolerance is the queueing Gradient accepts, as a fraction of
	// the baseline's median latency.
	DefaultTolerance = 0.05
)

// ErrConfig is wrapped by the errors New returns for a Config it cannot
// use.
var ErrConfig = errors.New("adaptive: invalid config")

// Config configures a Controller. The zero Config is usable: a Gradient
// law between 1 and DefaultMax, starting from the gate's maximum.
type Config struct {
	// Law decides each window's limit; nil means Gradient{}.
	Law Law
	// Min and Max bound the limit; 0 means 1 and DefaultMax.
	Min, Max int
	// Initial is the limit to start from; 0 means the gate's maximum when
	// New is called (clamped to [Min, Max]).
	Initial int
	// Window is the shortest window: the limit changes at most once per
	// Window, and only once Samples requests have completed in the window;
	// 0 means DefaultWindow.
	Window time.Duration
	// Samples is the fewest requests a window needs to have seen complete;
	// 0 means DefaultSamples. A probe for the baseline needs four times
	// as many.
	Samples int
	// ProbeEvery is how often the Controller measures the baseline, the
	// latency of requests served without queueing, which Gradient and
	// Vegas compare each window's to: it lowers the gate's limit to half
	// (but not below Min) until 4*Samples requests admitted at that
	// concurrency have completed, then restores it. The first probe starts
	// at once; while probes find latency falling by more than 10% at half
	// the concurrency, which means the concurrency was past the capacity,
	// they halve it again. 0 means DefaultProbeEvery; < 0 never measures
	// the baseline, for a law that does not read it, such as AIMD.
	ProbeEvery time.Duration
	// History is how many windows Stats.History keeps; 0 means
	// DefaultHistory.
	History int
}

// Controller moves a limits.Gate's maximum between a floor and a ceiling
// from the latency of the requests the gate admits: it gathers the
// latencies that Observe reports into windows, and after each asks its Law
// for the next limit, which it sets with Gate.SetMax. The gate keeps its
// guarantees: never more callers inside than its current maximum, a
// bounded wait, exact counters.
//
// A front end enters the gate as usual, and once the request is done
// calls Observe with the time since it was admitted, then releases its
// permit. Observe is a few atomic operations and allocates nothing; the
// window's end and the law run on the request that completes it, so the
// Controller starts no goroutine, and works in a testing/synctest bubble.
//
// All methods are safe for concurrent use. The zero value is not usable;
// call New.
type Controller struct {
	gate       *limits.Gate
	law        Law
	min, max   int
	window     int64 // nanoseconds
	samples    int
	probeEvery int64 // nanoseconds; < 0 never
	epoch      time.Time

	// The window being collected: the requests admitted from start until
	// closed (open while it takes admissions), each counted when Observe
	// reports it. Once closed, the window ends when all of them have been
	// reported, or a while after.
	start   atomic.Int64 // on the Controller's clock
	closed  atomic.Int64 // on the Controller's clock, or open
	want    atomic.Int64 // samples the window needs to close
	due     atomic.Int64 // requests admitted in the window, once closed
	n       atomic.Int64
	drops   atomic.Int64
	ignored atomic.Int64
	sum     atomic.Int64
	maxIn   atomic.Int64
	stale   atomic.Uint64
	hist    liveHist
	turning atomic.Bool // a call is closing or ending the window

	mu       sync.Mutex // guards what follows
	limit    float64
	rises    int
	refused  uint64 // the gate's refusals when the window began
	admitted uint64 // the gate's admissions when the window began
	baseline *Window
	last     Window
	probe    probe
	history  []Step // a ring of the last windows
	next     int    // where the next Step goes in history
	windows  uint64
	probes   uint64
	total    uint64 // samples in the windows ended
	dropped  uint64
	ignoredN uint64
}

// probe is the state of a baseline measurement.
type probe struct {
	on     bool
	at     int     // the concurrency probed
	resume float64 // the limit to restore
	// cascade is set once a probe has found latency lower at half the
	// concurrency of the probe before, last.
	cascade bool
	last    Window
	above   int   // a concurrency found past the capacity, or 0
	next    int64 // when the next probe starts, on the Controller's clock
}

// New returns a Controller of g's maximum, which it sets to the initial
// limit (and, unless cfg.ProbeEvery < 0, lowers at once for the first
// probe), or an error wrapping ErrConfig naming the field it cannot use.
func New(g *limits.Gate, cfg Config) (*Controller, error) {
	if g == nil {
		return nil, fmt.Errorf("%w: nil gate", ErrConfig)
	}
	if cfg.Window < 0 || cfg.Samples < 0 || cfg.History < 0 {
		return nil, fmt.Errorf("%w: Window, Samples and History must be >= 0, got %v, %d, %d", ErrConfig, cfg.Window, cfg.Samples, cfg.History)
	}
	c := &Controller{
		gate: g, law: cfg.Law,
		min: cmp0(cfg.Min, 1), max: cmp0(cfg.Max, DefaultMax),
		window:     int64(cmp0(cfg.Window, DefaultWindow)),
		samples:    cmp0(cfg.Samples, DefaultSamples),
		probeEvery: int64(cmp0(cfg.ProbeEvery, DefaultProbeEvery)),
		epoch:      time.Now(),
		history:    make([]Step, 0, cmp0(cfg.History, DefaultHistory)),
	}
	if c.law == nil {
		c.law = Gradient{}
	}
	if cfg.Min < 0 || cfg.Max < 0 || cfg.Initial < 0 {
		return nil, fmt.Errorf("%w: Min, Max and Initial must be >= 0, got %d, %d, %d", ErrConfig, cfg.Min, cfg.Max, cfg.Initial)
	}
	if c.max < c.min {
		return nil, fmt.Errorf("%w: want 1 <= Min <= Max, got Min %d, Max %d", ErrConfig, c.min, c.max)
	}
	initial := cfg.Initial
	if initial == 0 {
		initial = g.Stats().Max
	}
	c.limit = float64(min(max(initial, c.min), c.max))
	c.want.Store(int64(c.samples))
	g.SetMax(int(c.limit))
	if c.probeEvery >= 0 {
		c.startProbe(c.probeAt(c.limit))
	}
	c.begin(0)
	return c, nil
}

// cmp0 returns v, or def if v is 0.
func cmp0[T int | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// open is the closing time of a window that takes admissions.
const open = math.MaxInt64

// now returns the time on c's clock.
func (c *Controller) now() int64 { return int64(time.Since(c.epoch)) }

// Gate returns the gate c controls.
func (c *Controller) Gate() *limits.Gate { return c.gate }

// Limit returns the limit c last set: the gate's maximum, unless someone
// else has called SetMax since.
func (c *Controller) Limit() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.current()
}

// current returns the gate maximum that c's state calls for. c.mu is held.
func (c *Controller) current() int {
	if c.probe.on {
		return c.probe.at
	}
	return int(math.Round(c.limit))
}

// Observe reports a request that has completed, latency after the gate
// admitted it, and how it ended. Call it for every request admitted,
// before releasing its permit. Each window counts the requests admitted
// while it takes admissions, so that what it measures reflects the limit
// it set: a request admitted before, or after, counts in no window.
//
// Observe allocates nothing. The call that ends a window also runs the
// law and sets the gate's maximum, under a lock that Observe otherwise
// does not take.
func (c *Controller) Observe(latency time.Duration, o Outcome) {
	now := c.now()
	in := int64(c.gate.InFlight())
	for m := c.maxIn.Load(); in > m && !c.maxIn.CompareAndSwap(m, in); m = c.maxIn.Load() {
	}
	latency = max(latency, 0)
	admitted := now - int64(latency)
	start, closed := c.start.Load(), c.closed.Load()
	switch {
	case admitted < start || admitted > closed:
		c.stale.Add(1)
	case o == Dropped:
		c.drops.Add(1)
	case o == Ignored:
		c.ignored.Add(1)
	default:
		c.n.Add(1)
		c.sum.Add(int64(latency))
		c.hist[bucketOf(int64(latency))].Add(1)
	}
	if closed == open {
		if now-start >= c.window && c.n.Load()+c.drops.Load() >= c.want.Load() {
			c.close(now)
		}
	} else if c.complete() || now-closed >= max(c.window, closed-start) {
		c.end(now)
	}
}

// close stops the window taking admissions at now, if no other call is
// turning it.
func (c *Controller) close(now int64) {
	if !c.turning.CompareAndSwap(false, true) {
		return
	}
	c.mu.Lock()
	if c.closed.Load() == open {
		c.closed.Store(now)
		c.due.Store(int64(c.gate.Stats().Admitted - c.admitted))
	}
	c.mu.Unlock()
	c.turning.Store(false)
	if c.complete() {
		c.end(now)
	}
}

// complete reports whether the window, closed to admissions, has seen all
// the requests it admitted complete, but for one in 64: requests admitted
// as it closed may count or not.
func (c *Controller) complete() bool {
	due := c.due.Load()
	return c.n.Load()+c.drops.Load()+c.ignored.Load() >= due-max(due/64, 1)
}

// begin starts a window at now. c.mu is held, or c is being made.
func (c *Controller) begin(now int64) {
	s := c.gate.Stats()
	c.admitted, c.refused = s.Admitted, s.Shed+s.TimedOut
	c.start.Store(now)
	c.closed.Store(open)
}

// end ends the window, closed to admissions, at now, if no other call is
// turning it, and sets the next limit.
func (c *Controller) end(now int64) {
	if !c.turning.CompareAndSwap(false, true) {
		return
	}
	defer c.turning.Store(false)
	c.mu.Lock()
	defer c.mu.Unlock()
	start, closed := c.start.Load(), c.closed.Load()
	if closed == open {
		return // ended by another call meanwhile
	}
	gs := c.gate.Stats()
	w := &c.last
	*w = Window{
		Start:       c.epoch.Add(time.Duration(start)),
		End:         c.epoch.Add(time.Duration(closed)),
		Limit:       c.current(),
		MaxInFlight: int(c.maxIn.Swap(0)),
		Refused:     int(gs.Shed + gs.TimedOut - c.refused),
		Samples:     int(c.n.Swap(0)),
		Dropped:     int(c.drops.Swap(0)),
		Ignored:     int(c.ignored.Swap(0)),
		Rises:       c.rises,
		Baseline:    c.baseline,
		sum:         c.sum.Swap(0),
	}
	for i := range c.hist {
		w.hist[i] = c.hist[i].Swap(0)
	}
	c.windows++
	c.total += uint64(w.Samples)
	c.dropped += uint64(w.Dropped)
	c.ignoredN += uint64(w.Ignored)

	probing := c.probe.on
	if probing {
		c.endProbe(now, w)
	} else {
		old := c.current()
		next := c.law.Next(c.limit, w)
		if math.IsNaN(next) || math.IsInf(next, 0) {
			next = c.limit
		}
		c.limit = min(max(next, float64(c.min)), float64(c.max))
		if c.current() > old {
			c.rises++
		} else {
			c.rises = 0
		}
		if c.probeEvery >= 0 && now >= c.probe.next {
			c.startProbe(c.probeAt(c.limit))
		}
	}
	c.gate.SetMax(c.current())
	c.record(w, probing)
	c.begin(now)
}

// probeAt returns the concurrency at which to probe from a limit.
func (c *Controller) probeAt(limit float64) int {
	return max(c.min, int(math.Ceil(limit/2)))
}

// startProbe lowers the limit to at, to measure the baseline. c.mu is held,
// or c is being made.
func (c *Controller) startProbe(at int) {
	if !c.probe.on {
		c.probe.resume = c.limit
		c.probes++
	}
	c.probe.on, c.probe.at = true, at
	c.want.Store(int64(4 * c.samples))
	c.gate.SetMax(at)
}

// endProbe takes the window w, measured at the probe's concurrency, as
// the baseline, or probes at half the concurrency if latency was lower
// there than at the probe before. c.mu is held.
func (c *Controller) endProbe(now int64, w *Window) {
	prev := &c.probe.last
	if !c.probe.cascade {
		prev = c.baseline
	}
	// Past the capacity, requests queue: a lower concurrency makes them
	// faster. A faster service does too, and calls for a lower look.
	if (prev == nil || queueing(prev, w) > probeTolerance) && c.probe.at > c.min {
		if c.probe.cascade {
			c.probe.above = c.probe.last.Limit // past the capacity
		}
		c.probe.last, c.probe.cascade = *w, true
		c.startProbe(max(c.min, c.probe.at/2))
		return
	}
	b := *w
	b.Baseline = nil
	if prev != nil && queueing(w, prev) <= probeTolerance && queueing(prev, w) <= probeTolerance {
		// Latency as it was at twice the concurrency, or at the last
		// probe: both measured requests served without queueing, and
		// together measure them more precisely. The older weighs half.
		for i, n := range prev.hist {
			b.hist[i] += n / 2
		}
		b.Samples += prev.Samples / 2
		b.sum += prev.sum / 2
	}
	c.baseline = &b
	c.limit = c.probe.resume
	if c.probe.above > 0 {
		// The probes found queueing at that concurrency: no need to come
		// back higher.
		c.limit = min(c.limit, float64(c.probe.above))
	}
	c.probe = probe{next: now + c.probeEvery}
	c.want.Store(int64(c.samples))
}

// probeTolerance is the queueing, as a fraction of the median latency
// without it, that tells one probe's latency from another's.
const probeTolerance = 0.1

// queueing returns how much slower hi's requests were than lo's, as a
// fraction of lo's median latency: the larger of the shift of the
// quantile DefaultQuantile, which queueing moves most surely when all
// requests wait, and half the shift of the median, which it moves when
// only some do, as they do while the service fills from empty.
func queueing(hi, lo *Window) float64 {
	med := lo.Quantile(0.5)
	if med <= 0 || hi.Samples == 0 {
		return 0
	}
	low := float64(hi.Quantile(DefaultQuantile) - lo.Quantile(DefaultQuantile))
	mid := float64(hi.Quantile(0.5)-med) / 2
	return max(low, mid) / float64(med)
}

// record adds the window w to the history, with the limit set after it.
// c.mu is held.
func (c *Controller) record(w *Window, probe bool) {
	s := Step{
		At: w.End, Limit: c.current(), Probe: probe,
		Samples: w.Samples, Dropped: w.Dropped,
		P50: w.Quantile(0.5), P99: w.Quantile(0.99),
	}
	if len(c.history) < cap(c.history) {
		c.history = append(c.history, s)
		return
	}
	c.history[c.next] = s
	c.next = (c.next + 1) % len(c.history)
}
