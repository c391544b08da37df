package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/limitsgo/limits/bench"
	"github.com/limitsgo/limits/internal/report"
)

// This file renders what BenchmarkChurn1M and BenchmarkLatency1M measure,
// and the GCRA's figures against its goals.

// gcra is the structure the goals are set for.
const gcra = "GCRA"

// Goals of the GCRA: its time as a ratio to the fastest peer's, and to the
// mutex map's, live and churning, at most; its heap per live key at most;
// its allocations per call.
const (
	goalPeerRatio   = 0.6
	goalMutexRatio  = 1.0
	goalBytesPerKey = 24
	goalAllocs      = 0
)

// churnProcs is the GOMAXPROCS of the churn table and chart: 2 if
// measured, else the largest measured.
func (r *benchReport) churnProcs() int { return preferredProcs(procsOf(r.res.churn)) }

// churnNs returns the median ns/op of a structure with churning keys, or
// NaN if it was not measured.
func (r *benchReport) churnNs(name, mode string, procs int) float64 {
	return medianOf(r.res.churn, cell{name, mode, procs}, nsOf)
}

// churnAllocs returns the median allocs/op of a structure with churning
// keys, or NaN.
func (r *benchReport) churnAllocs(name, mode string, procs int) float64 {
	return medianOf(r.res.churn, cell{name, mode, procs}, allocsOf)
}

// measuredIn returns the structures, in their order, that have a result
// for which has returns true.
func (r *benchReport) measuredIn(has func(name string) bool) []bench.Structure {
	var out []bench.Structure
	for _, s := range r.structures {
		if has(s.Name) {
			out = append(out, s)
		}
	}
	return out
}

// churned returns the structures measured by BenchmarkChurn1M.
func (r *benchReport) churned() []bench.Structure {
	return r.measuredIn(func(name string) bool {
		for c := range r.res.churn {
			if c.structure == name {
				return true
			}
		}
		return false
	})
}

// churnTable returns the Markdown table of the structures with churning
// keys at GOMAXPROCS procs: time from one goroutine and from 8, each with
// its ratio to the mutex map's in the same run, and allocations.
func (r *benchReport) churnTable(procs int) string {
	t := report.NewTable(report.Text("structure"), report.Num("ns/op"), report.Num("vs. mutex map"),
		report.Num("parallel ns/op"), report.Num("vs. mutex map"), report.Num("allocs/op"))
	bs, bp := r.churnNs(baseline, serial, procs), r.churnNs(baseline, parallel, procs)
	for _, s := range r.churned() {
		ns, np := r.churnNs(s.Name, serial, procs), r.churnNs(s.Name, parallel, procs)
		t.Row(label(s), report.Ns(ns), report.Ratio(ns, bs), report.Ns(np), report.Ratio(np, bp),
			whole(r.churnAllocs(s.Name, serial, procs)))
	}
	return t.String()
}

// churnFullTable returns the Markdown table of every cell measured with
// churning keys, with the spread of the runs.
func (r *benchReport) churnFullTable() string {
	t := report.NewTable(report.Text("structure"), report.Num("GOMAXPROCS"), report.Text("mode"),
		report.Num("ns/op (median)"), report.Num("min–max"), report.Num("runs"), report.Num("vs. mutex map"),
		report.Num("allocs/op"))
	for _, s := range r.churned() {
		for _, p := range procsOf(r.res.churn) {
			for _, mode := range []string{serial, parallel} {
				c := r.res.churn[cell{s.Name, mode, p}]
				if c == nil || len(c.ns) == 0 {
					continue
				}
				m := r.churnNs(s.Name, mode, p)
				t.Row(label(s), strconv.Itoa(p), mode, report.Ns(m), spread(c.ns),
					strconv.Itoa(len(c.ns)), report.Ratio(m, r.churnNs(baseline, mode, p)), whole(r.churnAllocs(s.Name, mode, p)))
			}
		}
	}
	return t.String()
}

// churnConfig returns what a structure measured with churning keys is
// configured with.
func churnConfig(s bench.Structure) string {
	if s.Name == baseline {
		return "its configuration above: a map keeps every key, so nothing expires. The reference for the ratios."
	}
	if s.ChurnConfig == "" {
		return "as above, with a period of a millisecond."
	}
	return s.ChurnConfig
}

