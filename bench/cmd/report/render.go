package main

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limitsgo/limits/bench"
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
	Seconds       float64 // the whole run, 0 if unknown
}

// report holds everything BENCHMARKS.md and the charts show.
type report struct {
	structures  []bench.Structure
	middlewares []bench.Middleware
	res         *results
	heap        map[string]uint64
	machine     machine
	settings    settings
}

// procs returns the GOMAXPROCS values measured in BenchmarkKeys1M, in
// increasing order.
func (r *report) procs() []int { return procsOf(r.res.cells) }

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

// headlineProcs is the GOMAXPROCS of the headline table and chart: 2 if
// measured, else the largest measured.
func (r *report) headlineProcs() int {
	ps := r.procs()
	if slices.Contains(ps, 2) || len(ps) == 0 {
		return 2
	}
	return ps[len(ps)-1]
}

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
func (r *report) ns(name, mode string, procs int) float64 {
	return medianOf(r.res.cells, cell{name, mode, procs}, nsOf)
}

// allocs returns the median allocs/op of a structure, or NaN.
func (r *report) allocs(name, mode string, procs int) float64 {
	return medianOf(r.res.cells, cell{name, mode, procs}, allocsOf)
}

// httpNs returns the median ns/op of a middleware, or NaN.
func (r *report) httpNs(name, mode string, procs int) float64 {
	return medianOf(r.res.http, cell{name, mode, procs}, nsOf)
}

// httpAllocs returns the median allocs/op of a middleware, or NaN.
func (r *report) httpAllocs(name, mode string, procs int) float64 {
	return medianOf(r.res.http, cell{name, mode, procs}, allocsOf)
}

// httpBytes returns the median B/op of a middleware, or NaN.
func (r *report) httpBytes(name, mode string, procs int) float64 {
	return medianOf(r.res.http, cell{name, mode, procs}, bytesOf)
}

// overhead returns a middleware's median ns/op minus the bare handler's,
// in the same mode at the same GOMAXPROCS, or NaN.
func (r *report) overhead(name, mode string, procs int) float64 {
	return r.httpNs(name, mode, procs) - r.httpNs(httpBaseline, mode, procs)
}

// httpProcs is the GOMAXPROCS of the HTTP table and chart: 2 if measured,
// else the largest measured.
func (r *report) httpProcs() int {
	ps := procsOf(r.res.http)
	if slices.Contains(ps, 2) || len(ps) == 0 {
		return 2
	}
	return ps[len(ps)-1]
}

