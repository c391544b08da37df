package main

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limitsgo/limits/bench"
	"github.com/limitsgo/limits/internal/report"
)

// baseline is the structure every ratio compares with.
const baseline = "MutexMap"

// Middlewares the HTTP table compares with: every overhead is a time minus
// httpBaseline's, and every ratio is to httpPeer's overhead.
const (
	httpBaseline = "Bare"
	httpPeer     = "HttprateLimitByIP"
)

// machine describes where the benchmarks ran.
type machine struct {
	CPU       string // model name
	Cores     int    // logical CPUs
	OSArch    string // such as linux/amd64
	GoVersion string
	Date      string
	LoadStart string // /proc/loadavg before the run, if known
	LoadEnd   string // and after it
}

// settings are the options the benchmarks ran with.
type settings struct {
	Rounds        int
	Benchtime     string
	HTTPBenchtime string // of BenchmarkHTTP, "" if it was not run
	CPU           string
	LatencyCPU    string  // -cpu of BenchmarkLatency1M, "" if it was not run
	Seconds       float64 // the whole run, 0 if unknown
}

// benchReport holds everything BENCHMARKS.md and the charts show.
type benchReport struct {
	structures  []bench.Structure
	middlewares []bench.Middleware
	res         *results
	heap        map[string]uint64
	machine     machine
	settings    settings
}

// procs returns the GOMAXPROCS values measured in BenchmarkKeys1M, in
// increasing order.
func (r *benchReport) procs() []int { return procsOf(r.res.cells) }

// procsOf returns the GOMAXPROCS values of cells, in increasing order.
func procsOf(cells map[cell]*samples) []int {
	var ps []int
	for c := range cells {
		if !slices.Contains(ps, c.procs) {
			ps = append(ps, c.procs)
		}
	}
	slices.Sort(ps)
	return ps
}

// preferredProcs returns 2 if ps, in increasing order, holds it or is
// empty, and else the largest of ps: the GOMAXPROCS a table shows.
func preferredProcs(ps []int) int {
	if slices.Contains(ps, 2) || len(ps) == 0 {
		return 2
	}
	return ps[len(ps)-1]
}

// headlineProcs is the GOMAXPROCS of the headline table and chart: 2 if
// measured, else the largest measured.
func (r *benchReport) headlineProcs() int { return preferredProcs(r.procs()) }

// medianOf returns the median of one measurement of a cell, or NaN if it
// was not measured.
func medianOf(cells map[cell]*samples, c cell, of func(*samples) []float64) float64 {
	s := cells[c]
	if s == nil || len(of(s)) == 0 {
		return math.NaN()
	}
	return median(of(s))
}

func nsOf(s *samples) []float64     { return s.ns }
func allocsOf(s *samples) []float64 { return s.allocs }
func bytesOf(s *samples) []float64  { return s.bytes }

// ns returns the median ns/op of a structure, or NaN if it was not measured.
func (r *benchReport) ns(name, mode string, procs int) float64 {
	return medianOf(r.res.cells, cell{name, mode, procs}, nsOf)
}

// allocs returns the median allocs/op of a structure, or NaN.
func (r *benchReport) allocs(name, mode string, procs int) float64 {
	return medianOf(r.res.cells, cell{name, mode, procs}, allocsOf)
}

// httpNs returns the median ns/op of a middleware, or NaN.
func (r *benchReport) httpNs(name, mode string, procs int) float64 {
	return medianOf(r.res.http, cell{name, mode, procs}, nsOf)
}

// httpAllocs returns the median allocs/op of a middleware, or NaN.
func (r *benchReport) httpAllocs(name, mode string, procs int) float64 {
	return medianOf(r.res.http, cell{name, mode, procs}, allocsOf)
}

// httpBytes returns the median B/op of a middleware, or NaN.
func (r *benchReport) httpBytes(name, mode string, procs int) float64 {
	return medianOf(r.res.http, cell{name, mode, procs}, bytesOf)
}

// overhead returns a middleware's median ns/op minus the bare handler's,
// in the same mode at the same GOMAXPROCS, or NaN.
func (r *benchReport) overhead(name, mode string, procs int) float64 {
	return r.httpNs(name, mode, procs) - r.httpNs(httpBaseline, mode, procs)
}

// httpProcs is the GOMAXPROCS of the HTTP table and chart: 2 if measured,
// else the largest measured.
func (r *benchReport) httpProcs() int { return preferredProcs(procsOf(r.res.http)) }