// churnSection writes the section on churning keys with w.
func (r *benchReport) churnSection(w func(string, ...any)) {
	p := r.churnProcs()
	w("## Churning keys at GOMAXPROCS=%d\n\n", p)
	w("The same %s keys, the limiters configured so that a key's state expires a millisecond after each request "+
		"(one event per millisecond, in bursts of one): by the time the benchmark comes back to a key, its state has expired, "+
		"as with a short-period limit over keys that come and go. Each limiter is filled with all the keys first, then "+
		"measured as above. The mutex map, which keeps its entries, runs in the same process and is the reference for the ratios. ",
		report.Group(int64(bench.NumKeys)))
	w("Times are medians of %s (`-benchtime %s`).\n\n", plural(r.settings.Rounds, "run"), r.settings.Benchtime)
	w("![Time per call with churning keys](charts/churn.svg)\n\n")
	w("%s\n", r.churnTable(p))
	w("The churning configurations, otherwise as under Configurations:\n\n")
	for _, s := range r.churned() {
		w("- %s (`%s`): %s\n", label(s), s.Name, churnConfig(s))
	}
	w("\n")
}

// churnChart returns the chart of time per call with churning keys at
// GOMAXPROCS procs.
func (r *benchReport) churnChart(procs int) []byte {
	var rows []report.BarRow
	for _, s := range r.churned() {
		rows = append(rows, barRow(s.Label, s.Kind, r.churnNs(s.Name, serial, procs), r.churnNs(s.Name, parallel, procs)))
	}
	return nsChart(fmt.Sprintf("Time per call, churning keys, %s keys, GOMAXPROCS=%d (shorter is faster)", report.Group(int64(bench.NumKeys)), procs),
		fmt.Sprintf("median ns/op; keys expire 1 ms after each request; %s; %s", r.machine.CPU, r.machine.Date),
		rows)
}

// latency is what the latency tables show of one latencyCell: the
// medians over the runs of the percentiles and of the maximum, and the
// highest maximum, in nanoseconds; NaN where not measured.
type latency struct {
	p50, p99, p999, max, highest float64
}

// latencyOf returns the latency of a structure, live or churning, at
// GOMAXPROCS procs.
func (r *benchReport) latencyOf(name string, churn bool, procs int) latency {
	s := r.res.latency[latencyCell{name, churn, procs}]
	if s == nil {
		s = &latencySamples{}
	}
	of := func(xs []float64) float64 {
		if len(xs) == 0 {
			return math.NaN()
		}
		return median(xs)
	}
	l := latency{p50: of(s.p50), p99: of(s.p99), p999: of(s.p999), max: of(s.max), highest: math.NaN()}
	if len(s.max) > 0 {
		l.highest = slices.Max(s.max)
	}
	return l
}

// latencyProcsAll returns the GOMAXPROCS values measured in
// BenchmarkLatency1M, in increasing order.
func (r *benchReport) latencyProcsAll() []int {
	var ps []int
	for c := range r.res.latency {
		if !slices.Contains(ps, c.procs) {
			ps = append(ps, c.procs)
		}
	}
	slices.Sort(ps)
	return ps
}

// latencyProcs is the GOMAXPROCS of the latency table: 2 if measured,
// else the largest measured.
func (r *benchReport) latencyProcs() int { return preferredProcs(r.latencyProcsAll()) }

// timed returns the structures measured by BenchmarkLatency1M.
func (r *benchReport) timed() []bench.Structure {
	return r.measuredIn(func(name string) bool {
		for c := range r.res.latency {
			if c.structure == name {
				return true
			}
		}
		return false
	})
}

// latencyTable returns the Markdown table of the latency of one call at
// GOMAXPROCS procs, with live keys and with churning ones.
func (r *benchReport) latencyTable(procs int) string {
	t := report.NewTable(report.Text("structure"),
		report.Num("p50"), report.Num("p99"), report.Num("p99.9"), report.Num("max"),
		report.Num("churning p50"), report.Num("p99"), report.Num("p99.9"), report.Num("max"))
	for _, s := range r.timed() {
		l, c := r.latencyOf(s.Name, false, procs), r.latencyOf(s.Name, true, procs)
		t.Row(label(s), report.Ns(l.p50), report.Ns(l.p99), report.Ns(l.p999), report.Ns(l.max),
			report.Ns(c.p50), report.Ns(c.p99), report.Ns(c.p999), report.Ns(c.max))
	}
	return t.String()
}

