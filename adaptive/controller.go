package adaptive

import (
	"context"
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
	// DefaultQuantile is the lowest latency quantile whose shift from
	// the baseline Gradient and Vegas read as queueing, with the mean's
	// and the quartile's and the median's.
	DefaultQuantile = 0.1
	// DefaultTolerance is the queueing Gradient accepts, as a fraction of
	// the baseline's mean latency.
	DefaultTolerance = 0.02
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
	// Window, and only once Samples requests have completed in the window,
	// or, before the first baseline (outside probes, and if ProbeEvery is
	// not < 0), four times the limit if the gate refused requests of a
	// demand below the limit meanwhile (such a window ends at once, and
	// the limit rises); 0 means DefaultWindow.
	Window time.Duration
	// Samples is the fewest requests a window needs to have seen complete;
	// 0 means DefaultSamples. The baseline needs as many for each request
	// at once at the concurrency it is measured at, at most 16 times as
	// many.
	Samples int
	// ProbeEvery is how often the Controller measures the baseline, the
	// latency of requests served without queueing, which Gradient and
	// Vegas compare each window's to. It measures only while the limit
	// holds the load back (a window in which the gate was full and the
	// demand, Window.Demand, reached the limit, as did the window's
	// before; or, in the first window after the start, which has none
	// before it, a demand of 1.5 times the limit), so a gate that is not
	// the constraint costs nothing. It lowers the limit to half for one
	// window; while latency there is lower than at the limit, beyond the
	// windows' sampling error, which means the limit was past the
	// capacity, it halves again; where it is not, it gathers Samples
	// requests for each request at once, at most 16*Samples, for the
	// baseline, in windows of their own, at that concurrency, or at twice
	// it if latency was no higher there within one standard error and a
	// concurrency past the capacity was found above, then restores the
	// limit (no higher than that concurrency).
	// The first time, when latency at half the limit is no lower, the
	// limit may be too low: it doubles the limit, one window each, until
	// latency rises, and takes the windows before as the baseline,
	// gathering more at the highest concurrency whose window read no
	// queueing if they hold fewer. A law's cuts that do not lower latency,
	// or its rises that do not raise it (by 10% of the limit), mean the
	// baseline reads too low: it is measured again, at once, at half the
	// limit (or at half that, and so on, if the baseline reads higher
	// there than the one before, beyond their errors: the capacity fell
	// below half the limit). A baseline read low holds a limit below a
	// capacity that grew until it is measured again: before a service
	// whose capacity grows (workers added, a dependency that recovers), a
	// shorter ProbeEvery follows it sooner, at the cost of a probe's
	// windows at half the limit (docs/CAPACITY.md, "When the capacity
	// grows"). 0 means DefaultProbeEvery; < 0 never measures the
	// baseline, for a law that does not read it, such as AIMD.
	ProbeEvery time.Duration
	// History is how many windows Stats.History keeps; 0 means
	// DefaultHistory.
	History int
	// Wait bounds how long Enter lets a request wait for a place in the
	// gate (see Controller.Wait): 0 means the wait the Controller
	// derives from latency, positive values cap it, and < 0 never waits,
	// as Gate.TryEnter does.
	Wait time.Duration
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
	probeEvery int64         // nanoseconds; < 0 never
	maxWait    time.Duration // Config.Wait
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
	// slowest is twice the longest latency of the last window: a window
	// closed to admissions waits that long for its requests to complete,
	// so that a slow service's long requests count.
	slowest atomic.Int64
	// longest is the longest latency of the window's requests reported
	// so far: a window closed to admissions also waits twice that, so
	// that the first window, or one of a service become slower, does not
	// end without its long requests, which would read latency low.
	longest atomic.Int64
	// wait is how long Enter lets a request wait for a place, in
	// nanoseconds, set after each window; 0 before the first.
	wait atomic.Int64
	// refused and admitted are the gate's refusals and admissions when
	// the window began; early is set while it may close early, before a
	// baseline, outside probes (see refusing).
	refused  atomic.Uint64
	admitted atomic.Uint64
	early    atomic.Bool

	mu    sync.Mutex // guards what follows
	limit float64
	rises int
	knee  int // the limit of the last window after which it fell, or 0
	// acc gathers the accN windows in a row, up to maxHeld, after which
	// the limit held, for the law to read together with the next.
	acc  Window
	accN int
	// cutW is the window after which the law began to cut the limit, if
	// cutN is 1: once the limit is 10% lower, latency should be too, and
	// once it is 10% higher, latency should be higher.
	cutW Window
	cutN int
	// prevW is the window after which the limit began to rise, or the
	// first window, before a baseline, if prevN is 1.
	prevW   Window
	prevN   int
	arrived int // requests that came while the window was open, once closed
	// held is the limit of the window before, or 0 after a probe: a
	// window whose limit was about the same as the one before measured
	// the gate as it stands at that limit, not filling.
	held int
	// heldFull is set if the gate was full in the window before: a
	// window after one in which it was not may see the gate fill, and
	// the queue behind it grow, until its end.
	heldFull bool
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
	// up is set while the probe climbs, doubling the concurrency, from
	// one found without queueing, the first time.
	up bool
	// last is the window of the step before: at twice the concurrency
	// going down, at half going up.
	last Window
	// base gathers the windows without queueing for the baseline, while
	// climbing.
	base Window
	// final is set once the probe has found the concurrency without
	// queueing, and gathers the baseline there.
	final bool
	// rebase is set when the probe measures a baseline found wrong: the
	// new one replaces it.
	rebase bool
	// climbed is set once a climb has found the concurrency past the
	// capacity, past, while the baseline gathers below it.
	climbed bool
	past    Window
	above   int   // a concurrency found past the capacity, or 0
	clean   int   // the highest concurrency of a climb whose windows base holds
	next    int64 // when the next probe starts, on the Controller's clock
}