// heapOf returns the heap a structure holds for NumKeys keys, or NaN.
func (r *benchReport) heapOf(name string) float64 {
	h, ok := r.heap[name]
	if !ok {
		return math.NaN()
	}
	return float64(h)
}

// label returns the structure's label, in code style, and bold for the
// types of package limits.
func label(s bench.Structure) string { return styled(s.Label, s.Kind) }

// mwLabel returns the middleware's label, styled as label does.
func mwLabel(m bench.Middleware) string { return styled(m.Label, m.Kind) }

// styled returns l in code style, and bold for kind Ours.
func styled(l string, kind bench.Kind) string {
	l = "`" + l + "`"
	if kind == bench.Ours {
		l = "**" + l + "**"
	}
	return l
}

// headlineTable returns the Markdown table of time, allocations and heap
// per structure at GOMAXPROCS procs.
func (r *benchReport) headlineTable(procs int) string {
	t := report.NewTable(report.Text("structure"), report.Num("ns/op"), report.Num("vs. mutex map"),
		report.Num("parallel ns/op"), report.Num("vs. mutex map"), report.Num("allocs/op"),
		report.Num("heap, 1M keys"), report.Num("vs. mutex map"))
	bs, bp, bh := r.ns(baseline, serial, procs), r.ns(baseline, parallel, procs), r.heapOf(baseline)
	for _, s := range r.structures {
		ns, np, h := r.ns(s.Name, serial, procs), r.ns(s.Name, parallel, procs), r.heapOf(s.Name)
		t.Row(label(s), report.Ns(ns), report.Ratio(ns, bs), report.Ns(np), report.Ratio(np, bp),
			whole(r.allocs(s.Name, serial, procs)), report.Bytes(h), report.Ratio(h, bh))
	}
	return t.String()
}

// fullTable returns the Markdown table of every measured cell, with the
// spread of the runs.
func (r *benchReport) fullTable() string {
	t := report.NewTable(report.Text("structure"), report.Num("GOMAXPROCS"), report.Text("mode"),
		report.Num("ns/op (median)"), report.Num("min–max"), report.Num("runs"), report.Num("vs. mutex map"),
		report.Num("allocs/op"))
	for _, s := range r.structures {
		for _, p := range r.procs() {
			for _, mode := range []string{serial, parallel} {
				c := r.res.cells[cell{s.Name, mode, p}]
				if c == nil || len(c.ns) == 0 {
					continue
				}
				m := r.ns(s.Name, mode, p)
				t.Row(label(s), strconv.Itoa(p), mode, report.Ns(m), spread(c.ns),
					strconv.Itoa(len(c.ns)), report.Ratio(m, r.ns(baseline, mode, p)), whole(r.allocs(s.Name, mode, p)))
			}
		}
	}
	return t.String()
}

// httpTable returns the Markdown table of the middlewares at GOMAXPROCS
// procs: time per request, overhead over the bare handler and its ratio to
// httprate's, serially and from 8 goroutines, and allocations.
func (r *benchReport) httpTable(procs int) string {
	t := report.NewTable(report.Text("middleware"), report.Num("ns/op"), report.Num("overhead"), report.Num("vs. httprate"),
		report.Num("parallel ns/op"), report.Num("overhead"), report.Num("vs. httprate"), report.Num("allocs/op"), report.Num("B/op"))
	peerS, peerP := r.overhead(httpPeer, serial, procs), r.overhead(httpPeer, parallel, procs)
	for _, m := range r.middlewares {
		os, op := r.overhead(m.Name, serial, procs), r.overhead(m.Name, parallel, procs)
		cols := []string{report.Ns(os), report.Ratio(os, peerS), report.Ns(op), report.Ratio(op, peerP)}
		if m.Name == httpBaseline {
			cols = []string{"–", "–", "–", "–"}
		}
		t.Row(mwLabel(m), report.Ns(r.httpNs(m.Name, serial, procs)), cols[0], cols[1],
			report.Ns(r.httpNs(m.Name, parallel, procs)), cols[2], cols[3],
			whole(r.httpAllocs(m.Name, serial, procs)), whole(r.httpBytes(m.Name, serial, procs)))
	}
	return t.String()
}