// latencyFullTable returns the Markdown table of every latency cell, with
// the spread of the runs' 99.9th percentiles and the highest maximum.
func (r *benchReport) latencyFullTable() string {
	t := report.NewTable(report.Text("structure"), report.Num("GOMAXPROCS"), report.Text("keys"),
		report.Num("p50"), report.Num("p99"), report.Num("p99.9"), report.Num("p99.9 min–max"),
		report.Num("max (median)"), report.Num("max (highest)"), report.Num("runs"), report.Num("allocs/op"))
	for _, s := range r.timed() {
		for _, p := range r.latencyProcsAll() {
			for _, churn := range []bool{false, true} {
				c := r.res.latency[latencyCell{s.Name, churn, p}]
				if c == nil || len(c.p999) == 0 {
					continue
				}
				keys := "live"
				if churn {
					keys = "churning"
				}
				l := r.latencyOf(s.Name, churn, p)
				allocs := math.NaN()
				if len(c.allocs) > 0 {
					allocs = median(c.allocs)
				}
				t.Row(label(s), strconv.Itoa(p), keys, report.Ns(l.p50), report.Ns(l.p99), report.Ns(l.p999),
					spread(c.p999), report.Ns(l.max), report.Ns(l.highest), strconv.Itoa(len(c.p999)), whole(allocs))
			}
		}
	}
	return t.String()
}

// latencySection writes the section on the latency of one call with w.
func (r *benchReport) latencySection(w func(string, ...any)) {
	p := r.latencyProcs()
	w("## Latency of one call at GOMAXPROCS=%d\n\n", p)
	w("One goroutine calls each structure over the %s keys, filled first, and times each call on its own, "+
		"with `time.Now()` before it and `time.Since` after it, so every figure includes those two clock reads; "+
		"the mutex map's figures, a map update and the same two reads, are the ones to read the others against. ",
		report.Group(int64(bench.NumKeys)))
	w("The structures are the mutex map, `limits.GCRA` and every peer, with live keys as in the first table and, " +
		"where they have one, with their churning configuration, listed under Churning keys. ")
	w("The percentiles are of the calls of one run%s, and the figures their medians over %s. ",
		callsNote(r.settings.Benchtime), plural(r.settings.Rounds, "run"))
	w("\"max\" is the median of the runs' maxima: a run's slowest call is one call, stalled by whatever came in its way " +
		"(a garbage collection, the scheduler, another process), so the median says what the slowest call of a run " +
		"typically is, where the highest over all runs grows with their number and reports the machine's noisiest moment; " +
		"that highest is under All results. Times in ns.\n\n")
	w("%s\n", r.latencyTable(p))
}

// callsNote says how many calls a run of a benchmark makes, for a
// -benchtime given as a count: " (1,000,000 calls)".
func callsNote(benchtime string) string {
	n, ok := benchCount(benchtime)
	if !ok {
		return ""
	}
	return fmt.Sprintf(" (%s calls)", report.Group(int64(n)))
}

// benchCount returns the count of a -benchtime given as one, such as
// 1000000x.
func benchCount(benchtime string) (int, bool) {
	if len(benchtime) < 2 || benchtime[len(benchtime)-1] != 'x' {
		return 0, false
	}
	n, err := strconv.Atoi(benchtime[:len(benchtime)-1])
	return n, err == nil && n > 0
}

// goal is a row of the goals table.
type goal struct {
	measure string // what is measured
	value   string // the GCRA's figure
	against string // what it is compared with, if anything
	result  string // the figure the goal is about
	target  string // the goal
	met     bool
}

// fastestPeer returns the peer with the lowest median time with live keys
// in mode at GOMAXPROCS procs, and that time.
func (r *benchReport) fastestPeer(mode string, procs int) (bench.Structure, float64, bool) {
	var best bench.Structure
	bestNs, found := math.Inf(1), false
	for _, s := range r.structures {
		if s.Kind != bench.Peer {
			continue
		}
		if ns := r.ns(s.Name, mode, procs); !math.IsNaN(ns) && ns < bestNs {
			best, bestNs, found = s, ns, true
		}
	}
	return best, bestNs, found
}

