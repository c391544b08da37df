package main

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/internal/report"
)

// The default windows of a Rate count exactly first (a table of key
// fingerprints and counts, then a sketch); this part of the command
// measures them against the former default, count-min windows of
// conservative 4 x 4096 in the same memory, at limits set near typical
// usage: multiples of the median key's count.

// exactMultiples are the limits of the measurement, as multiples of the
// workload's median count.
var exactMultiples = []int64{2, 5, 10}

// rateKind is a way of building a Rate whose windows the measurement
// compares.
type rateKind struct {
	name string
	new  func() *limits.Rate
}

// rateKinds are the new default and the former one.
var rateKinds = []rateKind{
	{"default (exact first)", func() *limits.Rate { return limits.NewRate(time.Hour) }},
	{"former default (conservative 4 x 4096)", func() *limits.Rate {
		return limits.NewRate(time.Hour, limits.Sizing{Hashes: 4, Slots: 4096, Conservative: true})
	}},
}

// exactLoads returns the four workloads of n keys the measurement replays:
// zipf, uniform with as many events, bimodal and lognormal.
func exactLoads(n int) []*workload {
	z := zipf(n)
	rng := rand.New(rand.NewPCG(uint64(n), 22))
	bi := make([]int64, n)
	for i := range bi {
		if rng.IntN(100) == 0 {
			bi[i] = 2000 + rng.Int64N(2000)
		} else {
			bi[i] = 10 + rng.Int64N(30)
		}
	}
	ln := make([]int64, n)
	for i := range ln {
		ln[i] = max(1, int64(math.Exp(3.5+1.2*rng.NormFloat64())))
	}
	return []*workload{
		z, uniform(n, z.events),
		newWorkload("bimodal", "99% of the keys get 10 to 39 events, 1% get 2,000 to 3,999", bi),
		newWorkload("lognormal", "key counts exp(3.5 + 1.2 N(0, 1)), at least 1", ln),
	}
}

// median returns the median count of w.
func median(w *workload) int64 {
	s := slices.Clone(w.counts)
	slices.Sort(s)
	return s[len(s)/2]
}

// exactResult is what one kind of Rate did on one workload, over trials.
type exactResult struct {
	load    *workload
	kind    int
	refused []spread // share of keys within each limit refused, by multiple
	exact   spread   // share of keys whose final estimate is their count
}

// measureExact replays each workload into fresh Rates of each kind, trials
// times, as a limiter with each limit would see them, and returns the
// results, workload by workload and kind by kind. It fails if any
// estimate is below the true count.
func measureExact(loads []*workload, trials int) ([]exactResult, error) {
	type job struct{ load, kind, trial int }
	type out struct {
		refused []float64
		exact   float64
	}
	outs := make([][][]out, len(loads))
	var jobs []job
	for i := range loads {
		outs[i] = make([][]out, len(rateKinds))
		for k := range rateKinds {
			outs[i][k] = make([]out, trials)
			for t := range trials {
				jobs = append(jobs, job{i, k, t})
			}
		}
	}
	var (
		mu   sync.Mutex
		errs []error
		next = make(chan job)
		wg   sync.WaitGroup
	)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for j := range next {
				l := loads[j.load]
				refused, exact, err := replayRate(l, rateKinds[j.kind].new())
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("%s on %s: %w", rateKinds[j.kind].name, l.title(), err))
					mu.Unlock()
				}
				outs[j.load][j.kind][j.trial] = out{refused, exact}
			}
		})
	}
	for _, j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	var res []exactResult
	for i, l := range loads {
		for k := range rateKinds {
			r := exactResult{load: l, kind: k}
			for m := range exactMultiples {
				var v []float64
				for _, o := range outs[i][k] {
					v = append(v, o.refused[m])
				}
				r.refused = append(r.refused, spreadOf(v))
			}
			var v []float64
			for _, o := range outs[i][k] {
				v = append(v, o.exact)
			}
			r.exact = spreadOf(v)
			res = append(res, r)
		}
	}
	return res, nil
}