// httpFullTable returns the Markdown table of every measured middleware
// cell, with the spread of the runs.
func (r *benchReport) httpFullTable() string {
	t := report.NewTable(report.Text("middleware"), report.Num("GOMAXPROCS"), report.Text("mode"),
		report.Num("ns/op (median)"), report.Num("min–max"), report.Num("runs"), report.Num("overhead"),
		report.Num("vs. httprate"), report.Num("allocs/op"), report.Num("B/op"))
	for _, m := range r.middlewares {
		for _, p := range procsOf(r.res.http) {
			for _, mode := range []string{serial, parallel} {
				c := r.res.http[cell{m.Name, mode, p}]
				if c == nil || len(c.ns) == 0 {
					continue
				}
				o := r.overhead(m.Name, mode, p)
				ov, ratio := report.Ns(o), report.Ratio(o, r.overhead(httpPeer, mode, p))
				if m.Name == httpBaseline {
					ov, ratio = "–", "–"
				}
				t.Row(mwLabel(m), strconv.Itoa(p), mode, report.Ns(r.httpNs(m.Name, mode, p)), spread(c.ns),
					strconv.Itoa(len(c.ns)), ov, ratio, whole(r.httpAllocs(m.Name, mode, p)), whole(r.httpBytes(m.Name, mode, p)))
			}
		}
	}
	return t.String()
}

// httpNotes returns observations on the HTTP results at GOMAXPROCS procs,
// each with its figures, skipping any whose figures are missing.
func (r *benchReport) httpNotes(procs int) []string {
	var out []string
	ok := func(xs ...float64) bool {
		for _, x := range xs {
			if math.IsNaN(x) {
				return false
			}
		}
		return true
	}
	rs, rp := r.overhead("HttplimitRate", serial, procs), r.overhead("HttplimitRate", parallel, procs)
	hs, hp := r.overhead(httpPeer, serial, procs), r.overhead(httpPeer, parallel, procs)
	ra, ha := r.httpAllocs("HttplimitRate", serial, procs), r.httpAllocs(httpPeer, serial, procs)
	if ok(rs, rp, hs, hp, ra, ha) {
		out = append(out, fmt.Sprintf("With a rate per client address, httplimit adds %s ns per request from one goroutine "+
			"and %s ns from 8, where httprate's `LimitByIP` adds %s and %s ns: %s and %s times its overhead, "+
			"with %s allocations per request against %s.",
			report.Ns(rs), report.Ns(rp), report.Ns(hs), report.Ns(hp), report.Ratio(rs, hs), report.Ratio(rp, hp), whole(ra), whole(ha)))
	}
	gs, gp := r.overhead("HttplimitGateRate", serial, procs), r.overhead("HttplimitGateRate", parallel, procs)
	ga, gb, rb := r.httpAllocs("HttplimitGateRate", serial, procs), r.httpBytes("HttplimitGateRate", serial, procs), r.httpBytes("HttplimitRate", serial, procs)
	if ok(rs, rp, gs, gp, ra, ga, gb, rb) {
		out = append(out, fmt.Sprintf("The gate adds %s ns per request from one goroutine and %s ns from 8, and %s allocations "+
			"(%s bytes) to a rate's.",
			report.Ns(gs-rs), report.Ns(gp-rp), whole(ga-ra), whole(gb-rb)))
	}
	return out
}