// heapOf returns the heap a structure holds for NumKeys keys, or NaN.
func (r *report) heapOf(name string) float64 {
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

// fmtNs formats a time per call.
func fmtNs(ns float64) string {
	switch {
	case math.IsNaN(ns):
		return "n/a"
	case ns >= 100:
		return fmt.Sprintf("%.0f", ns)
	default:
		return fmt.Sprintf("%.1f", ns)
	}
}

// fmtRatio formats x relative to base with about two significant digits.
func fmtRatio(x, base float64) string {
	if math.IsNaN(x) || math.IsNaN(base) || base == 0 {
		return "n/a"
	}
	q := x / base
	switch {
	case q >= 10:
		return fmt.Sprintf("%.0f", q)
	case q >= 0.1:
		return fmt.Sprintf("%.2f", q)
	default:
		return fmt.Sprintf("%.2g", q)
	}
}

// fmtAllocs formats allocations per call.
func fmtAllocs(a float64) string {
	if math.IsNaN(a) {
		return "n/a"
	}
	return fmt.Sprintf("%.0f", a)
}

// fmtBytes formats a size in binary units.
func fmtBytes(b float64) string {
	switch {
	case math.IsNaN(b):
		return "n/a"
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", b/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", b/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", b)
	}
}

// headlineTable returns the Markdown table of time, allocations and heap
// per structure at GOMAXPROCS procs.
func (r *report) headlineTable(procs int) string {
	var b strings.Builder
	b.WriteString("| structure | ns/op | vs. mutex map | parallel ns/op | vs. mutex map | allocs/op | heap, 1M keys | vs. mutex map |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	bs, bp, bh := r.ns(baseline, serial, procs), r.ns(baseline, parallel, procs), r.heapOf(baseline)
	for _, s := range r.structures {
		ns, np, h := r.ns(s.Name, serial, procs), r.ns(s.Name, parallel, procs), r.heapOf(s.Name)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n",
			label(s), fmtNs(ns), fmtRatio(ns, bs), fmtNs(np), fmtRatio(np, bp),
			fmtAllocs(r.allocs(s.Name, serial, procs)), fmtBytes(h), fmtRatio(h, bh))
	}
	return b.String()
}

// fullTable returns the Markdown table of every measured cell, with the
// spread of the runs.
func (r *report) fullTable() string {
	var b strings.Builder
	b.WriteString("| structure | GOMAXPROCS | mode | ns/op (median) | min–max | runs | vs. mutex map | allocs/op |\n")
	b.WriteString("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, s := range r.structures {
		for _, p := range r.procs() {
			for _, mode := range []string{serial, parallel} {
				c := r.res.cells[cell{s.Name, mode, p}]
				if c == nil || len(c.ns) == 0 {
					continue
				}
				m := r.ns(s.Name, mode, p)
				fmt.Fprintf(&b, "| %s | %d | %s | %s | %s–%s | %d | %s | %s |\n",
					label(s), p, mode, fmtNs(m), fmtNs(slices.Min(c.ns)), fmtNs(slices.Max(c.ns)),
					len(c.ns), fmtRatio(m, r.ns(baseline, mode, p)), fmtAllocs(r.allocs(s.Name, mode, p)))
			}
		}
	}
	return b.String()
}

// httpTable returns the Markdown table of the middlewares at GOMAXPROCS
// procs: time per request, overhead over the bare handler and its ratio to
// httprate's, serially and from 8 goroutines, and allocations.
func (r *report) httpTable(procs int) string {
	var b strings.Builder
	b.WriteString("| middleware | ns/op | overhead | vs. httprate | parallel ns/op | overhead | vs. httprate | allocs/op | B/op |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	peerS, peerP := r.overhead(httpPeer, serial, procs), r.overhead(httpPeer, parallel, procs)
	for _, m := range r.middlewares {
		os, op := r.overhead(m.Name, serial, procs), r.overhead(m.Name, parallel, procs)
		cols := []string{fmtNs(os), fmtRatio(os, peerS), fmtNs(op), fmtRatio(op, peerP)}
		if m.Name == httpBaseline {
			cols = []string{"–", "–", "–", "–"}
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			mwLabel(m), fmtNs(r.httpNs(m.Name, serial, procs)), cols[0], cols[1],
			fmtNs(r.httpNs(m.Name, parallel, procs)), cols[2], cols[3],
			fmtAllocs(r.httpAllocs(m.Name, serial, procs)), fmtAllocs(r.httpBytes(m.Name, serial, procs)))
	}
	return b.String()
}

// httpFullTable returns the Markdown table of every measured middleware
// cell, with the spread of the runs.
func (r *report) httpFullTable() string {
	var b strings.Builder
	b.WriteString("| middleware | GOMAXPROCS | mode | ns/op (median) | min–max | runs | overhead | vs. httprate | allocs/op | B/op |\n")
	b.WriteString("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, m := range r.middlewares {
		for _, p := range procsOf(r.res.http) {
			for _, mode := range []string{serial, parallel} {
				c := r.res.http[cell{m.Name, mode, p}]
				if c == nil || len(c.ns) == 0 {
					continue
				}
				o := r.overhead(m.Name, mode, p)
				ov, ratio := fmtNs(o), fmtRatio(o, r.overhead(httpPeer, mode, p))
				if m.Name == httpBaseline {
					ov, ratio = "–", "–"
				}
				fmt.Fprintf(&b, "| %s | %d | %s | %s | %s–%s | %d | %s | %s | %s | %s |\n",
					mwLabel(m), p, mode, fmtNs(r.httpNs(m.Name, mode, p)), fmtNs(slices.Min(c.ns)), fmtNs(slices.Max(c.ns)),
					len(c.ns), ov, ratio, fmtAllocs(r.httpAllocs(m.Name, mode, p)), fmtAllocs(r.httpBytes(m.Name, mode, p)))
			}
		}
	}
	return b.String()
}

// httpNotes returns observations on the HTTP results at GOMAXPROCS procs,
// each with its figures, skipping any whose figures are missing.
func (r *report) httpNotes(procs int) []string {
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
			fmtNs(rs), fmtNs(rp), fmtNs(hs), fmtNs(hp), fmtRatio(rs, hs), fmtRatio(rp, hp), fmtAllocs(ra), fmtAllocs(ha)))
	}
	gs, gp := r.overhead("HttplimitGateRate", serial, procs), r.overhead("HttplimitGateRate", parallel, procs)
	ga, gb, rb := r.httpAllocs("HttplimitGateRate", serial, procs), r.httpBytes("HttplimitGateRate", serial, procs), r.httpBytes("HttplimitRate", serial, procs)
	if ok(rs, rp, gs, gp, ra, ga, gb, rb) {
		out = append(out, fmt.Sprintf("The gate adds %s ns per request from one goroutine and %s ns from 8, and %s allocations "+
			"(%s bytes): with a gate, the middleware hands the handler a copy of the request whose context holds the request's place.",
			fmtNs(gs-rs), fmtNs(gp-rp), fmtAllocs(ga-ra), fmtAllocs(gb-rb)))
	}
	return out
}

