// Command limits-accuracy measures how far the count-min sketches of package
// limits over-count, in plain and conservative mode, over a range of sizes
// and two workloads, and writes the results as a markdown table and an SVG
// chart.
//
//	go run ./cmd/limits-accuracy                    # writes docs/ACCURACY.md and docs/accuracy.svg
//	go run ./cmd/limits-accuracy -trials 1 -md /tmp/a.md -svg /tmp/a.svg
//
// The workloads have the same number of distinct keys (10,000 by default)
// and the same number of events, in a fixed shuffled order:
//
//   - zipf: key i gets max(10, floor(10*keys/(i+1))) events, 973,855 in all
//     for 10,000 keys: a few keys take most of the traffic, as on the web;
//   - uniform: every key gets the same share of those events, to within one.
//
// For each size (hashes x slots) and mode it counts the workload in fresh
// sketches, -trials times with new random seeds, and reports over the keys
// the share counted exactly, the mean, 99th percentile and largest
// over-count, and the bound e*N/slots of the count-min analysis. It also
// checks the sizes Sizing.Dims picks against the tolerance they promise, and
// stops with an error if any estimate is below the true count.
//
// It uses the standard library only and runs in about ten seconds on two
// cores, spreading the sketches over the CPUs.
package main

import (
	"encoding/xml"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/limitsgo/limits"
)

// config is what a run measures and where it writes.
type config struct {
	keys   int   // distinct keys per workload
	trials int   // sketches per size and mode, with fresh seeds
	hashes []int // sizes measured: every hashes x slots pair
	slots  []int
	md     string // path of the markdown report
	svg    string // path of the SVG chart
}

func main() {
	cfg := config{}
	flag.IntVar(&cfg.keys, "keys", 10000, "distinct keys in each workload")
	flag.IntVar(&cfg.trials, "trials", 3, "sketches per size and mode, each with fresh random seeds")
	hashes := flag.String("hashes", "1,2,4,8", "comma-separated hashes (rows) to measure")
	slots := flag.String("slots", "256,512,1024,2048,4096,8192,16384,32768,65536", "comma-separated slots (columns) to measure")
	flag.StringVar(&cfg.md, "md", "docs/ACCURACY.md", "path of the markdown report")
	flag.StringVar(&cfg.svg, "svg", "docs/accuracy.svg", "path of the SVG chart")
	flag.Parse()
	var err error
	if cfg.hashes, err = parseInts(*hashes); err != nil {
		fatal(fmt.Errorf("-hashes: %w", err))
	}
	if cfg.slots, err = parseInts(*slots); err != nil {
		fatal(fmt.Errorf("-slots: %w", err))
	}
	if err := run(cfg, os.Stdout); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "limits-accuracy:", err)
	os.Exit(1)
}

// parseInts parses a comma-separated list of positive integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		if n < 1 {
			return nil, fmt.Errorf("%d is not positive", n)
		}
		out = append(out, n)
	}
	return out, nil
}

// run measures every size of cfg on both workloads, writes the report and
// the chart, and prints a short summary to out.
func run(cfg config, out io.Writer) error {
	if cfg.keys < 2 || cfg.trials < 1 || len(cfg.hashes) == 0 || len(cfg.slots) == 0 {
		return errors.New("need at least 2 keys, 1 trial, one hashes and one slots value")
	}
	if slices.Max(cfg.hashes) > 16 {
		return errors.New("conservative sketches take at most 16 hashes")
	}
	z := zipf(cfg.keys)
	loads := []*workload{z, uniform(cfg.keys, z.events)}
	var sizes []size
	for _, h := range cfg.hashes {
		for _, s := range cfg.slots {
			sizes = append(sizes, size{h, s})
		}
	}
	res, err := measureAll(loads, sizes, cfg.trials)
	if err != nil {
		return err
	}
	checks, err := checkSizings(loads, cfg.trials)
	if err != nil {
		return err
	}
	if err := writeFile(cfg.md, func(w io.Writer) error { return writeMarkdown(w, cfg, loads, res, checks) }); err != nil {
		return err
	}
	if err := writeFile(cfg.svg, func(w io.Writer) error { return writeSVG(w, loads, res) }); err != nil {
		return err
	}
	for _, r := range res {
		if r.load == z && r.size.hashes == 4 && (r.size.slots == 1024 || r.size.slots == 8192) {
			fmt.Fprintf(out, "%s %dx%d: plain mean %.1f, exact %.1f%%; conservative mean %.1f, exact %.1f%%\n",
				z.name, r.size.hashes, r.size.slots, r.plain.mean, r.plain.exact, r.cons.mean, r.cons.exact)
		}
	}
	fmt.Fprintf(out, "wrote %s and %s\n", cfg.md, cfg.svg)
	return nil
}

