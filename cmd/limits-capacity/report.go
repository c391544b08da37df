package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/limitsgo/limits/internal/report"
)

// knee is the analysis of a run's steps.
type knee struct {
	steps  []step // by concurrency
	budget time.Duration
	// suggest is the index of the step whose concurrency the tool
	// suggests, and out that of the first step out of the budget; -1 for
	// none.
	suggest, out int
	best         int // index of the step of highest throughput
}

// defaultBudget is the latency budget when none is given: 1.5 times p99,
// the 99th percentile of the first step, at least 1ms.
func defaultBudget(p99 time.Duration) time.Duration {
	return max(p99*3/2, time.Millisecond).Round(10 * time.Microsecond)
}

// analyse finds the knee of steps for the budget (0 means 1.5 times the
// 99th percentile of the first step run, as the driver sets it).
func analyse(steps []step, budget time.Duration) knee {
	if budget == 0 {
		budget = defaultBudget(steps[0].P99)
	}
	k := knee{steps: slices.Clone(steps), budget: budget, suggest: -1, out: -1}
	slices.SortFunc(k.steps, func(a, b step) int { return a.Concurrency - b.Concurrency })
	for i, s := range k.steps {
		if s.Throughput > k.steps[k.best].Throughput {
			k.best = i
		}
		if k.out >= 0 {
			continue
		}
		if within(s, budget) {
			k.suggest = i
		} else {
			k.out = i
		}
	}
	return k
}

// ms formats d in milliseconds.
func ms(d time.Duration) string { return report.Float(float64(d)/1e6, 2) + " ms" }

// reasoning returns the suggestion and why, in markdown.
func (k knee) reasoning() string {
	var b strings.Builder
	first := k.steps[0]
	best := k.steps[k.best]
	switch {
	case k.suggest < 0:
		fmt.Fprintf(&b, "**No suggestion.** The first step, %d at once, is already out of the %v budget (p99 %s, %d of %d failed): the budget is below what the service takes unloaded, or the service fails. Raise -budget, or look at the failures.\n",
			first.Concurrency, k.budget, ms(first.P99), first.Failed, first.Requests)
		return b.String()
	case k.out < 0:
		s := k.steps[k.suggest]
		fmt.Fprintf(&b, "**Suggested MaxInFlight: at least %d.** Latency stayed within the %v budget up to the most tried, %d at once (p99 %s): the knee lies higher. Raise -max to find it.\n",
			s.Concurrency, k.budget, s.Concurrency, ms(s.P99))
		return b.String()
	}
	s, o := k.steps[k.suggest], k.steps[k.out]
	fmt.Fprintf(&b, "**Suggested MaxInFlight: %d.**\n\n", s.Concurrency)
	fmt.Fprintf(&b, "- The 99th percentile stays within the %v budget up to %d requests at once (%s) and leaves it at %d (%s",
		k.budget, s.Concurrency, ms(s.P99), o.Concurrency, ms(o.P99))
	if o.Failed*100 > o.Requests {
		fmt.Fprintf(&b, ", with %s of requests failed", report.Percent(float64(o.Failed)/float64(o.Requests)))
	}
	b.WriteString("): past the knee, more requests at once queue rather than go faster.\n")
	fmt.Fprintf(&b, "- At %d at once the service answers %s requests a second, %s of the most measured (%s a second at %d at once).\n",
		s.Concurrency, report.Float(s.Throughput, 0), report.Percent(s.Throughput/best.Throughput), report.Float(best.Throughput, 0), best.Concurrency)
	if first.Concurrency == 1 && first.Mean > 0 {
		// Little's law: requests in service = throughput x time in service.
		fmt.Fprintf(&b, "- By Little's law, the most throughput times the latency of one request alone (%s) is %s requests in service at once: the capacity the service shows.\n",
			ms(first.Mean), report.Float(best.Throughput*first.Mean.Seconds(), 1))
	}
	if s.Throughput < 0.9*best.Throughput {
		b.WriteString("- The budget is tight: the suggestion gives up more than a tenth of the throughput. A larger budget lets more through, slower.\n")
	}
	b.WriteString("- A gate at this number refuses the rest at once (503) rather than letting them queue; measure again when the machine, the code or a dependency changes, or let package adaptive find it while the service runs.\n")
	return b.String()
}