// markdown returns BENCHMARKS.md.
func (r *report) markdown() []byte {
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
	w("**Workload:** %s distinct keys like `client-000123` in a fixed random order, each structure filled with all of them before timing; ", commas(bench.NumKeys))
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
	if hasHTTP {
		w("### HTTP middleware\n\n")
		w("%s\n", r.httpFullTable())
	}

	w("## How to run\n\n")
	w("```\ncd bench\ngo run ./cmd/report\n```\n\n")
	if r.settings.HTTPBenchtime != "" {
		w("It builds the benchmark binary once and runs %s, each round a process running `BenchmarkKeys1M` (`-benchtime %s`) "+
			"and then one running `BenchmarkHTTP` (`-benchtime %s`), both with `-cpu %s`; ",
			plural(r.settings.Rounds, "round"), r.settings.Benchtime, r.settings.HTTPBenchtime, r.settings.CPU)
	} else {
		w("It builds the benchmark binary once and runs `BenchmarkKeys1M` %d times (`-benchtime %s -cpu %s`), ", r.settings.Rounds, r.settings.Benchtime, r.settings.CPU)
	}
	w("then `cmd/memory` once per structure, and writes this file, `charts/`, and the raw output in `results/`")
	if r.settings.Seconds > 0 {
		w(" (%.0f s in all for this run)", r.settings.Seconds)
	}
	w(". Flags `-rounds`, `-benchtime`, `-httpbenchtime` and `-cpu` change the settings, and `-from results` renders saved results again. ")
	w("To compare two versions with benchstat, run `go test -run '^$' -bench Keys1M -cpu 1,2 -count 10` ")
	w("(or `-bench HTTP`) in `bench/` on each.\n")
	return b.Bytes()
}