// New returns a Controller of g's maximum, which it sets to the initial
// limit, or an error wrapping ErrConfig naming the field it cannot use.
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
		maxWait:    cfg.Wait,
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
	c.begin(0)
	g.SetMax(int(c.limit))
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
	if admitted >= start && admitted <= closed {
		for m := c.longest.Load(); int64(latency) > m && !c.longest.CompareAndSwap(m, int64(latency)); m = c.longest.Load() {
		}
	}
	if closed == open {
		if now-start >= c.window {
			switch {
			case c.n.Load()+c.drops.Load() >= c.want.Load():
				c.close(now, false)
			case c.early.Load() && c.refusing(now-start):
				// The limit refuses the bursts of a load it need not
				// hold back: it rises now, not once the requests still
				// inside have completed, while it goes on refusing.
				c.close(now, true)
			}
		}
	} else if c.complete() || now-closed >= max(c.window, closed-start, c.slowest.Load(), 2*c.longest.Load()) {
		c.end(now, true)
	}
}

// refusing reports whether the window, open for d nanoseconds, may close
// before it has Samples requests: before the Controller has a baseline
// (never, if it measures none), outside a probe, once the gate has
// refused a request since the window began, four times as many requests
// as the limit have completed in it, and the demand so far
// (Window.Demand) is below the limit: the limit does not hold the load
// back, and refuses its bursts. Such a window ends as it closes, without
// waiting for the requests still inside to complete. Before it knows
// anything of the service, a low limit, as a small service's is, refuses
// a share of the bursts of a load well below it for a whole window
// otherwise, and again for each rise.
func (c *Controller) refusing(d int64) bool {
	gs := c.gate.Stats()
	refused := gs.Shed + gs.TimedOut - c.refused.Load()
	n := c.n.Load()
	if refused == 0 || n == 0 || n+c.drops.Load() < 4*int64(gs.Max) || d <= 0 {
		return false
	}
	arrived := float64(gs.Admitted-c.admitted.Load()) + float64(refused)
	demand := arrived / float64(d) * float64(c.sum.Load()/n)
	return demand < float64(gs.Max)
}

