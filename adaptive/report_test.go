package adaptive_test

import (
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/adaptive/internal/sim"
	"github.com/limitsgo/limits/internal/report"
)

var reportDir = flag.String("report", "", "write the simulation's charts to this directory, and its tables to capacity-sim.md there")

// TestReport writes the charts and tables of docs/CAPACITY.md:
//
//	go test ./adaptive -run TestReport -report docs
//
// It takes about 35 seconds.
func TestReport(t *testing.T) {
	if *reportDir == "" {
		t.Skip("no -report directory")
	}
	const d = 30 * time.Second
	var md strings.Builder
	ms := func(v time.Duration) string { return report.Float(float64(v)/1e6, 1) }

	// Convergence, and a capacity that halves.
	type run struct {
		title   string
		s       scenario
		settled time.Duration
		res     *sim.Result
	}
	half := []sim.Change{{At: d / 2, Servers: servers / 2}}
	runs := []run{
		{title: "start 10x too low (2)", s: scenario{front: front{Limit: servers / 10, Adapt: true}, load: 2, d: d}},
		{title: "start 10x too high (200)", s: scenario{front: front{Limit: 10 * servers, Adapt: true}, load: 2, d: d}},
		{title: "capacity halves at 15s", s: scenario{front: front{Limit: servers, Adapt: true}, load: 2, d: d, changes: half}},
	}
	chart := report.LineChart{
		Chart: report.Chart{
			Title:    "Adaptive gate: the limit against the capacity",
			Subtitle: "simulated service of 20 workers, 10ms exponential service times, Poisson load at twice its capacity",
			Legend: []report.Key{
				{Name: "limit (Gradient law)", Color: "#1b6fb5", Width: 2},
				{Name: "capacity", Color: "#888888", Dash: "6 4"},
			},
			Note: "Dips are the baseline probes, every 30s and at the start. go test ./adaptive -run TestReport -report docs",
		},
		X: report.Axis{Label: "seconds"},
		Y: report.Axis{Label: "requests in flight", Log: 10, Min: 1, Tick: func(v float64) string { return report.Float(v, 0) }},
	}
	tab := report.NewTable(report.Text("scenario"), report.Num("settled within 20% after"), report.Num("mean limit"), report.Num("p50 ms"), report.Num("p99 ms"), report.Num("admitted /s"))
	for i := range runs {
		r := &runs[i]
		r.res, _ = simulate(t, r.s)
		capAt := func(at time.Duration) float64 {
			if r.s.changes != nil && at >= r.s.changes[0].At {
				return servers / 2
			}
			return servers
		}
		from := time.Duration(0)
		if r.s.changes != nil {
			from = r.s.changes[0].At
		}
		c := int(capAt(from))
		r.settled = settled(r.res, from, c*8/10, c*12/10)
		var lim, capLine []report.Point
		sum, n := 0, 0
		for _, b := range r.res.Buckets {
			x := b.End.Seconds()
			lim = append(lim, report.Point{X: x, Y: float64(b.Limit)})
			capLine = append(capLine, report.Point{X: x, Y: capAt(b.End - 1)})
			if b.End > from+r.settled && !b.Probing {
				sum += b.Limit
				n++
			}
		}
		chart.Panels = append(chart.Panels, report.Panel{Title: r.title, Lines: []report.Line{
			{Key: chart.Legend[1], Points: capLine},
			{Key: chart.Legend[0], Points: lim},
		}})
		s := r.res.Summarize(from+r.settled, d)
		tab.Row(r.title, fmt.Sprintf("%.2fs", r.settled.Seconds()), report.Float(float64(sum)/float64(n), 1)+fmt.Sprintf(" (C = %d)", c), ms(s.P50), ms(s.P99), report.Float(s.Throughput, 0))
	}
	write(t, "capacity-sim.svg", chart.SVG())
	base := unloaded(t)
	fmt.Fprintf(&md, "Unloaded (half the capacity): p50 %s ms, p99 %s ms, mean %s ms.\n\n%s\n", ms(base.P50), ms(base.P99), ms(base.Mean), tab)

	// Every front at every load.
	fronts := []struct {
		name string
		f    front
		to   time.Duration // the service's queue timeout
	}{
		{"no gate", front{}, 0},
		{"fixed 20 (right)", front{Limit: servers}, 0},
		{"fixed 40 (2x too high)", front{Limit: 2 * servers}, 0},
		{"fixed 80 (4x too high)", front{Limit: 4 * servers}, 0},
		{"adaptive, Gradient", front{Limit: servers, Adapt: true}, 0},
		{"adaptive, Vegas", front{Limit: servers, Adapt: true, Law: adaptive.Vegas{}}, 0},
		{"fixed 20, wait 5ms", front{Limit: servers, Wait: 5 * time.Millisecond}, 0},
		{"fixed 20, adapted wait 5ms", front{Limit: servers, Wait: 5 * time.Millisecond, AdaptWait: true}, 0},
		{"adaptive, adapted wait 5ms", front{Limit: servers, Adapt: true, Wait: 5 * time.Millisecond, AdaptWait: true}, 0},
		{"fixed 80, service fails waits over 20ms", front{Limit: 4 * servers}, 20 * time.Millisecond},
		{"adaptive AIMD, service fails waits over 20ms", front{Limit: 4 * servers, Adapt: true, Law: adaptive.AIMD{}}, 20 * time.Millisecond},
	}
	tab = report.NewTable(report.Text("front"), report.Num("load"), report.Num("admitted /s"), report.Num("refused"), report.Num("failed"),
		report.Num("p50 ms"), report.Num("p99 ms"), report.Num("refused at once"), report.Num("refusal wait p99 ms"))
	lat := report.LineChart{
		Chart: report.Chart{
			Title:    "Latency of admitted requests at twice the capacity",
			Subtitle: "the same simulated service; percentiles of each quarter second, by when requests ended",
			Note:     "A fixed gate set too high holds the median wait near (limit/capacity - 1) service times; without a gate latency grows without bound.",
		},
		X: report.Axis{Label: "seconds"},
		Y: report.Axis{Label: "latency, ms", Log: 10, Min: 1, Tick: func(v float64) string { return report.Float(v, 0) }},
	}
	colors := map[string]string{"no gate": "#d62728", "fixed 20 (right)": "#2ca02c", "fixed 40 (2x too high)": "#ff7f0e", "fixed 80 (4x too high)": "#9467bd", "adaptive, Gradient": "#1b6fb5"}
	var lines, medians []report.Line
	for _, f := range fronts {
		for _, load := range []float64{0.5, 1, 2, 4} {
			if f.f.Limit == 0 && load > 1 {
				// Without a gate the run would queue without bound: ten
				// seconds show it.
				res, _ := simulate(t, scenario{front: f.f, load: load, d: 10 * time.Second})
				s := res.Summarize(2*time.Second, 5*time.Second)
				tab.Row(f.name, fmt.Sprintf("%gx", load), report.Float(s.Throughput, 0), "0%", "0%", ms(s.P50)+" (growing)", ms(s.P99)+" (growing)", "", "")
				if load == 2 {
					lines = append(lines, pLine(f.name, colors[f.name], res, false))
					medians = append(medians, pLine(f.name, colors[f.name], res, true))
				}
				continue
			}
			res, _ := simulate(t, scenario{front: f.f, load: load, d: 20 * time.Second, timeout: f.to})
			s := res.Summarize(5*time.Second, 20*time.Second)
			failed, refused, fast := 0, 0, 0
			var waits []time.Duration
			for _, q := range res.Requests {
				if q.Arrive < 5*time.Second {
					continue
				}
				if q.Failed {
					failed++
				}
				if !q.Admitted {
					refused++
					waits = append(waits, q.Wait)
					if q.Wait == 0 {
						fast++
					}
				}
			}
			atOnce, waitP99 := "", ""
			if refused > 0 {
				atOnce = report.Percent(float64(fast) / float64(refused))
				waitP99 = ms(report.Percentile(waits, 0.99))
			}
			tab.Row(f.name, fmt.Sprintf("%gx", load), report.Float(s.Throughput, 0), report.Percent(float64(s.Refused)/float64(s.Arrived)),
				report.Percent(float64(failed)/float64(max(s.Admitted, 1))), ms(s.P50), ms(s.P99), atOnce, waitP99)
			if c, ok := colors[f.name]; ok && load == 2 {
				lines = append(lines, pLine(f.name, c, res, false))
				medians = append(medians, pLine(f.name, c, res, true))
			}
		}
	}
	for _, l := range lines {
		lat.Legend = append(lat.Legend, l.Key)
	}
	lat.Panels = []report.Panel{{Title: "median (p50)", Lines: medians}, {Title: "99th percentile", Lines: lines}}
	write(t, "capacity-latency.svg", lat.SVG())
	fmt.Fprintf(&md, "\n%s", tab)
	write(t, "capacity-sim.md", []byte(md.String()))
}

