package adaptive

import (
	"time"

	"github.com/limitsgo/limits"
)

// Stats is a snapshot of a Controller: its limit, the latency it sees, and
// its recent history, with the counters of its gate. It marshals to JSON
// with the field names in snake case and durations in nanoseconds.
type Stats struct {
	// Limit is the gate's maximum that the Controller last set; Min and
	// Max bound it.
	Limit int `json:"limit"`
	Min   int `json:"min"`
	Max   int `json:"max"`
	// Baseline is the median latency of requests served without queueing,
	// as the last probe measured it; 0 before the first.
	Baseline time.Duration `json:"baseline_ns"`
	// Probing reports whether the limit is lowered now to measure the
	// baseline (not while it climbs to find one, the first time).
	Probing bool `json:"probing"`
	// Windows counts the windows ended, and Probes the baseline
	// measurements begun (a probe may take several windows).
	Windows uint64 `json:"windows"`
	Probes  uint64 `json:"probes"`
	// Samples counts the requests reported as Success in the windows
	// ended, Dropped and Ignored those reported so; Stale counts the
	// requests counted in no window, admitted while none was open.
	Samples uint64 `json:"samples"`
	Dropped uint64 `json:"dropped"`
	Ignored uint64 `json:"ignored"`
	Stale   uint64 `json:"stale"`
	// Last is the last window ended, with its latency percentiles.
	Last WindowStats `json:"last"`
	// History holds the last windows, oldest first (see Config.History).
	History []Step `json:"history"`
	// Gate is a snapshot of the gate's counters.
	Gate limits.GateStats `json:"gate"`
}

// WindowStats summarises a window: its limit, the requests it saw, and the
// latency of those that succeeded.
type WindowStats struct {
	Start       time.Time     `json:"start"`
	End         time.Time     `json:"end"`
	Limit       int           `json:"limit"`
	MaxInFlight int           `json:"max_in_flight"`
	Refused     int           `json:"refused"`
	Samples     int           `json:"samples"`
	Dropped     int           `json:"dropped"`
	Mean        time.Duration `json:"mean_ns"`
	P50         time.Duration `json:"p50_ns"`
	P90         time.Duration `json:"p90_ns"`
	P99         time.Duration `json:"p99_ns"`
}

// Step is a window in a Controller's history: when it ended, the limit set
// after it, and the latency it saw.
type Step struct {
	At time.Time `json:"at"`
	// Limit is the gate's maximum set when the window ended.
	Limit int `json:"limit"`
	// Probe reports whether the window measured the baseline.
	Probe   bool          `json:"probe"`
	Samples int           `json:"samples"`
	Dropped int           `json:"dropped"`
	P50     time.Duration `json:"p50_ns"`
	P99     time.Duration `json:"p99_ns"`
}

// Stats returns a snapshot of c. It allocates the history; call it to
// publish metrics, not on every request.
func (c *Controller) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &c.last
	s := Stats{
		Limit: c.current(), Min: c.min, Max: c.max,
		Probing: c.probe.on && !c.probe.up,
		Windows: c.windows, Probes: c.probes,
		Samples: c.total, Dropped: c.dropped, Ignored: c.ignoredN, Stale: c.stale.Load(),
		Last: WindowStats{
			Start: w.Start, End: w.End, Limit: w.Limit, MaxInFlight: w.MaxInFlight,
			Refused: w.Refused, Samples: w.Samples, Dropped: w.Dropped,
			Mean: w.Mean(), P50: w.Quantile(0.5), P90: w.Quantile(0.9), P99: w.Quantile(0.99),
		},
		History: make([]Step, 0, len(c.history)),
		Gate:    c.gate.Stats(),
	}
	if c.baseline != nil {
		s.Baseline = c.baseline.Quantile(0.5)
	}
	s.History = append(s.History, c.history[c.next:]...)
	s.History = append(s.History, c.history[:c.next]...)
	return s
}