// writeFile creates path, and its directory if need be, and fills it with
// write.
func writeFile(path string, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// workload is a stream of events over keys whose true counts are known.
type workload struct {
	name   string
	about  string   // one line for the report
	keys   []string // key names
	counts []int64  // true count per key
	stream []int32  // key index per event, in arrival order
	events int64    // len(stream)
}

// zipf returns the skewed workload: key i gets max(10, floor(10*n/(i+1)))
// events.
func zipf(n int) *workload {
	counts := make([]int64, n)
	for i := range counts {
		counts[i] = max(10, int64(10*n/(i+1)))
	}
	return newWorkload("zipf", fmt.Sprintf("key i gets max(10, floor(%d/(i+1))) events", 10*n), counts)
}

// uniform returns events spread evenly over n keys.
func uniform(n int, events int64) *workload {
	counts := make([]int64, n)
	for i := range counts {
		counts[i] = events / int64(n)
		if int64(i) < events%int64(n) {
			counts[i]++
		}
	}
	return newWorkload("uniform", "every key gets the same share of the events, to within one", counts)
}

// newWorkload returns the workload with the given true counts, its events
// shuffled in a fixed order.
func newWorkload(name, about string, counts []int64) *workload {
	w := &workload{name: name, about: about, counts: counts, keys: make([]string, len(counts))}
	for i, c := range counts {
		w.keys[i] = fmt.Sprintf("client-%06d", i)
		for range c {
			w.stream = append(w.stream, int32(i))
		}
	}
	rng := rand.New(rand.NewPCG(7, 7))
	rng.Shuffle(len(w.stream), func(i, j int) { w.stream[i], w.stream[j] = w.stream[j], w.stream[i] })
	w.events = int64(len(w.stream))
	return w
}

// size is a sketch's shape.
type size struct{ hashes, slots int }

// bytes returns the memory a sketch of size s holds.
func (s size) bytes() int { return s.hashes * s.slots * 8 }

// sketch is what both kinds of sketch offer for counting a workload.
type sketch interface {
	Hash(key []byte) uint64
	IncrHash(h uint64, delta int64) int64
	GetHash(h uint64) int64
}

// newSketch returns a fresh sketch of size s, conservative or plain.
func newSketch(s size, conservative bool) sketch {
	return limits.NewEstimator(s.hashes, s.slots, limits.Sizing{Conservative: conservative})
}

// count replays w into sk, one event at a time, and returns each key's
// over-count, sorted. It fails if any estimate is below the true count.
func count(sk sketch, w *workload) ([]int64, error) {
	hs := make([]uint64, len(w.keys))
	for i, k := range w.keys {
		hs[i] = sk.Hash([]byte(k))
	}
	for _, i := range w.stream {
		sk.IncrHash(hs[i], 1)
	}
	over := make([]int64, len(w.keys))
	for i, h := range hs {
		over[i] = sk.GetHash(h) - w.counts[i]
		if over[i] < 0 {
			return nil, fmt.Errorf("%s: key %s estimated %d, below its true count %d", w.name, w.keys[i], sk.GetHash(h), w.counts[i])
		}
	}
	slices.Sort(over)
	return over, nil
}

// stats summarizes over-counts, sorted, of one or more trials.
type stats struct {
	exact float64 // share of keys counted exactly, in percent
	mean  float64 // mean over-count
	p99   float64 // 99th percentile over-count
	max   int64   // largest over-count
}

// summarize returns the stats of one trial's sorted over-counts.
func summarize(over []int64) stats {
	var st stats
	sum, exact := 0.0, 0
	for _, o := range over {
		sum += float64(o)
		if o == 0 {
			exact++
		}
	}
	n := len(over)
	st.exact = 100 * float64(exact) / float64(n)
	st.mean = sum / float64(n)
	st.p99 = float64(over[(99*n+99)/100-1]) // nearest rank
	st.max = over[n-1]
	return st
}

// result is what one size measured on one workload, averaged over trials
// (max: the largest of all trials).
type result struct {
	load  *workload
	size  size
	plain stats
	cons  stats
}

// measureAll counts every workload in sketches of every size, both modes,
// trials times, spreading the work over the CPUs.
func measureAll(loads []*workload, sizes []size, trials int) ([]result, error) {
	type job struct{ r, trial int }
	res := make([]result, 0, len(loads)*len(sizes))
	for _, w := range loads {
		for _, s := range sizes {
			res = append(res, result{load: w, size: s})
		}
	}
	per := make([][2][]stats, len(res)) // [result][mode][trial]
	for i := range per {
		per[i] = [2][]stats{make([]stats, trials), make([]stats, trials)}
	}
	jobs := make(chan job)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for j := range jobs {
				r := &res[j.r]
				for mode, cons := range []bool{false, true} {
					over, err := count(newSketch(r.size, cons), r.load)
					if err != nil {
						mu.Lock()
						first = cmp(first, err)
						mu.Unlock()
						continue
					}
					per[j.r][mode][j.trial] = summarize(over)
				}
			}
		})
	}
	for r := range res {
		for t := range trials {
			jobs <- job{r, t}
		}
	}
	close(jobs)
	wg.Wait()
	if first != nil {
		return nil, first
	}
	for i := range res {
		res[i].plain = average(per[i][0])
		res[i].cons = average(per[i][1])
	}
	return res, nil
}

