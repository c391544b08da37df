// Command limits-accuracy measures how far the count-min sketches of package
// limits over-count, in plain and conservative mode, and how often that
// makes a rate limiter refuse a key that is within its limit; it writes
// the results as a markdown report and two SVG charts.
//
//	go run ./cmd/limits-accuracy                    # writes docs/ACCURACY.md, docs/accuracy.svg and docs/refusals.svg
//	go run ./cmd/limits-accuracy -trials 1 -refusal-keys 10000 -md /tmp/a.md -svg /tmp/a.svg -refusal-svg /tmp/r.svg
//
// First it replays workloads of -exact-keys keys each (zipf, uniform,
// bimodal and lognormal, below) into the default Rate, whose windows count
// exactly first, and into the former default, count-min windows of a
// conservative 4 x 4096 sketch in the same memory, as a limiter would see
// them at limits of 2, 5 and 10 times the workload's median count, and
// reports the share of keys within each limit refused and the share
// counted exactly.
//
// Each workload is a window's worth of events over a number of distinct
// keys, in a fixed shuffled order:
//
//   - zipf: key i gets max(10, floor(10*keys/(i+1))) events, 973,855 in all
//     for 10,000 keys: a few keys take most of the traffic, as on the web;
//   - uniform: every key gets the same share of as many events, to within
//     one;
//   - bimodal: 99% of the keys get 10 to 39 events, 1% 2,000 to 3,999;
//   - lognormal: key counts exp(3.5 + 1.2 N(0, 1)), at least 1.
//
// The size sweep counts the workloads of -keys keys in fresh sketches of
// every size (hashes x slots) and mode, -trials times with new random
// seeds, and reports over the keys the share counted exactly, the mean,
// 99th percentile and largest over-count, and the bound e*N/slots of the
// count-min analysis. It also checks the sizes Sizing.Dims picks against the
// tolerance they promise.
//
// The refusal measurement replays the workloads of each of -refusal-keys
// keys into each -candidates size, plain and conservative, as a limiter
// with a limit L per window would see them: every event is counted, and
// the estimate the count returns is compared with L. For each limit it
// reports the share of the keys whose true count is at most L that got an
// estimate above L at least once (keys refused though within their limit),
// and the share of the events within their key's limit (a key's k-th event
// of the window with k <= L) whose estimate was above L (requests refused
// wrongly). It checks that NewRate's default is the sketch the report
// names as the default.
//
// The command stops with an error if any estimate is below the true count.
// It uses the standard library only, spreads the sketches over the CPUs, and
// with the defaults runs in 70 to 80 seconds on two cores; the report states
// how long its run took.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/internal/report"
)

// config is what a run measures and where it writes.
type config struct {
	keys   int   // distinct keys per workload of the size sweep
	trials int   // sketches per size and mode, with fresh seeds
	hashes []int // sizes of the sweep: every hashes x slots pair
	slots  []int

	refusalKeys []int   // distinct keys of the refusal workloads
	limits      []int64 // limits per window
	candidates  []size  // sizes whose refusals are measured, both modes

	exactKeys []int // distinct keys of the workloads replayed into the default Rate and the former one

	cost bool // time Observe on every candidate

	md         string // path of the markdown report
	svg        string // path of the chart of the size sweep
	refusalSVG string // path of the chart of refusals
}