// markdown returns BENCHMARKS.md.
func (r *benchReport) markdown() []byte {
	p := r.headlineProcs()
	var b bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Benchmarks\n\n")
	hasHTTP := len(r.res.http) > 0
	w("Package limits against plain Go maps and other Go rate limiters")
	if hasHTTP {
		w(", and the middleware of package httplimit against go-chi/httprate")
	}
	w(", measured in one run on %s. ", r.machine.Date)
	w("This file and the charts are written by `go run ./cmd/report` in `bench/`; do not edit them by hand.\n\n")
	w("**Machine:** %s, %d logical CPUs, %s, %s.", r.machine.CPU, r.machine.Cores, r.machine.OSArch, r.machine.GoVersion)
	if r.machine.LoadStart != "" {
		w(" Load average (1, 5, 15 min) %s before the run and %s after it. ", r.machine.LoadStart, r.machine.LoadEnd)
		w("Other work on the machine moves the absolute times; the ratios, measured side by side, move less.")
	}
	w("\n\n")
	w("**Workload:** %s distinct keys like `client-000123` in a fixed random order, each structure filled with all of them before timing; ", report.Group(int64(bench.NumKeys)))
	w("\"ns/op\" is one goroutine calling, \"parallel\" exactly 8 goroutines (`b.RunParallel`). ")
	w("Times are medians of %s (`-benchtime %s`%s, each in its own round of the whole suite), ",
		plural(r.settings.Rounds, "run"), r.settings.Benchtime, benchtimeNote(r.settings.Benchtime))
	w("heap is the live heap a structure holds after a garbage collection, measured in a process of its own. ")
	w("Ratios are to `sync.Mutex + map`, measured in the same run: below 1 is faster or smaller.\n\n")

	w("## Time and memory at GOMAXPROCS=%d\n\n", p)
	w("![Time per call](charts/ns-per-op.svg)\n\n")
	w("%s\n", r.headlineTable(p))
	w("![Heap for 1,000,000 keys](charts/heap.svg)\n\n")

	w("## What the numbers say\n\n")
	for _, n := range r.notes(p) {
		w("- %s\n", n)
	}
	w("\n")

	if len(r.res.churn) > 0 {
		r.churnSection(w)
	}
	if len(r.res.latency) > 0 {
		r.latencySection(w)
	}
	r.goalsSection(w)
	if hasHTTP {
		r.httpSection(w)
	}

	w("## Configurations\n\n")
	w("Each call records one event for one key. Unless stated, the limit is one no key reaches during a run, ")
	w("so that every call does the work of an allowed request.\n\n")
	for _, s := range r.structures {
		w("- %s (`%s`, %s): %s\n", label(s), s.Name, s.Kind, s.Config)
	}
	w("\n")

	w("## All results\n\n")
	w("%s\n", r.fullTable())
	if len(r.res.churn) > 0 {
		w("### Churning keys\n\n")
		w("%s\n", r.churnFullTable())
	}
	if len(r.res.latency) > 0 {
		w("### Latency of one call\n\n")
		w("Times in ns; \"max (median)\" is the median of the runs' maxima, \"max (highest)\" the highest of them.\n\n")
		w("%s\n", r.latencyFullTable())
	}
	if hasHTTP {
		w("### HTTP middleware\n\n")
		w("%s\n", r.httpFullTable())
	}

	r.howToRun(w)
	return b.Bytes()
}

// howToRun writes the section on how the run was made, naming the
// benchmarks the results hold, with w.
func (r *benchReport) howToRun(w func(string, ...any)) {
	w("## How to run\n\n")
	w("```\ncd bench\ngo run ./cmd/report\n```\n\n")
	var runs []string
	run := func(name, benchtime, cpu string) {
		runs = append(runs, fmt.Sprintf("`Benchmark%s` (`-benchtime %s -cpu %s`)", name, benchtime, cpu))
	}
	run(keysBench, r.settings.Benchtime, r.settings.CPU)
	if len(r.res.churn) > 0 {
		run(churnBench, r.settings.Benchtime, r.settings.CPU)
	}
	if len(r.res.latency) > 0 {
		cpu := r.settings.LatencyCPU
		if cpu == "" {
			cpu = r.settings.CPU
		}
		run(latencyBench, r.settings.Benchtime, cpu)
	}
	if len(r.res.http) > 0 && r.settings.HTTPBenchtime != "" {
		run(httpBench, r.settings.HTTPBenchtime, r.settings.CPU)
	}
	if len(runs) > 1 {
		var then []string
		for _, run := range runs[1:] {
			then = append(then, "one running "+run)
		}
		w("It builds the benchmark binary once and runs %s, each round a process running %s, then %s; ",
			plural(r.settings.Rounds, "round"), runs[0], list(then))
	} else {
		w("It builds the benchmark binary once and runs `BenchmarkKeys1M` %d times (`-benchtime %s -cpu %s`), ", r.settings.Rounds, r.settings.Benchtime, r.settings.CPU)
	}
	w("then `cmd/memory` once per structure, and writes this file, `charts/`, and the raw output in `results/`")
	if r.settings.Seconds > 0 {
		w(" (%.0f s in all for this run)", r.settings.Seconds)
	}
	w(". Flags `-rounds`, `-benchtime`, `-httpbenchtime`, `-cpu` and `-latencycpu` change the settings, and `-from results` renders saved results again. ")
	w("To compare two versions with benchstat, run `go test -run '^$' -bench Keys1M -cpu 1,2 -count 10` ")
	w("(or `-bench Churn1M`, `-bench Latency1M`, `-bench HTTP`) in `bench/` on each.\n")
}