// cmp returns err if it is not nil, else alt.
func cmp(err, alt error) error {
	if err != nil {
		return err
	}
	return alt
}

// average returns the mean of each stat over trials, and the largest max.
func average(ts []stats) stats {
	var a stats
	for _, t := range ts {
		a.exact += t.exact / float64(len(ts))
		a.mean += t.mean / float64(len(ts))
		a.p99 += t.p99 / float64(len(ts))
		a.max = max(a.max, t.max)
	}
	return a
}

// sizingCheck is what a Sizing promised for one workload and what sketches of
// its size delivered.
type sizingCheck struct {
	load      *workload
	label     string // the Sizing, as Go source
	sizing    limits.Sizing
	size      size
	tolerance int64   // the over-count allowed, in events
	plainMiss float64 // share of keys over tolerance, plain, in percent
	consMiss  float64 // the same, conservative
}

// checkSizings sizes sketches for each workload with Sizing and measures the
// share of keys whose over-count exceeds the tolerance asked for.
func checkSizings(loads []*workload, trials int) ([]sizingCheck, error) {
	var checks []sizingCheck
	for _, w := range loads {
		k := len(w.keys)
		for _, c := range []struct {
			label string
			s     limits.Sizing
		}{
			{fmt.Sprintf("Sizing{Keys: %d}", k), limits.Sizing{Keys: k}},
			{fmt.Sprintf("Sizing{Keys: %d, MaxOverFraction: 0.0001}", k), limits.Sizing{Keys: k, MaxOverFraction: 0.0001}},
			{fmt.Sprintf("Sizing{Keys: %d, Events: %d, MaxOver: 50}", k, w.events), limits.Sizing{Keys: k, Events: w.events, MaxOver: 50}},
			{"Sizing{MaxOverFraction: 0.001}", limits.Sizing{MaxOverFraction: 0.001}},
		} {
			h, s, err := c.s.Dims()
			if err != nil {
				return nil, err
			}
			tol := c.s.MaxOver
			if c.s.MaxOverFraction > 0 {
				tol = int64(c.s.MaxOverFraction * float64(w.events))
			}
			sc := sizingCheck{load: w, label: c.label, sizing: c.s, size: size{h, s}, tolerance: tol}
			for range trials {
				for _, cons := range []bool{false, true} {
					over, err := count(newSketch(sc.size, cons), w)
					if err != nil {
						return nil, err
					}
					i, _ := slices.BinarySearch(over, tol+1) // first key over tolerance
					miss := 100 * float64(len(over)-i) / float64(len(over)) / float64(trials)
					if cons {
						sc.consMiss += miss
					} else {
						sc.plainMiss += miss
					}
				}
			}
			checks = append(checks, sc)
		}
	}
	return checks, nil
}