// httpSection writes the section on the middlewares with w.
func (r *report) httpSection(w func(string, ...any)) {
	p := r.httpProcs()
	w("## HTTP middleware at GOMAXPROCS=%d\n\n", p)
	w("Each middleware wraps the same handler, which writes `ok` and allocates nothing. Requests come from %s client "+
		"addresses in turn (`RemoteAddr` 10.1.0.0 to 10.1.3.255), so every middleware keeps one bucket per address; "+
		"they are built once and served in-process, with no network and no HTTP parsing, to a `ResponseWriter` "+
		"that keeps only its header map, cleared and reused. Each middleware serves one request from every address "+
		"before timing. Its limit, %s requests %s per address, is never reached: a run fails if any request is refused. ",
		commas(bench.NumClients), commas(bench.HTTPEvents), per(bench.HTTPPeriod))
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
func (r *report) notes(procs int) []string {
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
			fmtNs(est), fmtNs(rate), fmtNs(in), fmtBytes(eh), fmtBytes(rh), fmtBytes(ih)))
	}

	m, mc := ns(baseline), ns("MutexMapClock")
	if ok(m, mc) {
		out = append(out, fmt.Sprintf("With 1,000,000 keys, every structure with an entry per key misses the cache on each call. "+
			"The plain maps' loops can overlap one call's miss with the next; a limiter reads the clock on each call, and "+
			"on this machine the clock read stops that overlap: the mutex map takes %s ns per call, and %s ns when each call "+
			"also reads `time.Now()`. Compare the exact limiters with the second figure; in a server, where other work runs "+
			"between two calls, the first is out of reach too.", fmtNs(m), fmtNs(mc)))
	}

	g, gr := ns("GCRA"), ns("GCRARefused")
	if ok(g, gr) {
		out = append(out, fmt.Sprintf("`limits.GCRA` takes %s ns per allowed call and %s ns per refused one, "+
			"its exact `RetryAfter` included.", fmtNs(g), fmtNs(gr)))
	}
	gh, mh := r.heapOf("GCRA"), r.heapOf(baseline)
	if ok(gh, mh) {
		out = append(out, fmt.Sprintf("`limits.GCRA` keeps a 64-bit hash and a time per key, not the key, so its table "+
			"for 1,000,000 keys holds %s, %s times the mutex map's, which keeps copies of the keys.",
			fmtBytes(gh), fmtRatio(gh, mh)))
	}

	var allocating []string
	for _, s := range r.structures {
		if a := r.allocs(s.Name, serial, procs); ok(a) && a > 0 {
			allocating = append(allocating, fmt.Sprintf("%s (%s)", label(s), fmtAllocs(a)))
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
	return fmt.Sprintf(": %s calls", commas(n))
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

// commas formats n with thousands separators.
func commas(n int) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// chartRow is one labelled group of bars.
type chartRow struct {
	label  string
	bold   bool
	group  int       // a line separates rows of different groups
	values []float64 // one per series; NaN for none
}

// chart is a horizontal bar chart.
type chart struct {
	title    string
	subtitle string
	series   []string // legend, one name per bar of a row
	colors   []string // one per series
	rows     []chartRow
	format   func(float64) string // a bar's value
	unit     float64              // axis ticks fall on round multiples of it
	tick     func(float64) string // an axis tick
}

// Chart geometry, in pixels.
const (
	chartWidth = 820
	labelRight = 220 // labels end here
	barLeft    = 228 // bars start here
	barSpan    = 470 // width of the largest axis value
	barHeight  = 12
	barGap     = 2
	rowGap     = 9
	headHeight = 74
	footHeight = 30
)

// svg renders c as an SVG document.
func (c *chart) svg() []byte {
	maxV := 0.0
	for _, r := range c.rows {
		for _, v := range r.values {
			if !math.IsNaN(v) {
				maxV = max(maxV, v)
			}
		}
	}
	step, top := axis(maxV / c.unit)
	step, top = step*c.unit, top*c.unit
	rowH := len(c.series)*(barHeight+barGap) - barGap + rowGap
	height := headHeight + len(c.rows)*rowH + footHeight
	x := func(v float64) float64 { return barLeft + v/top*barSpan }

	var b bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	esc := html.EscapeString
	w(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartWidth, height, chartWidth, height)
	w(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	w(`<text x="10" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", esc(c.title))
	w(`<text x="10" y="40" fill="#555555">%s</text>`+"\n", esc(c.subtitle))
	lx := 10
	for i, s := range c.series {
		w(`<rect x="%d" y="50" width="12" height="12" fill="%s"/>`+"\n", lx, c.colors[i])
		w(`<text x="%d" y="60">%s</text>`+"\n", lx+16, esc(s))
		lx += 24 + 7*len(s)
	}
	plotTop, plotBottom := headHeight-6, height-footHeight+2
	for v := 0.0; v <= top*(1+1e-9); v += step {
		w(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#dddddd"/>`+"\n", x(v), plotTop, x(v), plotBottom)
		w(`<text x="%.1f" y="%d" text-anchor="middle" fill="#555555">%s</text>`+"\n", x(v), plotBottom+14, esc(c.tick(v)))
	}
	y := headHeight
	for i, r := range c.rows {
		if i > 0 && r.group != c.rows[i-1].group {
			w(`<line x1="10" y1="%d" x2="%d" y2="%d" stroke="#bbbbbb" stroke-dasharray="3,3"/>`+"\n",
				y-rowGap/2-1, chartWidth-10, y-rowGap/2-1)
		}
		weight := ""
		if r.bold {
			weight = ` font-weight="bold"`
		}
		mid := y + (rowH-rowGap)/2 + 4
		w(`<text x="%d" y="%d" text-anchor="end"%s>%s</text>`+"\n", labelRight, mid, weight, esc(r.label))
		for i, v := range r.values {
			by := y + i*(barHeight+barGap)
			if math.IsNaN(v) {
				w(`<text x="%d" y="%d" fill="#555555">n/a</text>`+"\n", barLeft+4, by+barHeight-2)
				continue
			}
			bw := max(x(v)-barLeft, 1)
			w(`<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", barLeft, by, bw, barHeight, c.colors[i])
			w(`<text x="%.1f" y="%d" font-size="11">%s</text>`+"\n", barLeft+bw+4, by+barHeight-2, esc(c.format(v)))
		}
		y += rowH
	}
	w("</svg>\n")
	return b.Bytes()
}

// axis returns a round tick step and the axis end for values up to maxV.
func axis(maxV float64) (step, top float64) {
	if maxV <= 0 || math.IsNaN(maxV) {
		return 1, 1
	}
	raw := maxV / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step = 10 * mag
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	return step, math.Ceil(maxV/step) * step
}

// Bar colours.
const (
	colorSerial   = "#4e79a7"
	colorParallel = "#f28e2b"
)

// nsChart returns the chart of time per call at GOMAXPROCS procs.
func (r *report) nsChart(procs int) []byte {
	c := chart{
		title:    fmt.Sprintf("Time per call, %s keys, GOMAXPROCS=%d (shorter is faster)", commas(bench.NumKeys), procs),
		subtitle: fmt.Sprintf("median ns/op; %s; %s", r.machine.CPU, r.machine.Date),
		series:   []string{"1 goroutine", "8 goroutines"},
		colors:   []string{colorSerial, colorParallel},
		format:   fmtNs,
		unit:     1,
		tick:     func(v float64) string { return fmt.Sprintf("%.0f ns", v) },
	}
	for _, s := range r.structures {
		c.rows = append(c.rows, chartRow{
			label:  s.Label,
			bold:   s.Kind == bench.Ours,
			group:  int(s.Kind),
			values: []float64{r.ns(s.Name, serial, procs), r.ns(s.Name, parallel, procs)},
		})
	}
	return c.svg()
}

// httpChart returns the chart of the middlewares' overhead per request at
// GOMAXPROCS procs.
func (r *report) httpChart(procs int) []byte {
	c := chart{
		title:    fmt.Sprintf("Overhead per request over the bare handler, GOMAXPROCS=%d (shorter is cheaper)", procs),
		subtitle: fmt.Sprintf("median ns/op minus the bare handler's; %s clients; %s; %s", commas(bench.NumClients), r.machine.CPU, r.machine.Date),
		series:   []string{"1 goroutine", "8 goroutines"},
		colors:   []string{colorSerial, colorParallel},
		format:   fmtNs,
		unit:     1,
		tick:     func(v float64) string { return fmt.Sprintf("%.0f ns", v) },
	}
	for _, m := range r.middlewares {
		if m.Name == httpBaseline {
			continue
		}
		c.rows = append(c.rows, chartRow{
			label:  m.Label,
			bold:   m.Kind == bench.Ours,
			group:  int(m.Kind),
			values: []float64{r.overhead(m.Name, serial, procs), r.overhead(m.Name, parallel, procs)},
		})
	}
	return c.svg()
}

// heapChart returns the chart of heap held for NumKeys keys.
func (r *report) heapChart() []byte {
	c := chart{
		title:    fmt.Sprintf("Heap held for %s keys (shorter is smaller)", commas(bench.NumKeys)),
		subtitle: fmt.Sprintf("live heap after GC, each structure in its own process; %s", r.machine.Date),
		series:   []string{"heap"},
		colors:   []string{colorSerial},
		format:   fmtBytes,
		unit:     1 << 20,
		tick:     func(v float64) string { return fmt.Sprintf("%.0f MiB", v/(1<<20)) },
	}
	for _, s := range r.structures {
		c.rows = append(c.rows, chartRow{label: s.Label, bold: s.Kind == bench.Ours, group: int(s.Kind), values: []float64{r.heapOf(s.Name)}})
	}
	return c.svg()
}