func main() {
	cfg := config{}
	flag.IntVar(&cfg.keys, "keys", 10000, "distinct keys in each workload of the size sweep")
	flag.IntVar(&cfg.trials, "trials", 5, "sketches per size and mode, each with fresh random seeds")
	hashes := flag.String("hashes", "1,2,4,8", "comma-separated hashes (rows) of the size sweep")
	slots := flag.String("slots", "256,512,1024,2048,4096,8192,16384,32768,65536", "comma-separated slots (columns) of the size sweep")
	refusalKeys := flag.String("refusal-keys", "10000,100000", "comma-separated distinct keys of the refusal workloads")
	limitList := flag.String("limits", "100,1000", "comma-separated limits per window of the refusal measurement")
	candidates := flag.String("candidates", "8x512,4x1024,2x2048,8x1024,4x2048,2x4096,8x2048,4x4096,2x8192",
		"comma-separated hashes x slots whose refusals are measured, plain and conservative")
	exactKeys := flag.String("exact-keys", "1000,10000,20000,50000,100000", "comma-separated distinct keys of the workloads replayed into the default Rate and the former default")
	flag.BoolVar(&cfg.cost, "cost", true, "time Rate.Observe on every candidate, after the measurements")
	flag.StringVar(&cfg.md, "md", "docs/ACCURACY.md", "path of the markdown report")
	flag.StringVar(&cfg.svg, "svg", "docs/accuracy.svg", "path of the chart of over-counts against memory")
	flag.StringVar(&cfg.refusalSVG, "refusal-svg", "docs/refusals.svg", "path of the chart of false refusals")
	flag.Parse()
	var err error
	for _, f := range []struct {
		name string
		list string
		to   *[]int
	}{
		{"-hashes", *hashes, &cfg.hashes},
		{"-slots", *slots, &cfg.slots},
		{"-refusal-keys", *refusalKeys, &cfg.refusalKeys},
		{"-exact-keys", *exactKeys, &cfg.exactKeys},
	} {
		if *f.to, err = parseInts(f.list); err != nil {
			fatal(fmt.Errorf("%s: %w", f.name, err))
		}
	}
	ls, err := parseInts(*limitList)
	if err != nil {
		fatal(fmt.Errorf("-limits: %w", err))
	}
	for _, l := range ls {
		cfg.limits = append(cfg.limits, int64(l))
	}
	if cfg.candidates, err = parseSizes(*candidates); err != nil {
		fatal(fmt.Errorf("-candidates: %w", err))
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

// parseSizes parses a comma-separated list of sizes written hashes x
// slots, such as 4x1024.
func parseSizes(s string) ([]size, error) {
	var out []size
	for f := range strings.SplitSeq(s, ",") {
		h, sl, ok := strings.Cut(strings.TrimSpace(f), "x")
		if !ok {
			return nil, fmt.Errorf("%q is not hashes x slots, such as 4x1024", f)
		}
		n, err := parseInts(h + "," + sl)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", f, err)
		}
		out = append(out, size{n[0], n[1]})
	}
	return out, nil
}

// run measures what cfg asks for, writes the report and the charts, and
// prints a short summary to out.
func run(cfg config, out io.Writer) error {
	start := time.Now()
	switch {
	case cfg.keys < 2 || cfg.trials < 1 || len(cfg.hashes) == 0 || len(cfg.slots) == 0:
		return errors.New("need at least 2 keys, 1 trial, one hashes and one slots value")
	case len(cfg.refusalKeys) == 0 || slices.Min(cfg.refusalKeys) < 2 || len(cfg.limits) == 0 || len(cfg.candidates) == 0:
		return errors.New("need refusal workloads of at least 2 keys, a limit and a candidate")
	case slices.Max(cfg.hashes) > 16 || slices.ContainsFunc(cfg.candidates, func(s size) bool { return s.hashes > 16 }):
		return errors.New("conservative sketches take at most 16 hashes")
	}
	if err := checkDefault(); err != nil {
		return err
	}

	sweepLoads := workloads(cfg.keys)
	var sizes []size
	for _, h := range cfg.hashes {
		for _, s := range cfg.slots {
			sizes = append(sizes, size{h, s})
		}
	}
	sweep, err := measure(sweepLoads, sizes, cfg.trials, nil)
	if err != nil {
		return err
	}
	checks, err := checkSizings(sweepLoads, cfg.trials)
	if err != nil {
		return err
	}
	var refusalLoads []*workload
	for _, k := range cfg.refusalKeys {
		if k == cfg.keys {
			refusalLoads = append(refusalLoads, sweepLoads...)
		} else {
			refusalLoads = append(refusalLoads, workloads(k)...)
		}
	}
	refusals, err := measure(refusalLoads, cfg.candidates, cfg.trials, cfg.limits)
	if err != nil {
		return err
	}

	var exactLoadsAll []*workload
	for _, k := range cfg.exactKeys {
		exactLoadsAll = append(exactLoadsAll, exactLoads(k)...)
	}
	exactTrials := min(cfg.trials, 3)
	exact, err := measureExact(exactLoadsAll, exactTrials)
	if err != nil {
		return err
	}

	var costs map[candidate][2]float64
	var exactCosts [][2]float64
	if cfg.cost {
		exactCosts = timeExact()
		var cands []candidate
		for _, s := range cfg.candidates {
			cands = append(cands, candidate{s, false}, candidate{s, true})
		}
		if !slices.Contains(cands, formerDefault) {
			cands = append(cands, formerDefault)
		}
		costs = timeObserve(cands)
	}
	rep := &accuracyReport{
		cfg: cfg, elapsed: time.Since(start),
		sweepLoads: sweepLoads, sweep: sweep, checks: checks,
		refusalLoads: refusalLoads, refusals: refusals, costs: costs,
		exactLoads: exactLoadsAll, exact: exact, exactTrials: exactTrials, exactCosts: exactCosts,
	}
	for name, data := range map[string][]byte{
		cfg.md:         rep.markdown(),
		cfg.svg:        rep.sweepChart(),
		cfg.refusalSVG: rep.refusalChart(),
	} {
		if err := report.WriteFile(name, data); err != nil {
			return err
		}
	}
	rep.summary(out)
	fmt.Fprintf(out, "wrote %s, %s and %s in %.0f s\n", cfg.md, cfg.svg, cfg.refusalSVG, rep.elapsed.Seconds())
	return nil
}

// workload is a window's worth of events over keys whose true counts are
// known.
type workload struct {
	name   string
	about  string   // one line for the report
	keys   []string // key names
	counts []int64  // true count per key
	stream []int32  // key index per event, in arrival order
	events int64    // len(stream)
}

// title returns the workload's name and scale, such as "zipf, 10,000 keys".
func (w *workload) title() string {
	return fmt.Sprintf("%s, %s keys", w.name, report.Group(int64(len(w.keys))))
}

// phrase names the workload in a sentence, such as "the zipf workload of
// 10,000 keys".
func (w *workload) phrase() string {
	return fmt.Sprintf("the %s workload of %s keys", w.name, report.Group(int64(len(w.keys))))
}

// workloads returns the zipf and uniform workloads of n keys, with the same
// number of events.
func workloads(n int) []*workload {
	z := zipf(n)
	return []*workload{z, uniform(n, z.events)}
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
		w.events += c
	}
	w.stream = make([]int32, 0, w.events)
	for i, c := range counts {
		for range c {
			w.stream = append(w.stream, int32(i))
		}
	}
	rng := rand.New(rand.NewPCG(7, 7))
	rng.Shuffle(len(w.stream), func(i, j int) { w.stream[i], w.stream[j] = w.stream[j], w.stream[i] })
	return w
}