// close stops the window taking admissions at now, if no other call is
// turning it, and ends it once the requests it admitted have completed,
// or at once if hurry is set.
func (c *Controller) close(now int64, hurry bool) {
	if !c.turning.CompareAndSwap(false, true) {
		return
	}
	c.mu.Lock()
	if c.closed.Load() == open {
		c.closed.Store(now)
		s := c.gate.Stats()
		c.due.Store(int64(s.Admitted - c.admitted.Load()))
		c.arrived = int(s.Admitted-c.admitted.Load()) + int(s.Shed+s.TimedOut-c.refused.Load())
	}
	c.mu.Unlock()
	c.turning.Store(false)
	if done := c.complete(); hurry || done {
		c.end(now, done)
	}
}

// complete reports whether the window, closed to admissions, has seen all
// the requests it admitted complete, but for one in 64: requests admitted
// as it closed may count or not, and so may the slowest requests, which
// the window waits for up to twice the longest latency of the window
// before.
func (c *Controller) complete() bool {
	due := c.due.Load()
	return c.n.Load()+c.drops.Load()+c.ignored.Load() >= due-max(due/64, 1)
}

// begin starts a window at now. c.mu is held, or c is being made.
func (c *Controller) begin(now int64) {
	s := c.gate.Stats()
	c.admitted.Store(s.Admitted)
	c.refused.Store(s.Shed + s.TimedOut)
	c.early.Store(c.baseline == nil && !c.probe.on && c.probeEvery >= 0)
	c.start.Store(now)
	c.closed.Store(open)
}