// replayRate counts w's events one at a time in r, and returns, for each
// limit of exactMultiples, the share of the keys within it whose estimate
// went above it, and the share of keys whose final estimate is exact.
func replayRate(w *workload, r *limits.Rate) (refused []float64, exact float64, err error) {
	hashes := make([]uint64, len(w.keys))
	for i, k := range w.keys {
		hashes[i] = r.Hash([]byte(k))
	}
	top := make([]int64, len(w.keys))
	for _, i := range w.stream {
		top[i] = max(top[i], r.ObserveHash(hashes[i], 1))
	}
	med := median(w)
	for _, m := range exactMultiples {
		limit := m * med
		within, over := 0, 0
		for i, c := range w.counts {
			if c <= limit {
				within++
				if top[i] > limit {
					over++
				}
			}
		}
		refused = append(refused, float64(over)/float64(max(within, 1)))
	}
	n := 0
	for i, c := range w.counts {
		switch got := r.Peek(w.keys[i]); {
		case got < c:
			return nil, 0, fmt.Errorf("%s estimated %d, below its %d events", w.keys[i], got, c)
		case got == c:
			n++
		}
	}
	return refused, float64(n) / float64(len(w.counts)), nil
}

// exactSection writes the section on the default windows of a Rate.
func (r *accuracyReport) exactSection(w func(string, ...any)) {
	w("## The default windows of a Rate\n\n")
	w("`NewRate` without a `Sizing`, or with the zero one, counts each window exactly first, in 128 KiB: " +
		"a lock-free table of 1,024 lines of 64 bytes, 16 entries of a 16-bit key fingerprint and a 15-bit count each, " +
		"and a conservative 4 x 4096 sketch of 32-bit counters for the keys that find their line full (and for counts past 32,767). " +
		"A key with an entry is counted exactly. `Sizing{Hashes: 4, Slots: 4096, Conservative: true}` gives the former default, " +
		"count-min windows of a conservative 4 x 4096 sketch, in the same 256 KiB; the sections after this one measure count-min sketches, " +
		"which the `Estimator` is and which a `Rate` given hashes and slots, or an accuracy, counts in.\n\n")
	w("Each workload below is one window's events, replayed one at a time in a fixed shuffled order into a fresh `Rate`, "+
		"%d times with new random seeds, as a limiter with the limit L would see them: every event is counted, and refused if "+
		"`Observe` returns more than L. L is set near typical usage, at 2, 5 and 10 times the workload's median count. "+
		"**keys refused** is the share of the keys whose true count is at most L that were refused at least once; "+
		"**keys exact** the share whose final estimate is their true count.\n\n", r.exactTrials)
	for _, l := range exactKinds(r.exactLoads) {
		w("- **%s**: %s.\n", l.name, l.about)
	}
	w("\n")
	cols := []report.Column{report.Text("workload"), report.Num("keys"), report.Num("median"), report.Text("windows")}
	for _, m := range exactMultiples {
		cols = append(cols, report.Num(fmt.Sprintf("keys refused, L = %dx median", m)))
	}
	cols = append(cols, report.Num("keys exact"))
	t := report.NewTable(cols...)
	for _, res := range r.exact {
		l := res.load
		cells := []string{l.name, report.Group(int64(len(l.keys))), report.Group(median(l)), rateKinds[res.kind].name}
		for _, s := range res.refused {
			cells = append(cells, keysRefused(s))
		}
		cells = append(cells, keysRefused(res.exact))
		t.Row(cells...)
	}
	w("%s\n", t)
	if len(r.exactCosts) > 0 {
		t := report.NewTable(report.Text("windows"), report.Num(fmt.Sprintf("ns per `Observe`, %s keys", report.Group(int64(costKeys)))),
			report.Num(fmt.Sprintf("ns per `Observe`, %s keys", report.Group(int64(hotKeys)))))
		for k, c := range r.exactCosts {
			t.Row(rateKinds[k].name, report.Ns(c[0]), report.Ns(c[1]))
		}
		w("Timed one goroutine at a time in this run, as in the tables below; `go test -bench` in package limits compares them serially and from 8 goroutines (docs/PERFORMANCE.md).\n\n%s\n", t)
	}
}

// exactKinds returns one workload of each name among loads, in order.
func exactKinds(loads []*workload) []*workload {
	var out []*workload
	for _, l := range loads {
		if !slices.ContainsFunc(out, func(o *workload) bool { return o.name == l.name }) {
			out = append(out, l)
		}
	}
	return out
}

// timeExact times Observe on each kind of Rate, as timeObserve does on
// the candidates.
func timeExact() [][2]float64 {
	keys := observeKeys()
	var costs [][2]float64
	for _, k := range rateKinds {
		r := k.new()
		var ns [2]float64
		for i, ks := range [2][]string{keys, keys[:hotKeys]} {
			ns[i] = math.Inf(1)
			for range 3 {
				ns[i] = min(ns[i], timeCalls(r, ks))
			}
		}
		costs = append(costs, ns)
	}
	return costs
}