// size is a sketch's shape.
type size struct{ hashes, slots int }

// bytes returns the memory a sketch of size s holds.
func (s size) bytes() int { return s.hashes * s.slots * 8 }

func (s size) String() string { return fmt.Sprintf("%d x %d", s.hashes, s.slots) }

// modes are the names of the two update modes, plain first.
var modes = [2]string{"plain", "conservative"}

// sketch is what a sketch offers for counting a workload.
type sketch interface {
	Hash(key []byte) uint64
	IncrHash(h uint64, delta int64) int64
	GetHash(h uint64) int64
}

// newSketch returns a fresh sketch of size s, conservative or plain.
func newSketch(s size, conservative bool) sketch {
	return limits.NewEstimator(s.hashes, s.slots, limits.Sizing{Conservative: conservative})
}

// refusal counts what a limiter with one limit refused wrongly in one
// replay.
type refusal struct {
	under   int64 // keys whose true count is at most the limit
	keys    int64 // those of them that got an estimate above it
	within  int64 // events within their key's limit: a key's first limit events
	refused int64 // those of them whose estimate was above the limit
}

// keyShare returns the share of the keys within the limit that were
// refused, or NaN if no key was within it.
func (r refusal) keyShare() float64 { return share(r.keys, r.under) }

// eventShare returns the share of the events within their key's limit that
// were refused.
func (r refusal) eventShare() float64 { return share(r.refused, r.within) }

// share returns n/of, or NaN if of is 0.
func share(n, of int64) float64 {
	if of == 0 {
		return math.NaN()
	}
	return float64(n) / float64(of)
}

// replay counts w into sk one event at a time, as a limiter that counts
// every request and refuses those whose count is above the limit would,
// and returns each key's over-count at the end, sorted, and what a limiter
// would have refused wrongly at each of limits. It fails if any estimate is
// below the true count.
func replay(sk sketch, w *workload, limits []int64) (over []int64, refused []refusal, err error) {
	hs := make([]uint64, len(w.keys))
	for i, k := range w.keys {
		hs[i] = sk.Hash([]byte(k))
	}
	seen := make([]int64, len(w.keys)) // events of each key so far
	peak := make([]int64, len(w.keys)) // highest estimate each key got
	refused = make([]refusal, len(limits))
	for _, i := range w.stream {
		est := sk.IncrHash(hs[i], 1)
		seen[i]++
		peak[i] = max(peak[i], est)
		for j, l := range limits {
			if est > l && seen[i] <= l {
				refused[j].refused++
			}
		}
	}
	for j, l := range limits {
		r := &refused[j]
		for i, c := range w.counts {
			r.within += min(c, l)
			if c <= l {
				r.under++
				if peak[i] > l {
					r.keys++
				}
			}
		}
	}
	over = make([]int64, len(w.keys))
	for i, h := range hs {
		over[i] = sk.GetHash(h) - w.counts[i]
		if over[i] < 0 {
			return nil, nil, fmt.Errorf("%s: key %s estimated %d, below its true count %d", w.name, w.keys[i], sk.GetHash(h), w.counts[i])
		}
	}
	slices.Sort(over)
	return over, refused, nil
}