// end ends the window, closed to admissions, at now, if no other call is
// turning it, and sets the next limit. drained reports whether the window
// waited for the requests it admitted (see close): one that did not has
// not seen its slowest, and leaves the next window's wait for them as it
// was.
func (c *Controller) end(now int64, drained bool) {
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
	// The sum before the count: Wait, reading both without the lock, may
	// then read a mean too low for a moment, never one too high.
	sum := c.sum.Swap(0)
	*w = Window{
		Start:       c.epoch.Add(time.Duration(start)),
		End:         c.epoch.Add(time.Duration(closed)),
		Limit:       c.current(),
		MaxInFlight: int(c.maxIn.Swap(0)),
		Refused:     int(gs.Shed + gs.TimedOut - c.refused.Load()),
		Arrived:     c.arrived,
		admitted:    int(c.due.Load()),
		Samples:     int(c.n.Swap(0)),
		Dropped:     int(c.drops.Swap(0)),
		Ignored:     int(c.ignored.Swap(0)),
		Rises:       c.rises,
		Knee:        c.knee,
		Baseline:    c.baseline,
		sum:         sum,
	}
	for i := range c.hist {
		w.hist[i] = c.hist[i].Swap(0)
	}
	if drained {
		c.slowest.Store(2 * int64(w.Quantile(1)))
	}
	c.longest.Store(0)
	c.windows++
	c.total += uint64(w.Samples)
	c.dropped += uint64(w.Dropped)
	c.ignoredN += uint64(w.Ignored)

	probing := c.probe.on
	if probing {
		c.endProbe(now, w)
	} else {
		old := c.current()
		// A window measured the queue as it stands at its limit, rather
		// than filling or draining, if the window before was at about the
		// same limit, with the gate full, or, the first after the start
		// or a probe, if it saw many more requests than its limit.
		if c.held > 0 {
			w.steady = math.Abs(float64(w.Limit-c.held)) <= max(1, 0.1*float64(w.Limit)) && c.heldFull
		} else {
			w.steady = w.Samples >= 4*w.Limit
			w.filling = !w.steady
			w.first = true
		}
		// Cuts that did not lower latency, or rises that did not raise
		// it, by 10% of the limit from the window that first called for
		// a cut, mean it was not queueing: the baseline reads too low,
		// and is measured again. (Cuts by a little, and rises by a
		// little, may keep the limit within 10% of that window for good.)
		suspect := false
		switch {
		case c.cutN == 0:
		case c.baseline == nil || c.cutW.Baseline != c.baseline:
			c.cutN = 0
		case float64(w.Limit) >= 1.1*float64(c.cutW.Limit) && w.steady:
			// Past the capacity, a tenth more requests inside wait a
			// tenth of the latency more.
			d1, e1 := delay(&c.cutW, c.baseline)
			d2, e2 := delay(w, c.baseline)
			suspect = d1 > e1 && d2-d1 <= math.Hypot(e1, e2)
			c.cutN = 0
		case float64(w.Limit) <= 0.9*float64(c.cutW.Limit) && w.steady:
			// (A window right after a cut still drains the queue of the
			// limit before.)
			d1, e1 := delay(&c.cutW, c.baseline)
			d2, e2 := delay(w, c.baseline)
			suspect = d2 > e2 && d2 >= d1-e1/2
			c.cutN = 0
		}
		if c.prevN > 0 && c.baseline == nil {
			w.prev = &c.prevW
		}
		lw := w
		if c.accN > 0 && c.accN < maxHeld && c.acc.Limit == w.Limit && c.acc.Baseline == w.Baseline &&
			queueing(w, &c.acc) <= 0 && queueing(&c.acc, w) <= 0 {
			// The limit held, and latency is as it was: the law reads
			// this window with those before, more precisely.
			c.acc.extend(w)
			lw = &c.acc
		}
		next := c.law.Next(c.limit, lw)
		if math.IsNaN(next) || math.IsInf(next, 0) {
			next = c.limit
		}
		c.limit = min(max(next, float64(c.min)), float64(c.max))
		switch {
		case c.current() != old:
			c.accN = 0
		case lw == w:
			c.acc, c.accN = *w, 1
		default:
			c.accN++
		}
		if c.current() > old {
			c.rises++
		} else {
			c.rises = 0
		}
		switch {
		case c.current() < old:
			c.knee = old
			if c.cutN == 0 && w.steady && !w.first {
				// (Not the first window after the start or a probe,
				// which may have seen the gate fill, and read low.)
				c.cutW, c.cutN = *lw, 1
			}
		case c.knee > 0 && c.current() > c.knee:
			// Past where queueing was last found, without: the
			// capacity has grown, or the reading was noise.
			c.knee, c.rises = 0, 0
		}
		// A probe needs the limit to have held the load back in this
		// window and the one before; the first window after the start
		// has none before it, and needs a demand of 1.5 times the limit:
		// at a load below the limit, its bursts can fill the gate and
		// read a demand of about the limit.
		steady := constrained(w) && w.steady && (!w.first || c.baseline != nil || w.Demand() >= 1.5*float64(w.Limit))
		if c.probeEvery >= 0 && (c.baseline == nil || now >= c.probe.next || suspect) && steady {
			c.startProbe(now, w)
			c.probe.rebase = suspect
			if suspect && c.probe.on && !c.probe.up {
				// The baseline gathers at once at half the limit: the
				// window that raised the suspicion was picked for reading
				// slow, and compared with the probe's first step would
				// read it past the capacity, and halve again, more often
				// than it is.
				c.probe.final = true
			}
		}
		c.held = 0
		if !c.probe.on {
			c.held, c.heldFull = w.Limit, w.MaxInFlight >= w.Limit
		}
		switch {
		case (c.current() > old || w.first) && !c.probe.on && c.prevN == 0:
			// The reference of the latency of the windows that follow
			// while the limit rises, or after the first, before a
			// baseline: a window that filled the gate with requests
			// slower than the first's by more than their latency
			// (see burst) is not the burst of a light load, but the
			// queue of a limit far too high building.
			c.prevW, c.prevN = *w, 1
		case c.current() < old:
			c.prevN = 0
		}
	}
	// The next window starts before SetMax, which may hand places to
	// requests waiting for one at once: they are the next window's.
	c.begin(now)
	c.gate.SetMax(c.current())
	c.setWait(w)
	c.record(w, probing)
}