// markdown returns the report: what was run, the table and the reasoning.
func (k knee) markdown(cfg config, took time.Duration, sent int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Knee of %s\n\n", cfg.url)
	fmt.Fprintf(&b, "%d steps of %v (the first tenth not measured), %s requests in %.1fs; latency budget for the 99th percentile: %v.\n\n",
		len(k.steps), cfg.step, report.Group(sent), took.Seconds(), k.budget)
	t := report.NewTable(report.Num("at once"), report.Num("requests"), report.Num("failed"), report.Num("per second"),
		report.Num("p50"), report.Num("p90"), report.Num("p99"), report.Text("budget"))
	for i, s := range k.steps {
		mark := "within"
		switch {
		case !within(s, k.budget):
			mark = "out"
		case i == k.suggest:
			mark = "within: suggested"
		}
		if i == k.out {
			mark = "out: the knee"
		}
		t.Row(fmt.Sprint(s.Concurrency), report.Group(int64(s.Requests)), report.Group(int64(s.Failed)), report.Float(s.Throughput, 1),
			ms(s.P50), ms(s.P90), ms(s.P99), mark)
	}
	b.WriteString(t.String())
	b.WriteString("\n")
	b.WriteString(k.reasoning())
	return b.String()
}

// chart returns an SVG chart of throughput and latency against
// concurrency.
func (k knee) chart(cfg config) []byte {
	thr := report.Key{Name: "requests a second", Color: "#2ca02c", Width: 2}
	p50 := report.Key{Name: "p50", Color: "#1b6fb5", Width: 1.5}
	p99 := report.Key{Name: "p99", Color: "#d62728", Width: 2}
	bud := report.Key{Name: "budget", Color: "#888888", Dash: "6 4"}
	var tp, lp50, lp99, lb []report.Point
	for _, s := range k.steps {
		x := float64(s.Concurrency)
		tp = append(tp, report.Point{X: x, Y: s.Throughput})
		lp50 = append(lp50, report.Point{X: x, Y: float64(s.P50) / 1e6})
		lp99 = append(lp99, report.Point{X: x, Y: float64(s.P99) / 1e6})
		lb = append(lb, report.Point{X: x, Y: float64(k.budget) / 1e6})
	}
	note := "No suggestion."
	if k.suggest >= 0 {
		note = fmt.Sprintf("Suggested MaxInFlight: %d.", k.steps[k.suggest].Concurrency)
	}
	c := report.LineChart{
		Chart: report.Chart{
			Title:    "Knee of " + cfg.url,
			Subtitle: "throughput and latency against requests at once",
			Legend:   []report.Key{thr, p50, p99, bud},
			Note:     note + " go run ./cmd/limits-capacity",
		},
		X: report.Axis{Label: "requests at once", Log: 2, Tick: func(v float64) string { return report.Float(v, 0) }},
	}
	// The panels of a chart share their axes, and throughput and latency
	// need their own: draw two charts, and set them side by side.
	c.Y = report.Axis{Label: "requests a second", Tick: func(v float64) string { return report.Float(v, 0) }}
	c.Panels = []report.Panel{{Title: "throughput", Lines: []report.Line{{Key: thr, Points: tp}}}}
	left := c.SVG()
	// A power of ten at the foot, where a tick falls (report draws values
	// below Axis.Min at Min, ticks included).
	lowest := float64(k.budget) / 1e6
	for _, p := range lp50 {
		lowest = min(lowest, p.Y)
	}
	foot := math.Pow(10, math.Floor(math.Log10(max(lowest, 1e-3))))
	c.Y = report.Axis{Label: "latency, ms", Log: 10, Min: foot, Tick: func(v float64) string { return report.Float(v, 2) }}
	c.Panels = []report.Panel{{Title: "latency", Lines: []report.Line{{Key: bud, Points: lb}, {Key: p50, Points: lp50}, {Key: p99, Points: lp99}}}}
	right := c.SVG()
	return sideBySide(left, right)
}

// sideBySide returns an SVG document that shows the SVG documents left
// and right next to each other.
func sideBySide(left, right []byte) []byte {
	lw, lh := size(left)
	rw, rh := size(right)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g">`+"\n", lw+rw, max(lh, rh), lw+rw, max(lh, rh))
	b.WriteString(strings.Replace(string(left), "<svg ", `<svg x="0" y="0" `, 1))
	b.WriteString(strings.Replace(string(right), "<svg ", fmt.Sprintf(`<svg x="%g" y="0" `, lw), 1))
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// size returns the width and height of an SVG document written by package
// report.
func size(doc []byte) (w, h float64) {
	s := string(doc)
	fmt.Sscanf(s[strings.Index(s, ` width="`)+len(` width="`):], "%g", &w)
	fmt.Sscanf(s[strings.Index(s, ` height="`)+len(` height="`):], "%g", &h)
	return w, h
}