// list joins items with commas and a final "and".
func list(items []string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// httpSection writes the section on the middlewares with w.
func (r *benchReport) httpSection(w func(string, ...any)) {
	p := r.httpProcs()
	w("## HTTP middleware at GOMAXPROCS=%d\n\n", p)
	w("Each middleware wraps the same handler, which writes `ok` and allocates nothing. Requests come from %s client "+
		"addresses in turn (`RemoteAddr` 10.1.0.0 to 10.1.3.255), so every middleware keeps one bucket per address; "+
		"they are built once and served in-process, with no network and no HTTP parsing, to a `ResponseWriter` "+
		"that keeps only its header map, cleared and reused. Each middleware serves one request from every address "+
		"before timing. Its limit, %s requests %s per address, is never reached: a run fails if any request is refused. ",
		report.Group(int64(bench.NumClients)), report.Group(int64(bench.HTTPEvents)), per(bench.HTTPPeriod))
	w("\"ns/op\" is one goroutine serving, \"parallel\" exactly 8 goroutines; times are medians of %s (`-benchtime %s`). ",
		plural(r.settings.Rounds, "run"), r.settings.HTTPBenchtime)
	w("The overhead is a middleware's time minus the bare handler's, in the same mode; \"vs. httprate\" is the ratio of " +
		"overheads to that of httprate's `LimitByIP`: below 1 is cheaper. Allocations are per request, serially; the " +
		"bare handler makes none, so they are the middleware's.\n\n")
	w("![Overhead per request](charts/http.svg)\n\n")
	w("%s\n", r.httpTable(p))
	for _, n := range r.httpNotes(p) {
		w("- %s\n", n)
	}
	w("\n")
	w("The middlewares:\n\n")
	for _, m := range r.middlewares {
		w("- %s (`%s`, %s): %s\n", mwLabel(m), m.Name, m.Kind, m.Config)
	}
	w("\n")
}

// notes returns observations on the results at GOMAXPROCS procs, each
// with its figures, skipping any whose figures are missing.
func (r *benchReport) notes(procs int) []string {
	var out []string
	ns := func(name string) float64 { return r.ns(name, serial, procs) }
	ok := func(xs ...float64) bool {
		for _, x := range xs {
			if math.IsNaN(x) {
				return false
			}
		}
		return true
	}

	est, rate, in := ns("Estimator"), ns("Rate"), ns("Inflight")
	eh, rh, ih := r.heapOf("Estimator"), r.heapOf("Rate"), r.heapOf("Inflight")
	if ok(est, rate, in, eh, rh, ih) {
		out = append(out, fmt.Sprintf("The sketches do not grow with the keys: `Estimator`, `Rate` and `Inflight` take %s, %s and %s ns "+
			"per call and hold %s, %s and %s whatever the number of keys, because their counters stay in cache. "+
			"They estimate (never under-count) where the maps count exactly.",
			report.Ns(est), report.Ns(rate), report.Ns(in), report.Bytes(eh), report.Bytes(rh), report.Bytes(ih)))
	}

	m, mc := ns(baseline), ns("MutexMapClock")
	if ok(m, mc) {
		out = append(out, fmt.Sprintf("With 1,000,000 keys, every structure with an entry per key misses the cache on each call. "+
			"The plain maps' loops can overlap one call's miss with the next; a limiter reads the clock on each call, and "+
			"on this machine the clock read stops that overlap: the mutex map takes %s ns per call, and %s ns when each call "+
			"also reads `time.Now()`. Compare the exact limiters with the second figure; in a server, where other work runs "+
			"between two calls, the first is out of reach too.", report.Ns(m), report.Ns(mc)))
	}

	g, gr := ns("GCRA"), ns("GCRARefused")
	if ok(g, gr) {
		out = append(out, fmt.Sprintf("`limits.GCRA` takes %s ns per allowed call and %s ns per refused one, "+
			"its exact `RetryAfter` included.", report.Ns(g), report.Ns(gr)))
	}
	gh, mh := r.heapOf("GCRA"), r.heapOf(baseline)
	if ok(gh, mh) {
		out = append(out, fmt.Sprintf("`limits.GCRA` keeps a 64-bit hash and a time per key, not the key, so its table "+
			"for 1,000,000 keys holds %s, %s times the mutex map's, which keeps copies of the keys.",
			report.Bytes(gh), report.Ratio(gh, mh)))
	}

	var allocating []string
	for _, s := range r.structures {
		if a := r.allocs(s.Name, serial, procs); ok(a) && a > 0 {
			allocating = append(allocating, fmt.Sprintf("%s (%s)", label(s), whole(a)))
		}
	}
	if len(allocating) > 0 {
		out = append(out, "Allocations per call: "+strings.Join(allocating, ", ")+"; every other structure allocates nothing per call once filled.")
	}
	return out
}

// benchtimeNote explains a -benchtime given as a count of calls.
func benchtimeNote(benchtime string) string {
	n, err := strconv.Atoi(strings.TrimSuffix(benchtime, "x"))
	if !strings.HasSuffix(benchtime, "x") || err != nil {
		return ""
	}
	if n == bench.NumKeys {
		return ": one call per key"
	}
	return fmt.Sprintf(": %s calls", report.Group(int64(n)))
}

// per returns "a second", "a minute" or "an hour" for those periods, and
// "per" and d for any other.
func per(d time.Duration) string {
	switch d {
	case time.Second:
		return "a second"
	case time.Minute:
		return "a minute"
	case time.Hour:
		return "an hour"
	}
	return "per " + d.String()
}

// plural returns n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// whole formats a figure per call that is a whole number, such as
// allocations or bytes.
func whole(v float64) string { return report.Float(v, 0) }

// spread formats the range of the times of a cell's runs, lowest–highest.
func spread(ns []float64) string {
	return report.Ns(slices.Min(ns)) + "–" + report.Ns(slices.Max(ns))
}

// Bar colours: one goroutine, and 8.
var (
	serialKey   = report.Key{Name: "1 goroutine", Color: "#4e79a7"}
	parallelKey = report.Key{Name: "8 goroutines", Color: "#f28e2b"}
)

// barRow returns the chart row of a structure or middleware: labelled l,
// in bold for those of package limits, and grouped by kind.
func barRow(l string, kind bench.Kind, values ...float64) report.BarRow {
	return report.BarRow{Label: l, Bold: kind == bench.Ours, Group: int(kind), Values: values}
}

// nsChart returns a chart of times per call, from one goroutine and from
// 8, one row each.
func nsChart(title, subtitle string, rows []report.BarRow) []byte {
	c := report.BarChart{
		Chart:  report.Chart{Title: title, Subtitle: subtitle, Legend: []report.Key{serialKey, parallelKey}},
		Rows:   rows,
		Value:  report.Axis{Tick: func(v float64) string { return report.Float(v, 0) + " ns" }},
		Format: report.Ns,
	}
	return c.SVG()
}

// keysChart returns the chart of time per call at GOMAXPROCS procs.
func (r *benchReport) keysChart(procs int) []byte {
	var rows []report.BarRow
	for _, s := range r.structures {
		rows = append(rows, barRow(s.Label, s.Kind, r.ns(s.Name, serial, procs), r.ns(s.Name, parallel, procs)))
	}
	return nsChart(fmt.Sprintf("Time per call, %s keys, GOMAXPROCS=%d (shorter is faster)", report.Group(int64(bench.NumKeys)), procs),
		fmt.Sprintf("median ns/op; %s; %s", r.machine.CPU, r.machine.Date), rows)
}

// httpChart returns the chart of the middlewares' overhead per request at
// GOMAXPROCS procs.
func (r *benchReport) httpChart(procs int) []byte {
	var rows []report.BarRow
	for _, m := range r.middlewares {
		if m.Name != httpBaseline {
			rows = append(rows, barRow(m.Label, m.Kind, r.overhead(m.Name, serial, procs), r.overhead(m.Name, parallel, procs)))
		}
	}
	return nsChart(fmt.Sprintf("Overhead per request over the bare handler, GOMAXPROCS=%d (shorter is cheaper)", procs),
		fmt.Sprintf("median ns/op minus the bare handler's; %s clients; %s; %s", report.Group(int64(bench.NumClients)), r.machine.CPU, r.machine.Date),
		rows)
}

// heapChart returns the chart of heap held for NumKeys keys.
func (r *benchReport) heapChart() []byte {
	c := report.BarChart{
		Chart: report.Chart{
			Title:    fmt.Sprintf("Heap held for %s keys (shorter is smaller)", report.Group(int64(bench.NumKeys))),
			Subtitle: fmt.Sprintf("live heap after GC, each structure in its own process; %s", r.machine.Date),
			Legend:   []report.Key{{Name: "heap", Color: serialKey.Color}},
		},
		Value:  report.Axis{Unit: 1 << 20, Tick: func(v float64) string { return report.Float(v/(1<<20), 0) + " MiB" }},
		Format: report.Bytes,
	}
	for _, s := range r.structures {
		c.Rows = append(c.Rows, barRow(s.Label, s.Kind, r.heapOf(s.Name)))
	}
	return c.SVG()
}