// Wait returns how long Enter lets a request wait for a place in the
// gate: the time in which WaitPlaces places free, on average, with the
// gate full (WaitPlaces times the mean latency of requests served without
// queueing, the baseline's, over the limit), or the time in which the
// last window admitted WaitPlaces requests, if longer (below the
// capacity, places free more slowly than the limit says), at most that
// mean latency, and at most Config.Wait. A gate without a wait refuses a
// request that finds it full for an instant, as it is between one
// request's end and the next one's arrival: at a limit of a few requests,
// the capacity of a small, slow service, that leaves a tenth to a quarter
// of the capacity unused under overload, and refuses a share of the
// bursts of a load well below it. A wait of two places' time gives the
// next place freed to a request that waits, and turns the rest away as
// quickly: under overload, the requests admitted waited two places' time
// at most, a small part of their latency (a tenth at a limit of 20, a
// hundredth at 200; at a limit of 2, up to the mean latency).
//
// Before the first window ends, it is the mean latency of the requests
// reported so far, whatever the limit, and 0 before any: a limit of a few
// requests set before the service was measured, at its capacity, refuses
// a share of the bursts of a load well under it otherwise, and a wait as
// long as a request is served lets one in as the next request inside
// completes (in one run of TestCapacityLightLoadStart, at a limit of 6
// and 0.7 times the capacity, a wait of two places' time refused 14 of
// the first window's requests; this one, 3 in the whole run).
func (c *Controller) Wait() time.Duration {
	if c.maxWait < 0 {
		return 0
	}
	w := time.Duration(c.wait.Load())
	if w == 0 {
		if n := c.n.Load(); n > 0 {
			w = time.Duration(c.sum.Load() / n)
		}
	}
	if c.maxWait > 0 {
		w = min(w, c.maxWait)
	}
	return w
}

// WaitPlaces is how many places, freed one after the other with the gate
// full, Controller.Wait lets a request wait for.
const WaitPlaces = 2

// waitFor returns the wait for a mean latency mean at a limit.
func waitFor(mean time.Duration, limit int) time.Duration {
	return min(mean*WaitPlaces/time.Duration(max(limit, 1)), mean)
}

// setWait sets the wait after the window w. c.mu is held.
func (c *Controller) setWait(w *Window) {
	mean := w.Mean()
	if c.baseline != nil {
		mean = c.baseline.Mean()
	}
	if mean <= 0 {
		return
	}
	wait := waitFor(mean, c.current())
	if d := w.admitting(); d > 0 && w.admitted > 0 {
		// The time in which WaitPlaces requests were admitted, at the
		// window's rate: the rate at which places free with the gate
		// full, and below the capacity, longer than the limit says.
		wait = min(max(wait, d*WaitPlaces/time.Duration(w.admitted)), mean)
	}
	c.wait.Store(int64(wait))
}

// Enter lets a request in through c's gate, waiting at most Wait for a
// place, as Gate.Enter does, and reports whether it did. It is what the
// front ends (httplimit, grpclimit) call with an adaptive gate unless
// told a QueueWait.
func (c *Controller) Enter(ctx context.Context) (limits.Permit, bool) {
	return c.gate.Enter(ctx, c.Wait())
}

// EnterPriority lets a request of class p in through c's gate, waiting at
// most Wait for a place its class may take, as Gate.EnterPriority does.
func (c *Controller) EnterPriority(ctx context.Context, p limits.Priority) (limits.Permit, bool) {
	return c.gate.EnterPriority(ctx, c.Wait(), p)
}

// maxHeld is the most windows a law reads together.
const maxHeld = 8

// startProbe starts measuring the baseline after the window w, in which
// the limit held the load back, by lowering the limit to half w's; or,
// with no baseline yet and w's limit at Min already (nothing lower to
// compare with), by climbing from w. c.mu is held.
func (c *Controller) startProbe(now int64, w *Window) {
	at := c.half(w.Limit)
	if at >= w.Limit {
		if c.baseline == nil {
			c.probes++
			c.probe = probe{on: true, resume: c.limit}
			c.startClimb(w, w)
		} else {
			c.probe.next = now + c.probeEvery
		}
		return
	}
	c.probes++
	c.probe = probe{on: true, at: at, resume: c.limit, last: *w}
	c.want.Store(int64(c.samples))
}

// half returns half the concurrency n, rounded up, at least Min: a
// probe's next step down.
func (c *Controller) half(n int) int { return max(c.min, (n+1)/2) }