// goals returns the GCRA's figures against its goals at GOMAXPROCS procs,
// skipping those whose figures are missing.
func (r *benchReport) goals(procs int) []goal {
	var out []goal
	ratioGoal := func(measure string, v float64, against string, base, target float64) {
		if math.IsNaN(v) || math.IsNaN(base) || base == 0 {
			return
		}
		out = append(out, goal{
			measure: measure,
			value:   report.Ns(v) + " ns",
			against: against,
			result:  report.Ratio(v, base) + "x",
			target:  "≤ " + report.Float(target, 1) + "x",
			met:     v/base <= target,
		})
	}
	goroutines := map[string]string{serial: "1 goroutine", parallel: "8 goroutines"}
	modes := []string{serial, parallel}

	for _, mode := range modes {
		if peer, ns, ok := r.fastestPeer(mode, procs); ok {
			ratioGoal("time per call, "+goroutines[mode]+", vs. the fastest peer", r.ns(gcra, mode, procs),
				fmt.Sprintf("%s: %s ns", label(peer), report.Ns(ns)), ns, goalPeerRatio)
		}
	}
	for _, mode := range modes {
		m := r.ns(baseline, mode, procs)
		ratioGoal("time per call, "+goroutines[mode]+", vs. the mutex map, live keys", r.ns(gcra, mode, procs),
			fmt.Sprintf("`sync.Mutex + map`: %s ns", report.Ns(m)), m, goalMutexRatio)
	}
	for _, mode := range modes {
		m := r.churnNs(baseline, mode, procs)
		ratioGoal("time per call, "+goroutines[mode]+", vs. the mutex map, churning keys", r.churnNs(gcra, mode, procs),
			fmt.Sprintf("`sync.Mutex + map`: %s ns", report.Ns(m)), m, goalMutexRatio)
	}

	if h := r.heapOf(gcra); !math.IsNaN(h) {
		perKey := h / bench.NumKeys
		out = append(out, goal{
			measure: "heap per live key",
			value:   report.Bytes(h) + " for " + report.Group(int64(bench.NumKeys)) + " keys",
			against: "–",
			result:  report.Float(perKey, 1) + " B",
			target:  "≤ " + strconv.Itoa(goalBytesPerKey) + " B",
			met:     perKey <= goalBytesPerKey,
		})
	}

	// The most allocations of any median: live and churning, from one
	// goroutine and from 8.
	most := math.Inf(-1)
	var keys, goroutinesOf []string
	for _, k := range []struct {
		name   string
		allocs func(name, mode string, procs int) float64
	}{{"live", r.allocs}, {"churning", r.churnAllocs}} {
		for _, mode := range modes {
			if a := k.allocs(gcra, mode, procs); !math.IsNaN(a) {
				most = max(most, a)
				if !slices.Contains(keys, k.name) {
					keys = append(keys, k.name)
				}
				if g := goroutines[mode]; !slices.Contains(goroutinesOf, g) {
					goroutinesOf = append(goroutinesOf, g)
				}
			}
		}
	}
	if len(keys) > 0 {
		out = append(out, goal{
			measure: "allocations per call, the most with " + list(keys) + " keys from " + list(goroutinesOf),
			value:   whole(most),
			against: "–",
			result:  whole(most),
			target:  strconv.Itoa(goalAllocs),
			met:     most <= goalAllocs,
		})
	}
	return out
}

// goalsTable returns the Markdown table of the GCRA's figures against its
// goals at GOMAXPROCS procs, or "" if none was measured.
func (r *benchReport) goalsTable(procs int) string {
	gs := r.goals(procs)
	if len(gs) == 0 {
		return ""
	}
	t := report.NewTable(report.Text("measure"), report.Num("GCRA"), report.Text("against"),
		report.Num("result"), report.Num("goal"), report.Text("status"))
	for _, g := range gs {
		mark := "not met"
		if g.met {
			mark = "met"
		}
		t.Row(g.measure, g.value, g.against, g.result, g.target, mark)
	}
	return t.String()
}

// goalsSection writes the section on the GCRA's goals with w, if any of
// its figures was measured.
func (r *benchReport) goalsSection(w func(string, ...any)) {
	p := r.headlineProcs()
	t := r.goalsTable(p)
	if t == "" {
		return
	}
	w("## GCRA against its goals\n\n")
	w("`limits.GCRA` against the goals set for it, from the figures of this run at GOMAXPROCS=%d: ", p)
	w("its median time per call as a ratio to that of the fastest peer in the same mode with live keys (the peer named), ")
	w("and to the mutex map's with live keys and with churning ones; the heap it holds for %s keys, measured by `cmd/memory`, "+
		"divided by their number; and the most allocations per call of its medians, live and churning, from 1 goroutine and from 8. ",
		report.Group(int64(bench.NumKeys)))
	w("A goal is met when the figure, before rounding, is at most the goal. Rows whose figures this run lacks are left out.\n\n")
	w("%s\n", t)
}