// pLine returns the median or 99th percentile latency of each step of
// res.
func pLine(name, color string, res *sim.Result, median bool) report.Line {
	l := report.Line{Key: report.Key{Name: name, Color: color, Width: 1.5}}
	for _, b := range res.Buckets {
		v := b.P99
		if median {
			v = b.P50
		}
		if v > 0 {
			l.Points = append(l.Points, report.Point{X: b.End.Seconds(), Y: float64(v) / 1e6})
		}
	}
	return l
}

func write(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := report.WriteFile(filepath.Join(*reportDir, name), data); err != nil {
		t.Fatal(err)
	}
}

// TestReportMatrix writes the table of docs/CAPACITY.md that runs every
// law before every service of capacities, with every shape of service
// time, to capacity-matrix.md in the -report directory:
//
//	go test ./adaptive -run TestReportMatrix -report docs
//
// It takes about three minutes.
func TestReportMatrix(t *testing.T) {
	if *reportDir == "" {
		t.Skip("no -report directory")
	}
	const d = 20 * time.Second
	laws := []struct {
		name    string
		law     adaptive.Law
		timeout bool // the service fails requests that wait a mean service time
	}{
		{"Gradient", nil, false},
		{"Vegas", adaptive.Vegas{}, false},
		{"AIMD, service fails long waits", adaptive.AIMD{}, true},
	}
	tab := report.NewTable(report.Text("law"), report.Num("C"), report.Text("service"),
		report.Num("from C/10: limit"), report.Num("settled after"),
		report.Num("from 10C: limit"), report.Num("settled after"),
		report.Num("C halved: limit"), report.Num("settled after"),
		report.Num("p99 / unloaded p99"), report.Num("goodput"), report.Num("refused at 0.7x"))
	after := func(v time.Duration, in time.Duration) string {
		if v < 0 {
			return fmt.Sprintf("not in %v", in)
		}
		return report.Float(v.Seconds(), 2) + " s"
	}
	for _, l := range laws {
		for _, cc := range capacities {
			for _, dist := range sim.Dists {
				var timeout time.Duration
				if l.timeout {
					timeout = meanOf(cc.C)
				}
				var cells []string
				p99, goodput := 0.0, 2.0
				for _, init := range []int{max(cc.C/10, 1), 10 * cc.C} {
					r := capRun{law: l.law, c: cc.C, dist: dist, initial: init, load: 2, d: d, timeout: timeout}
					res, _ := r.run(t)
					o := r.measure(res, 0, cc.C)
					cells = append(cells, report.Float(o.limit, 1), after(o.settle, d))
					p99, goodput = max(p99, o.p99), min(goodput, o.goodput)
				}
				// The capacity halved after 10s, from C.
				r := capRun{law: l.law, c: cc.C, dist: dist, initial: cc.C, load: 2, d: d, timeout: timeout,
					changes: []sim.Change{{At: d / 2, Servers: max(cc.C/2, 1)}}}
				res, _ := r.run(t)
				half := r.measure(res, d/2, max(cc.C/2, 1))
				cells = append(cells, report.Float(half.limit, 1), after(half.settle, d/2))
				r = capRun{law: l.law, c: cc.C, dist: dist, initial: cc.C, load: 0.7, d: d, timeout: timeout}
				res, _ = r.run(t)
				light := r.measure(res, 0, cc.C)
				tab.Row(append(append([]string{l.name, fmt.Sprint(cc.C), fmt.Sprintf("%v, %v", dist, meanOf(cc.C))}, cells...),
					report.Float(p99, 2), report.Percent(goodput), report.Percent(light.refused))...)
			}
		}
	}
	write(t, "capacity-matrix.md", []byte(tab.String()))
}