// startClimb doubles the limit from the window w, which saw no queueing,
// as base did, the lowest of the windows gathered for the baseline. c.mu
// is held.
func (c *Controller) startClimb(w, base *Window) {
	c.probe.up, c.probe.last = true, *w
	if base != &c.probe.base {
		c.probe.base = *base
		c.probe.base.Baseline = nil
		c.probe.clean = w.Limit
	}
	c.probe.at = min(2*w.Limit, c.max)
	c.want.Store(int64(c.samples))
}

// merge adds w's latencies to b's.
func (b *Window) merge(w *Window) {
	for i, n := range w.hist {
		b.hist[i] += n
	}
	b.Samples += w.Samples
	b.sum += w.sum
	b.Dropped += w.Dropped
	b.Ignored += w.Ignored
}

// endProbe takes the window w, measured at the probe's concurrency. c.mu
// is held.
//
// Going down: if latency was lower there than at twice the concurrency,
// the window before, that one was past the capacity, and the probe
// halves again; otherwise w saw no queueing, and it starts the baseline,
// which the probe gathers at that concurrency until it holds baseSamples
// requests (a window past the capacity, even by one request, would raise
// it; one window of few requests reads it too imprecisely for Vegas, whose
// estimate of the requests queued is the limit times its error). The
// first time, with nothing to show that the limit was not too low, the
// probe climbs from there instead.
//
// Climbing: if latency was higher at twice the concurrency than at the
// step before, w is past the capacity: the windows before it make the
// baseline, and the law sets the limit from w; otherwise the climb
// doubles again.
func (c *Controller) endProbe(now int64, w *Window) {
	last := &c.probe.last
	if c.probe.final {
		c.probe.base.merge(w)
		c.gather(now)
		return
	}
	if c.probe.up {
		// (With the error bound, not the error: a climb stopped below the
		// capacity by chance leaves the limit there until the next
		// probe, one that goes a step too far costs one window.)
		past := queueingBound(w, last) > probeTolerance
		if past || c.probe.at >= c.max {
			if !past {
				c.probe.base.merge(w)
			}
			// The baseline gathers until it holds enough requests (the
			// windows of the climb, of Samples each, read it
			// imprecisely), at the highest concurrency whose windows it
			// took: the step before may have read some queueing, short
			// of sure.
			c.probe.past, c.probe.climbed = *w, true
			c.probe.up, c.probe.final, c.probe.at = false, true, c.probe.clean
			c.gather(now)
			return
		}
		// The baseline takes every window below the one found queueing
		// (keeping only those no slower than the baseline so far would
		// keep the ones that read low by chance, and read it low), up to
		// the first that read some queueing, beyond twice the error but
		// short of the tolerance that tells a step past the capacity
		// surely: the rest of the baseline gathers below it.
		if c.probe.clean == last.Limit && queueing(w, last) <= 0 {
			c.probe.base.merge(w)
			c.probe.clean = w.Limit
		}
		c.startClimb(w, &c.probe.base)
		return
	}
	if queueing(last, w) > probeTolerance && c.probe.at > c.min {
		// Past the capacity, requests queue: a lower concurrency makes
		// them faster.
		c.probe.above = last.Limit
		c.probe.last = *w
		c.probe.at = c.half(c.probe.at)
		c.want.Store(int64(c.samples))
		return
	}
	if c.baseline == nil && c.probe.above == 0 {
		// Nothing queued at the limit either: it may be too low.
		if queueing(last, w) <= probeTolerance/2 {
			w.merge(last)
		}
		c.startClimb(last, w)
		return
	}
	// The baseline gathers from windows of its own: the one that stopped
	// the probe read no faster than the one before, by chance as often
	// as not, and would read it low.
	c.probe.base = Window{}
	if d, e := delay(last, w); c.probe.above > 0 && d <= min(e, probeTolerance/2*float64(w.Mean())) {
		// The step before, at twice the concurrency and below one found
		// past the capacity, was no slower, within one standard error
		// (not the two that tell a step past the capacity): the baseline
		// gathers there, at twice the throughput. (Without a concurrency
		// found past the capacity, the step before may be the limit the
		// law keeps a request or two past the capacity, whose queueing a
		// window of few requests hides.)
		c.probe.at = last.Limit
	}
	c.probe.base.Baseline = nil
	c.probe.final = true
	c.gather(now)
}