// stats summarizes over-counts, sorted, of one or more trials.
type stats struct {
	exact float64 // share of keys counted exactly
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
	st.exact = float64(exact) / float64(n)
	st.mean = sum / float64(n)
	st.p99 = float64(over[(99*n+99)/100-1]) // nearest rank
	st.max = over[n-1]
	return st
}

// trial is what one sketch measured.
type trial struct {
	stats
	refused []refusal // per limit
}

// spread is a figure measured over several trials: their mean and range.
type spread struct{ mean, lo, hi float64 }

// spreadOf returns the mean and range of xs, ignoring NaN; all NaN if
// every x is.
func spreadOf(xs []float64) spread {
	var s spread
	n := 0
	for _, x := range xs {
		if math.IsNaN(x) {
			continue
		}
		if n == 0 || x < s.lo {
			s.lo = x
		}
		if n == 0 || x > s.hi {
			s.hi = x
		}
		s.mean += x
		n++
	}
	if n == 0 {
		return spread{math.NaN(), math.NaN(), math.NaN()}
	}
	s.mean /= float64(n)
	return s
}

// outcome is what one mode measured on one workload and size, over its
// trials.
type outcome struct {
	stats              // each the mean over trials; max the largest of all
	meanRange spread   // the mean over-count, over the trials
	keys      []spread // per limit: share of the keys within it refused
	events    []spread // per limit: share of the events within it refused
	under     []int64  // per limit: keys whose true count is at most the limit
}

// result is what one size measured on one workload, in both modes.
type result struct {
	load  *workload
	size  size
	modes [2]outcome // plain, conservative
}

// combine returns the outcome of a mode's trials.
func combine(ts []trial, limits int) outcome {
	var o outcome
	means := make([]float64, len(ts))
	for i, t := range ts {
		o.exact += t.exact / float64(len(ts))
		o.mean += t.mean / float64(len(ts))
		o.p99 += t.p99 / float64(len(ts))
		o.max = max(o.max, t.max)
		means[i] = t.mean
	}
	o.meanRange = spreadOf(means)
	for j := range limits {
		var ks, es []float64
		for _, t := range ts {
			ks = append(ks, t.refused[j].keyShare())
			es = append(es, t.refused[j].eventShare())
		}
		o.keys = append(o.keys, spreadOf(ks))
		o.events = append(o.events, spreadOf(es))
		o.under = append(o.under, ts[0].refused[j].under)
	}
	return o
}

// measure replays every workload into fresh sketches of every size, both
// modes, trials times each, spreading the work over the CPUs, and reports
// the refusals at each of limits (none if limits is empty).
func measure(loads []*workload, sizes []size, trials int, limits []int64) ([]result, error) {
	type job struct{ r, mode, trial int }
	res := make([]result, 0, len(loads)*len(sizes))
	for _, w := range loads {
		for _, s := range sizes {
			res = append(res, result{load: w, size: s})
		}
	}
	per := make([][2][]trial, len(res)) // [result][mode][trial]
	for i := range per {
		per[i] = [2][]trial{make([]trial, trials), make([]trial, trials)}
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
				over, refused, err := replay(newSketch(r.size, j.mode == 1), r.load, limits)
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					continue
				}
				per[j.r][j.mode][j.trial] = trial{summarize(over), refused}
			}
		})
	}
	for r := range res {
		for t := range trials {
			for mode := range modes {
				jobs <- job{r, mode, t}
			}
		}
	}
	close(jobs)
	wg.Wait()
	if first != nil {
		return nil, first
	}
	for i := range res {
		for mode := range modes {
			res[i].modes[mode] = combine(per[i][mode], len(limits))
		}
	}
	return res, nil
}

// sizingCheck is what a Sizing promised for one workload and what sketches of
// its size delivered.
type sizingCheck struct {
	load      *workload
	label     string // the Sizing, as Go source
	sizing    limits.Sizing
	size      size
	tolerance int64      // the over-count allowed, in events
	miss      [2]float64 // share of keys over tolerance, per mode
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
				for mode := range modes {
					over, _, err := replay(newSketch(sc.size, mode == 1), w, nil)
					if err != nil {
						return nil, err
					}
					i, _ := slices.BinarySearch(over, tol+1) // first key over tolerance
					sc.miss[mode] += float64(len(over)-i) / float64(len(over)) / float64(trials)
				}
			}
			checks = append(checks, sc)
		}
	}
	return checks, nil
}