// writeMarkdown writes the report.
func writeMarkdown(w io.Writer, cfg config, loads []*workload, res []result, checks []sizingCheck) error {
	var b strings.Builder
	b.WriteString("# Accuracy of the count-min sketches\n\n")
	fmt.Fprintf(&b, "Generated by `go run ./cmd/limits-accuracy -trials %d`. Every sketch draws random seeds, so figures move a little from run to run; each is the mean over %d sketches (max: the largest over all of them).\n\n", cfg.trials, cfg.trials)
	b.WriteString("Workloads, each counted one event at a time in a fixed shuffled order:\n\n")
	for _, l := range loads {
		fmt.Fprintf(&b, "- **%s**: %s keys, %s events; %s.\n", l.name, group(int64(len(l.keys))), group(l.events), l.about)
	}
	b.WriteString("\nColumns: the share of keys counted exactly, then the mean, 99th percentile and largest over-count over all keys, for the plain `Estimator` and the `ConservativeEstimator`; the last column is the count-min bound e*N/slots, which a key's over-count exceeds with probability at most e^-hashes. The two modes are measured on independent random placements, so a single figure such as the max can come out higher for the conservative sketch; on one placement its estimates are never higher than the plain sketch's (the package tests check this).\n\n")
	b.WriteString("![mean over-count against memory](accuracy.svg)\n")
	for _, l := range loads {
		fmt.Fprintf(&b, "\n## %s\n\n", l.name)
		b.WriteString("| hashes x slots | memory | plain exact | plain mean | plain p99 | plain max | conservative exact | conservative mean | conservative p99 | conservative max | e*N/slots |\n")
		b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, r := range res {
			if r.load != l {
				continue
			}
			fmt.Fprintf(&b, "| %d x %d | %s | %.1f%% | %s | %s | %d | %.1f%% | %s | %s | %d | %.0f |\n",
				r.size.hashes, r.size.slots, memory(r.size.bytes()),
				r.plain.exact, num(r.plain.mean), num(r.plain.p99), r.plain.max,
				r.cons.exact, num(r.cons.mean), num(r.cons.p99), r.cons.max,
				math.E*float64(l.events)/float64(r.size.slots))
		}
	}
	b.WriteString("\n## Sizing\n\n")
	b.WriteString("What `Sizing.Dims` picks for each workload, and the share of keys whose over-count then exceeds the tolerance; the bound allows 2% (the default Failure).\n\n")
	b.WriteString("| workload | sizing | hashes x slots | memory | tolerance | plain over it | conservative over it |\n")
	b.WriteString("| --- | --- | --- | ---: | ---: | ---: | ---: |\n")
	for _, c := range checks {
		fmt.Fprintf(&b, "| %s | `%s` | %d x %d | %s | %d | %.2f%% | %.2f%% |\n",
			c.load.name, c.label, c.size.hashes, c.size.slots, memory(c.size.bytes()), c.tolerance, c.plainMiss, c.consMiss)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// num formats a mean or percentile: whole above 100, else 2 significant
// decimals.
func num(v float64) string {
	if v >= 100 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// group formats n with thousands separators.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// memory formats a byte count in B, KiB or MiB, to one decimal.
func memory(b int) string {
	unit := func(n float64, name string) string {
		return strings.TrimSuffix(strconv.FormatFloat(n, 'f', 1, 64), ".0") + " " + name
	}
	switch {
	case b >= 1<<20:
		return unit(float64(b)/(1<<20), "MiB")
	case b >= 1<<10:
		return unit(float64(b)/(1<<10), "KiB")
	}
	return fmt.Sprintf("%d B", b)
}

// chart geometry, in SVG user units.
const (
	panelW, panelH = 440, 320
	marginL        = 64
	marginT        = 48
	marginB        = 52
	gap            = 80
	legendH        = 72
	floorY         = 0.01 // lines end where the mean first drops below this
)

// modeStyle is how one mode's lines look.
var modeStyle = [2]struct{ name, color string }{
	{"plain", "#d95f02"},
	{"conservative", "#1b6fb5"},
}

// dashes returns the dash pattern of the lines for h hashes, the i-th value
// of hashes measured: solid for the default of 4.
func dashes(i, h int) string {
	if h == 4 {
		return ""
	}
	return [...]string{"8 4", "2 3", "12 4 2 4", "1 4"}[i%4]
}

// lineWidth returns the stroke width of the lines for h hashes: the default
// of 4 stands out.
func lineWidth(h int) float64 {
	if h == 4 {
		return 2.8
	}
	return 1.5
}

// hashCount returns "1 hash" or "n hashes".
func hashCount(h int) string {
	if h == 1 {
		return "1 hash"
	}
	return fmt.Sprintf("%d hashes", h)
}

// writeSVG writes the chart: for each workload a panel of mean over-count
// against memory, log-log, one line per mode and hashes.
func writeSVG(w io.Writer, loads []*workload, res []result) error {
	var hashes []int
	minB, maxB, maxY := math.MaxInt, 0, floorY
	for _, r := range res {
		if !slices.Contains(hashes, r.size.hashes) {
			hashes = append(hashes, r.size.hashes)
		}
		minB, maxB = min(minB, r.size.bytes()), max(maxB, r.size.bytes())
		maxY = max(maxY, r.plain.mean, r.cons.mean)
	}
	slices.Sort(hashes)
	x0, x1 := math.Log2(float64(minB)), math.Log2(float64(maxB))
	if x1-x0 < 1 {
		x0, x1 = x0-0.5, x1+0.5
	}
	y0, y1 := math.Log10(floorY), math.Ceil(math.Log10(maxY)+1e-9)
	width := marginL + len(loads)*(panelW+gap)
	height := marginT + panelH + marginB + legendH

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="15" font-weight="bold">%s</text>`+"\n", marginL, esc("Mean over-count per key against sketch memory"))
	for p, l := range loads {
		left := float64(marginL + p*(panelW+gap))
		px := func(bytes int) float64 {
			return left + (math.Log2(float64(bytes))-x0)/(x1-x0)*panelW
		}
		py := func(v float64) float64 {
			v = max(v, floorY)
			return marginT + (y1-math.Log10(v))/(y1-y0)*panelH
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="13" font-weight="bold">%s</text>`+"\n", left, marginT-10,
			esc(fmt.Sprintf("%s: %s keys, %s events", l.name, group(int64(len(l.keys))), group(l.events))))
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", left, marginT, panelW, panelH)
		for e := y0; e <= y1+1e-9; e++ {
			y := py(math.Pow(10, e))
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y, left+panelW, y)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y+4, esc(strconv.FormatFloat(math.Pow(10, e), 'g', -1, 64)))
		}
		for e := math.Ceil(x0); e <= x1+1e-9; e++ {
			if int(e)%2 != 0 && x1-x0 > 6 {
				continue
			}
			x := px(1 << int(e))
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x, marginT, x, marginT+panelH)
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, marginT+panelH+16, esc(memory(1<<int(e))))
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", left+panelW/2, marginT+panelH+36, esc("memory (hashes x slots x 8 bytes)"))
		fmt.Fprintf(&b, `<text transform="translate(%.1f %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", left-44, marginT+panelH/2, esc("mean over-count (events)"))
		for mode, ms := range modeStyle {
			for hi, h := range hashes {
				var pts []string
				for _, r := range res {
					if r.load != l || r.size.hashes != h {
						continue
					}
					v := r.plain.mean
					if mode == 1 {
						v = r.cons.mean
					}
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(r.size.bytes()), py(v)))
					if v < floorY {
						break // the rest lie on the bottom edge too
					}
				}
				fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%.1f" stroke-dasharray="%s" points="%s"><title>%s</title></polyline>`+"\n",
					ms.color, lineWidth(h), dashes(hi, h), strings.Join(pts, " "), esc(ms.name+", "+hashCount(h)))
			}
		}
	}
	// Legend: colour for the mode, dashes for the hashes.
	ly := marginT + panelH + marginB + 14
	for mode, ms := range modeStyle {
		x := marginL + mode*200
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="3"/>`+"\n", x, ly, x+30, ly, ms.color)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", x+36, ly+4, esc(ms.name))
	}
	for hi, h := range hashes {
		x := marginL + hi*130
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#444" stroke-width="%.1f" stroke-dasharray="%s"/>`+"\n", x, ly+22, x+30, ly+22, lineWidth(h), dashes(hi, h))
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", x+36, ly+26, esc(hashCount(h)))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#555">%s</text>`+"\n", marginL, ly+48,
		esc(fmt.Sprintf("A line ends where its mean first drops below %g. Generated by go run ./cmd/limits-accuracy.", floorY)))
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// esc returns s escaped for SVG text and attribute values.
func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s)) // writes to a strings.Builder cannot fail
	return b.String()
}