// baseSamples returns the requests a baseline measured at concurrency at
// needs: Samples for each request at once, at most 16*Samples. A law
// reads the requests queued at the limit, about twice at, as the limit
// times the baseline's relative error, which falls as the square root of
// its requests: at a low concurrency, fewer read them as surely, and cost
// less, the probe holding the throughput at half; at a high one, more
// take no longer. (A baseline's error is in every window until the next
// probe: 200 requests of exponential service read it to about 5%, which
// holds the limit a few percent off the capacity until then; 800, to
// about 2.5%.)
func (c *Controller) baseSamples(at int) int {
	return c.samples * min(16, max(at, 1))
}

// gather ends the probe with the baseline it gathered, once it has
// baseSamples requests, or stays at its concurrency for more; after a
// climb, the law then sets the limit from the window past the capacity.
// c.mu is held.
func (c *Controller) gather(now int64) {
	if have, need := c.probe.base.Samples, c.baseSamples(c.probe.at); have < need {
		c.want.Store(int64(max(c.samples, need-have)))
		return
	}
	b := c.probe.base
	if old := c.baseline; c.probe.rebase && old != nil && c.probe.at > c.min && queueingBound(&b, old) > probeTolerance {
		// Measured again for reading too low, the baseline reads higher
		// than the one before beyond both their errors, which a baseline
		// read low by chance does not: requests queued at half the limit,
		// as they do once the capacity falls below it, and the baseline
		// gathers again at half that, below a concurrency found past the
		// capacity.
		c.probe.above = c.probe.at
		c.probe.at = c.half(c.probe.at)
		c.probe.base = Window{}
		c.want.Store(int64(c.samples))
		return
	}
	if !c.probe.climbed {
		c.finishProbe(now, &b)
		return
	}
	past, below := c.probe.past, float64(c.probe.at)
	c.finishProbe(now, &b)
	// The law decides from the window past the capacity, read against
	// the new baseline, between the concurrency before and its.
	past.Baseline, past.Knee, past.Rises = c.baseline, past.Limit, 0
	next := c.law.Next(float64(past.Limit), &past)
	if math.IsNaN(next) {
		next = below
	}
	c.limit = min(max(next, below, float64(c.min)), float64(past.Limit), float64(c.max))
	c.knee = past.Limit
}

// finishProbe takes b as the baseline, merged with the one before if
// they agree, and restores the limit. c.mu is held.
func (c *Controller) finishProbe(now int64, b *Window) {
	if old := c.baseline; old != nil && !c.probe.rebase && queueing(b, old) <= probeTolerance && queueing(old, b) <= probeTolerance {
		// Both measured requests served without queueing, and together
		// measure them more precisely. The older weighs half.
		for i, n := range old.hist {
			b.hist[i] += n / 2
		}
		b.Samples += old.Samples / 2
		b.sum += old.sum / 2
	}
	c.baseline = b
	c.limit = c.probe.resume
	if c.probe.above > 0 {
		// The probes found queueing at that concurrency: no need to come
		// back higher.
		c.limit = min(c.limit, float64(c.probe.above))
		c.knee = c.probe.above
	}
	c.probe = probe{next: now + c.probeEvery}
	c.want.Store(int64(c.samples))
}

// probeTolerance is the queueing, as a fraction of the mean latency
// without it, that tells one probe's latency from another's, beyond
// twice the windows' sampling error.
const probeTolerance = 0.05

// queueing returns how much slower hi's requests were than lo's (delay),
// beyond twice the sampling error, as a fraction of lo's mean latency.
func queueing(hi, lo *Window) float64 { return queueingBy(delay, hi, lo) }

// queueingBound is queueing with delayBound's error, which does not
// understate it.
func queueingBound(hi, lo *Window) float64 { return queueingBy(delayBound, hi, lo) }

// queueingBy is queueing with the delay and error of f.
func queueingBy(f func(hi, lo *Window) (d, err float64), hi, lo *Window) float64 {
	mean := float64(lo.Mean())
	if mean <= 0 || hi.Samples == 0 {
		return 0
	}
	d, err := f(hi, lo)
	return (d - 2*err) / mean
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
