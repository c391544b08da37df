package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/perf/benchfmt"
)

// sampleKeys is benchmark output as measure saved it before BenchmarkHTTP:
// meta lines, two rounds of output for three structures at GOMAXPROCS 1
// and 2, and a line of another benchmark that must be ignored.
const sampleKeys = `report-date: 2026-01-02 03:04 UTC
report-cpu-model: Test CPU 3000
report-cores: 2
report-os-arch: linux/amd64
report-go: go1.26.0
report-rounds: 2
report-benchtime: 300ms
report-cpus: 1,2
report-loadavg-start: 0.10, 0.20, 0.30
goos: linux
goarch: amd64
pkg: github.com/limitsgo/limits/bench
cpu: Test CPU
BenchmarkKeys1M/MutexMap/serial         	 1000000	       100.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/MutexMap/serial-2       	 1000000	       110.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/MutexMap/parallel       	 1000000	       120.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/MutexMap/parallel-2     	 1000000	       200.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/Estimator/serial-2      	 1000000	        22.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/Estimator/parallel-2    	 1000000	        10.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/Ulule/serial-2          	 1000000	       550.0 ns/op	      32 B/op	       2 allocs/op
BenchmarkOther/MutexMap/serial-2        	 1000000	         1.0 ns/op
goos: linux
goarch: amd64
pkg: github.com/limitsgo/limits/bench
cpu: Test CPU
BenchmarkKeys1M/MutexMap/serial         	 1000000	       104.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/MutexMap/serial-2       	 1000000	       130.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/MutexMap/parallel       	 1000000	       124.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/MutexMap/parallel-2     	 1000000	       300.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/Estimator/serial-2      	 1000000	        24.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/Estimator/parallel-2    	 1000000	        14.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/Ulule/serial-2          	 1000000	       650.0 ns/op	      32 B/op	       2 allocs/op
`

// sampleEnd are the meta lines measure writes after the benchmarks.
const sampleEnd = `report-loadavg-end: 0.40, 0.50, 0.60
report-seconds: 200
`

// sampleHTTP is the output of two rounds of BenchmarkHTTP at GOMAXPROCS 2,
// with its meta line; httprate has no parallel result in the second.
const sampleHTTP = `report-http-benchtime: 500000x
BenchmarkHTTP/Bare/serial-2                 	  500000	         6.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHTTP/Bare/parallel-2               	  500000	         4.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHTTP/HttplimitRate/serial-2        	  500000	       270.0 ns/op	      96 B/op	       3 allocs/op
BenchmarkHTTP/HttplimitRate/parallel-2      	  500000	       180.0 ns/op	      96 B/op	       3 allocs/op
BenchmarkHTTP/HttplimitGateRate/serial-2    	  500000	       420.0 ns/op	     480 B/op	       5 allocs/op
BenchmarkHTTP/HttplimitGateRate/parallel-2  	  500000	       300.0 ns/op	     480 B/op	       5 allocs/op
BenchmarkHTTP/HttprateLimitByIP/serial-2    	  500000	       550.0 ns/op	     168 B/op	      10 allocs/op
BenchmarkHTTP/HttprateLimitByIP/parallel-2  	  500000	       360.0 ns/op	     168 B/op	      10 allocs/op
BenchmarkHTTP/Bare/serial-2                 	  500000	         8.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHTTP/Bare/parallel-2               	  500000	         4.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkHTTP/HttplimitRate/serial-2        	  500000	       280.0 ns/op	      96 B/op	       3 allocs/op
BenchmarkHTTP/HttplimitRate/parallel-2      	  500000	       190.0 ns/op	      96 B/op	       3 allocs/op
BenchmarkHTTP/HttplimitGateRate/serial-2    	  500000	       440.0 ns/op	     480 B/op	       5 allocs/op
BenchmarkHTTP/HttplimitGateRate/parallel-2  	  500000	       320.0 ns/op	     480 B/op	       5 allocs/op
BenchmarkHTTP/HttprateLimitByIP/serial-2    	  500000	       570.0 ns/op	     168 B/op	      10 allocs/op
`

// sampleBench is the output of a whole run, HTTP benchmarks included.
const sampleBench = sampleKeys + sampleHTTP + sampleEnd

const sampleMemory = `{"structure":"MutexMap","keys":1000000,"heap_bytes":73400320}
{"structure":"Estimator","keys":1000000,"heap_bytes":33792}
`

// sampleLimiterKeys are two rounds of BenchmarkKeys1M for the GCRA and
// two peers at GOMAXPROCS 2, to read with sampleKeys.
const sampleLimiterKeys = `BenchmarkKeys1M/GCRA/serial-2          	 1000000	       240.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/GCRA/parallel-2        	 1000000	       140.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/XTimeRate/serial-2     	 1000000	       280.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/XTimeRate/parallel-2   	 1000000	       300.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/GoLimiter/serial-2     	 1000000	       260.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/GoLimiter/parallel-2   	 1000000	       150.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/GCRA/serial-2          	 1000000	       260.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/GCRA/parallel-2        	 1000000	       150.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/XTimeRate/serial-2     	 1000000	       300.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/XTimeRate/parallel-2   	 1000000	       320.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/GoLimiter/serial-2     	 1000000	       270.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkKeys1M/GoLimiter/parallel-2   	 1000000	       160.0 ns/op	       0 B/op	       0 allocs/op
`

// sampleChurn is two rounds of BenchmarkChurn1M at GOMAXPROCS 2.
const sampleChurn = `BenchmarkChurn1M/MutexMap/serial-2      	 1000000	       100.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkChurn1M/MutexMap/parallel-2    	 1000000	       150.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkChurn1M/GCRA/serial-2          	 1000000	        80.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkChurn1M/GCRA/parallel-2        	 1000000	        60.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkChurn1M/XTimeRate/serial-2     	 1000000	       300.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkChurn1M/XTimeRate/parallel-2   	 1000000	       400.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkChurn1M/Ulule/serial-2         	 1000000	       700.0 ns/op	      32 B/op	       2 allocs/op
BenchmarkChurn1M/Ulule/parallel-2       	 1000000	       400.0 ns/op	      32 B/op	       2 allocs/op
BenchmarkChurn1M/MutexMap/serial-2      	 1000000	       120.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkChurn1M/MutexMap/parallel-2    	 1000000	       170.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkChurn1M/GCRA/serial-2          	 1000000	        90.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkChurn1M/GCRA/parallel-2        	 1000000	        70.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkChurn1M/XTimeRate/serial-2     	 1000000	       320.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkChurn1M/XTimeRate/parallel-2   	 1000000	       420.0 ns/op	       0 B/op	       0 allocs/op
BenchmarkChurn1M/Ulule/serial-2         	 1000000	       800.0 ns/op	      32 B/op	       2 allocs/op
BenchmarkChurn1M/Ulule/parallel-2       	 1000000	       500.0 ns/op	      32 B/op	       2 allocs/op
`

// sampleLatency is two rounds of BenchmarkLatency1M at GOMAXPROCS 2, as go
// test prints its metrics (in the order of their units), with its meta
// line. The GCRA also ran once at GOMAXPROCS 1, and ulule/limiter only in
// the first round and never with churning keys.
const sampleLatency = `report-latency-cpus: 1,2
BenchmarkLatency1M/MutexMap-2           	 1000000	       450.0 ns/op	    100000 max-ns	       250.0 p50-ns	       800.0 p99-ns	      4000 p99.9-ns	       0 B/op	       0 allocs/op
BenchmarkLatency1M/GCRA                 	 1000000	       999.0 ns/op	    999000 max-ns	       999.0 p50-ns	       999.0 p99-ns	       999 p99.9-ns	       0 B/op	       0 allocs/op
BenchmarkLatency1M/GCRA-2               	 1000000	       350.0 ns/op	    150000 max-ns	       240.0 p50-ns	       600.0 p99-ns	      3800 p99.9-ns	       0 B/op	       0 allocs/op
BenchmarkLatency1M/GCRA/churn-2         	 1000000	       250.0 ns/op	    280000 max-ns	       130.0 p50-ns	       500.0 p99-ns	      3600 p99.9-ns	       0 B/op	       0 allocs/op
BenchmarkLatency1M/Ulule-2              	 1000000	       900.0 ns/op	    200000 max-ns	       640.0 p50-ns	      3700 p99-ns	      7000 p99.9-ns	      32 B/op	       2 allocs/op
BenchmarkLatency1M/MutexMap-2           	 1000000	       460.0 ns/op	    300000 max-ns	       270.0 p50-ns	       900.0 p99-ns	      5000 p99.9-ns	       0 B/op	       0 allocs/op
BenchmarkLatency1M/GCRA-2               	 1000000	       360.0 ns/op	    250000 max-ns	       260.0 p50-ns	       700.0 p99-ns	      4200 p99.9-ns	       0 B/op	       0 allocs/op
BenchmarkLatency1M/GCRA/churn-2         	 1000000	       260.0 ns/op	    600000 max-ns	       140.0 p50-ns	       520.0 p99-ns	      3800 p99.9-ns	       0 B/op	       0 allocs/op
BenchmarkLatency1M/Other/churn/x-2      	 1000000	         1.0 ns/op	         1 max-ns
`

// sampleGCRAMemory is the memory program's line for the GCRA.
const sampleGCRAMemory = `{"structure":"GCRA","keys":1000000,"heap_bytes":37748736}
`

// sampleFull is the output of a whole run with every benchmark.
const sampleFull = sampleKeys + sampleLimiterKeys + sampleChurn + sampleLatency + sampleHTTP + sampleEnd

func fullReport(t *testing.T) *benchReport {
	t.Helper()
	r, err := newReport([]byte(sampleFull), []byte(sampleMemory+sampleGCRAMemory))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func sampleReport(t *testing.T) *benchReport {
	t.Helper()
	r, err := newReport([]byte(sampleBench), []byte(sampleMemory))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestParseName(t *testing.T) {
	tests := []struct {
		name  string
		bench string
		want  cell
		ok    bool
	}{
		{"Keys1M/MutexMap/serial", keysBench, cell{"MutexMap", serial, 1}, true},
		{"Keys1M/GCRA/parallel-2", keysBench, cell{"GCRA", parallel, 2}, true},
		{"Keys1M/GCRA/parallel-16", keysBench, cell{"GCRA", parallel, 16}, true},
		{"HTTP/HttplimitRate/serial-2", httpBench, cell{"HttplimitRate", serial, 2}, true},
		{"Churn1M/GCRA/serial-2", churnBench, cell{"GCRA", serial, 2}, true},
		{"Churn1M/MutexMap/parallel", churnBench, cell{"MutexMap", parallel, 1}, true},
		{"Latency1M/GCRA-2", "", cell{}, false},
		{"Keys1M/GCRA/serial-x", "", cell{}, false},
		{"Keys1M/GCRA/other-2", "", cell{}, false},
		{"Keys1M/GCRA-2", "", cell{}, false},
		{"HTTP/Bare-2", "", cell{}, false},
		{"Other/GCRA/serial-2", "", cell{}, false},
	}
	for _, tt := range tests {
		bench, got, ok := parseName(benchfmt.Name(tt.name))
		if bench != tt.bench || got != tt.want || ok != tt.ok {
			t.Errorf("parseName(%q) = %q, %+v, %v; want %q, %+v, %v", tt.name, bench, got, ok, tt.bench, tt.want, tt.ok)
		}
	}
}

func TestParseLatencyName(t *testing.T) {
	tests := []struct {
		name string
		want latencyCell
		ok   bool
	}{
		{"Latency1M/GCRA-2", latencyCell{"GCRA", false, 2}, true},
		{"Latency1M/GCRA", latencyCell{"GCRA", false, 1}, true},
		{"Latency1M/Ulule/churn-2", latencyCell{"Ulule", true, 2}, true},
		{"Latency1M/Ulule/churn", latencyCell{"Ulule", true, 1}, true},
		{"Latency1M/Ulule/other-2", latencyCell{}, false},
		{"Latency1M/Ulule/churn/x-2", latencyCell{}, false},
		{"Latency1M-2", latencyCell{}, false},
		{"Keys1M/GCRA/serial-2", latencyCell{}, false},
	}
	for _, tt := range tests {
		got, ok := parseLatencyName(benchfmt.Name(tt.name))
		if got != tt.want || ok != tt.ok {
			t.Errorf("parseLatencyName(%q) = %+v, %v; want %+v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	}
	for _, tt := range tests {
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestParseBench(t *testing.T) {
	res, err := parseBench(strings.NewReader(sampleBench))
	if err != nil {
		t.Fatal(err)
	}
	if res.cpu != "Test CPU" {
		t.Errorf("cpu = %q, want %q", res.cpu, "Test CPU")
	}
	if len(res.cells) != 7 {
		t.Errorf("%d cells, want 7: %v", len(res.cells), res.cells)
	}
	s := res.cells[cell{"MutexMap", serial, 2}]
	if s == nil || len(s.ns) != 2 || math.Abs(s.ns[0]-110) > 1e-9 || math.Abs(s.ns[1]-130) > 1e-9 {
		t.Fatalf("MutexMap serial at 2 = %+v, want ns [110 130]", s)
	}
	if u := res.cells[cell{"Ulule", serial, 2}]; u == nil || median(u.allocs) != 2 || median(u.bytes) != 32 {
		t.Errorf("Ulule allocs and bytes = %+v, want 2 and 32", u)
	}
	if len(res.http) != 8 {
		t.Errorf("%d HTTP cells, want 8: %v", len(res.http), res.http)
	}
	if h := res.http[cell{"HttplimitRate", parallel, 2}]; h == nil || median(h.ns) != 185 || median(h.bytes) != 96 {
		t.Errorf("HttplimitRate parallel at 2 = %+v, want ns 185, 96 B", h)
	}
	if _, err := parseBench(strings.NewReader("BenchmarkOther-2 1 1.0 ns/op\n")); err == nil {
		t.Error("parseBench of output without Keys1M results succeeded")
	}
}

func TestParseChurnAndLatency(t *testing.T) {
	res, err := parseBench(strings.NewReader(sampleFull))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.cells) != 13 || len(res.churn) != 8 || len(res.latency) != 5 || len(res.http) != 8 {
		t.Errorf("%d Keys1M, %d Churn1M, %d Latency1M and %d HTTP cells, want 13, 8, 5 and 8",
			len(res.cells), len(res.churn), len(res.latency), len(res.http))
	}
	if c := res.churn[cell{"GCRA", parallel, 2}]; c == nil || median(c.ns) != 65 {
		t.Errorf("Churn1M GCRA parallel at 2 = %+v, want ns 65", c)
	}
	if c := res.churn[cell{"Ulule", serial, 2}]; c == nil || median(c.allocs) != 2 {
		t.Errorf("Churn1M Ulule serial at 2 = %+v, want 2 allocs", c)
	}
	// The metrics are read in ns, as printed, not in the seconds benchfmt
	// tidies them to.
	l := res.latency[latencyCell{"GCRA", true, 2}]
	if l == nil || !slices.Equal(l.p50, []float64{130, 140}) || !slices.Equal(l.p99, []float64{500, 520}) ||
		!slices.Equal(l.p999, []float64{3600, 3800}) || !slices.Equal(l.max, []float64{280000, 600000}) {
		t.Errorf("Latency1M GCRA churning at 2 = %+v", l)
	}
	if l := res.latency[latencyCell{"Ulule", false, 2}]; l == nil || len(l.p50) != 1 || median(l.allocs) != 2 {
		t.Errorf("Latency1M Ulule at 2 = %+v, want one run with 2 allocs", l)
	}
	if l := res.latency[latencyCell{"GCRA", false, 1}]; l == nil || len(l.max) != 1 || l.max[0] != 999000 {
		t.Errorf("Latency1M GCRA at 1 = %+v", l)
	}
}

func TestParseMemory(t *testing.T) {
	heap, err := parseMemory([]byte(sampleMemory + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if heap["MutexMap"] != 73400320 || heap["Estimator"] != 33792 || len(heap) != 2 {
		t.Errorf("parseMemory = %v", heap)
	}
	if _, err := parseMemory([]byte("not json\n")); err == nil {
		t.Error("parseMemory of a bad line succeeded")
	}
}

func TestMarkdown(t *testing.T) {
	r := sampleReport(t)
	if r.machine.CPU != "Test CPU 3000" || r.machine.Cores != 2 || r.settings.Rounds != 2 {
		t.Errorf("machine %+v, settings %+v", r.machine, r.settings)
	}
	md := string(r.markdown())
	for _, want := range []string{
		"2026-01-02 03:04 UTC",
		"Test CPU 3000, 2 logical CPUs, linux/amd64, go1.26.0",
		"0.10, 0.20, 0.30 before the run and 0.40, 0.50, 0.60 after it",
		"medians of 2 runs (`-benchtime 300ms",
		// Medians: mutex map 120 serial and 250 parallel; the Estimator
		// 23 and 12; heap 70 MiB and 33 KiB.
		"| `sync.Mutex + map` | 120 | 1.00 | 250 | 1.00 | 0 | 70 MiB | 1.00 |",
		"| **`limits.Estimator`** | 23.0 | 0.19 | 12.0 | 0.048 | 0 | 33 KiB | 0.00046 |",
		"| `ulule/limiter memory` | 600 | 5.00 | n/a | n/a | 2 | n/a | n/a |",
		"| `sync.Mutex + map` | 1 | serial | 102 | 100–104 | 2 | 1.00 | 0 |",
		"Allocations per call: `ulule/limiter memory` (2)",
		"(200 s in all for this run)",
		"![Time per call](charts/ns-per-op.svg)",
		// HTTP: medians bare 7 and 4; httplimit 275 and 185, overheads
		// 268 and 181; with a gate 430 and 310, overheads 423 and 306;
		// httprate 560 and 360 (one run), overheads 553 and 356.
		"## HTTP middleware at GOMAXPROCS=2",
		"![Overhead per request](charts/http.svg)",
		"| `bare handler` | 7.0 | – | – | 4.0 | – | – | 0 | 0 |",
		"| **`httplimit Rate`** | 275 | 268 | 0.48 | 185 | 181 | 0.51 | 3 | 96 |",
		"| **`httplimit Gate + Rate`** | 430 | 423 | 0.76 | 310 | 306 | 0.86 | 5 | 480 |",
		"| `httprate LimitByIP` | 560 | 553 | 1.00 | 360 | 356 | 1.00 | 10 | 168 |",
		"httplimit adds 268 ns per request from one goroutine and 181 ns from 8, where httprate's `LimitByIP` adds 553 and 356 ns: " +
			"0.48 and 0.51 times its overhead, with 3 allocations per request against 10.",
		"The gate adds 155 ns per request from one goroutine and 125 ns from 8, and 2 allocations (384 bytes)",
		"| `httprate LimitByIP` | 2 | parallel | 360 | 360–360 | 1 | 356 | 1.00 | 10 | 168 |",
		"1,024 client addresses",
		"1,000,000 requests a minute per address",
		"medians of 2 runs (`-benchtime 500000x`)",
		"### HTTP middleware",
		"| **`httplimit Rate`** | 2 | parallel | 185 | 180–190 | 2 | 181 | 0.51 | 3 | 96 |",
		"one running `BenchmarkHTTP` (`-benchtime 500000x -cpu 1,2`)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("BENCHMARKS.md lacks %q:\n%s", want, md)
		}
	}
}

// TestMarkdownWithoutHTTP checks that results saved before BenchmarkHTTP
// existed still render, without its section.
func TestMarkdownWithoutHTTP(t *testing.T) {
	r, err := newReport([]byte(sampleKeys+sampleEnd), []byte(sampleMemory))
	if err != nil {
		t.Fatal(err)
	}
	md := string(r.markdown())
	for _, unwanted := range []string{"## HTTP middleware", "http.svg", "`BenchmarkHTTP`", "LimitByIP"} {
		if strings.Contains(md, unwanted) {
			t.Errorf("BENCHMARKS.md without HTTP results mentions %q:\n%s", unwanted, md)
		}
	}
	if !strings.Contains(md, "runs `BenchmarkKeys1M` 2 times") {
		t.Errorf("BENCHMARKS.md does not say how BenchmarkKeys1M ran:\n%s", md)
	}
}

// TestMarkdownLimiters checks the sections on churning keys, on the
// latency of one call and on the GCRA's goals.
func TestMarkdownLimiters(t *testing.T) {
	r := fullReport(t)
	md := string(r.markdown())
	for _, want := range []string{
		// Churn1M medians: the mutex map 110 and 160, the GCRA 85 and 65,
		// x/time/rate 310 and 410, ulule/limiter 750 and 450.
		"## Churning keys at GOMAXPROCS=2",
		"![Time per call with churning keys](charts/churn.svg)",
		"| structure | ns/op | vs. mutex map | parallel ns/op | vs. mutex map | allocs/op |",
		"| `sync.Mutex + map` | 110 | 1.00 | 160 | 1.00 | 0 |",
		"| **`limits.GCRA`** | 85.0 | 0.77 | 65.0 | 0.41 | 0 |",
		"| `x/time/rate` | 310 | 2.82 | 410 | 2.56 | 0 |",
		"| `ulule/limiter memory` | 750 | 6.82 | 450 | 2.81 | 2 |",
		"- **`limits.GCRA`** (`GCRA`): `NewGCRA(1, time.Millisecond)`.",
		"- `sync.Mutex + map` (`MutexMap`): its configuration above",
		// Latency1M at GOMAXPROCS 2: medians of the percentiles and of
		// the maxima.
		"## Latency of one call at GOMAXPROCS=2",
		"clock reads",
		"| structure | p50 | p99 | p99.9 | max | churning p50 | p99 | p99.9 | max |",
		"| `sync.Mutex + map` | 260 | 850 | 4,500 | 200,000 | n/a | n/a | n/a | n/a |",
		"| **`limits.GCRA`** | 250 | 650 | 4,000 | 200,000 | 135 | 510 | 3,700 | 440,000 |",
		"| `ulule/limiter memory` | 640 | 3,700 | 7,000 | 200,000 | n/a | n/a | n/a | n/a |",
		"### Latency of one call",
		"| **`limits.GCRA`** | 1 | live | 999 | 999 | 999 | 999–999 | 999,000 | 999,000 | 1 | 0 |",
		"| **`limits.GCRA`** | 2 | churning | 135 | 510 | 3,700 | 3,600–3,800 | 440,000 | 600,000 | 2 | 0 |",
		"### Churning keys",
		"| `x/time/rate` | 2 | parallel | 410 | 400–420 | 2 | 2.56 | 0 |",
		// Goals: the fastest peer is go-limiter, 265 and 155 ns; the GCRA
		// 250 and 145 live, the mutex map 120 and 250.
		"## GCRA against its goals",
		"| measure | GCRA | against | result | goal | status |",
		"| time per call, 1 goroutine, vs. the fastest peer | 250 ns | `go-limiter memorystore`: 265 ns | 0.94x | ≤ 0.6x | not met |",
		"| time per call, 8 goroutines, vs. the fastest peer | 145 ns | `go-limiter memorystore`: 155 ns | 0.94x | ≤ 0.6x | not met |",
		"| time per call, 1 goroutine, vs. the mutex map, live keys | 250 ns | `sync.Mutex + map`: 120 ns | 2.08x | ≤ 1.0x | not met |",
		"| time per call, 8 goroutines, vs. the mutex map, live keys | 145 ns | `sync.Mutex + map`: 250 ns | 0.58x | ≤ 1.0x | met |",
		"| time per call, 1 goroutine, vs. the mutex map, churning keys | 85.0 ns | `sync.Mutex + map`: 110 ns | 0.77x | ≤ 1.0x | met |",
		"| time per call, 8 goroutines, vs. the mutex map, churning keys | 65.0 ns | `sync.Mutex + map`: 160 ns | 0.41x | ≤ 1.0x | met |",
		"| heap per live key | 36 MiB for 1,000,000 keys | – | 37.7 B | ≤ 24 B | not met |",
		"| allocations per call, the most with live and churning keys from 1 goroutine and 8 goroutines | 0 | – | 0 | 0 | met |",
		// How the run was made.
		"each round a process running `BenchmarkKeys1M` (`-benchtime 300ms -cpu 1,2`), then one running `BenchmarkChurn1M` " +
			"(`-benchtime 300ms -cpu 1,2`), one running `BenchmarkLatency1M` (`-benchtime 300ms -cpu 1,2`) and one running " +
			"`BenchmarkHTTP` (`-benchtime 500000x -cpu 1,2`)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("BENCHMARKS.md lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("BENCHMARKS.md:\n%s", md)
	}
	// The sections come in this order.
	last := -1
	for _, h := range []string{"## Time and memory", "## Churning keys", "## Latency of one call", "## GCRA against its goals",
		"## HTTP middleware", "## Configurations", "## All results"} {
		i := strings.Index(md, h)
		if i <= last {
			t.Errorf("%q at %d, after %d", h, i, last)
		}
		last = i
	}
}

// TestGoalsWithoutChurn checks that results without BenchmarkChurn1M and
// BenchmarkLatency1M render without their sections, and with the goals
// their figures allow.
func TestGoalsWithoutChurn(t *testing.T) {
	r, err := newReport([]byte(sampleKeys+sampleLimiterKeys+sampleEnd), []byte(sampleMemory+sampleGCRAMemory))
	if err != nil {
		t.Fatal(err)
	}
	md := string(r.markdown())
	for _, unwanted := range []string{"## Churning keys", "churn.svg", "### Churning keys", "## Latency", "### Latency",
		"`BenchmarkChurn1M`", "`BenchmarkLatency1M`", "churning keys |"} {
		if strings.Contains(md, unwanted) {
			t.Errorf("BENCHMARKS.md without Churn1M and Latency1M results has %q", unwanted)
		}
	}
	for _, want := range []string{
		"## GCRA against its goals",
		"| time per call, 8 goroutines, vs. the mutex map, live keys | 145 ns | `sync.Mutex + map`: 250 ns | 0.58x | ≤ 1.0x | met |",
		"| allocations per call, the most with live keys from 1 goroutine and 8 goroutines | 0 | – | 0 | 0 | met |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("BENCHMARKS.md lacks %q:\n%s", want, md)
		}
	}
	if n := len(r.goals(2)); n != 6 {
		t.Errorf("%d goals without churning results, want 6", n)
	}
}

// TestGoalsMissing checks that the goals section is left out when none of
// its figures was measured.
func TestGoalsMissing(t *testing.T) {
	r := sampleReport(t)
	if g := r.goals(2); len(g) != 0 {
		t.Errorf("goals without any figure of the GCRA = %+v", g)
	}
	if strings.Contains(string(r.markdown()), "## GCRA against its goals") {
		t.Error("BENCHMARKS.md has a goals section with no figure of the GCRA")
	}
}

// wellFormed reports an error unless doc is well-formed XML.
func wellFormed(doc []byte) error {
	d := xml.NewDecoder(bytes.NewReader(doc))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func TestCharts(t *testing.T) {
	r := sampleReport(t)
	for name, doc := range map[string][]byte{"ns": r.keysChart(2), "heap": r.heapChart()} {
		if err := wellFormed(doc); err != nil {
			t.Errorf("%s chart: %v\n%s", name, err, doc)
		}
		s := string(doc)
		if !strings.HasPrefix(s, "<svg ") {
			t.Errorf("%s chart does not start with <svg", name)
		}
		for _, want := range []string{"sync.Mutex + map", "limits.Estimator", "*atomic.Int64"} {
			if !strings.Contains(s, want) {
				t.Errorf("%s chart lacks %q", name, want)
			}
		}
	}
	ns := string(r.keysChart(2))
	for _, want := range []string{">120<", ">250<", ">23.0<", ">12.0<", ">n/a<"} {
		if !strings.Contains(ns, want) {
			t.Errorf("ns chart lacks %q", want)
		}
	}
	if heap := string(r.heapChart()); !strings.Contains(heap, ">70 MiB<") || !strings.Contains(heap, ">33 KiB<") {
		t.Errorf("heap chart lacks its values:\n%s", heap)
	}
	h := r.httpChart(2)
	if err := wellFormed(h); err != nil {
		t.Errorf("http chart: %v\n%s", err, h)
	}
	for _, want := range []string{">httplimit Rate<", ">httprate LimitByIP<", ">268<", ">181<", ">553<", ">356<"} {
		if !strings.Contains(string(h), want) {
			t.Errorf("http chart lacks %q", want)
		}
	}
	c := fullReport(t).churnChart(2)
	if err := wellFormed(c); err != nil {
		t.Errorf("churn chart: %v\n%s", err, c)
	}
	for _, want := range []string{">limits.GCRA<", ">85.0<", ">65.0<", ">sync.Mutex + map<", ">750<"} {
		if !strings.Contains(string(c), want) {
			t.Errorf("churn chart lacks %q", want)
		}
	}
	if strings.Contains(string(c), ">limits.Estimator<") {
		t.Error("churn chart has a row for a structure that did not run with churning keys")
	}
	if strings.Contains(string(h), ">bare handler<") {
		t.Errorf("http chart has a bar for the bare handler, whose overhead is 0 by definition")
	}
}

func TestFormats(t *testing.T) {
	tests := []struct{ got, want string }{
		{whole(2), "2"},
		{whole(math.NaN()), "n/a"},
		{spread([]float64{130, 23.45, 110}), "23.4–130"},
		{plural(1, "run"), "1 run"},
		{plural(5, "run"), "5 runs"},
		{benchtimeNote("1000000x"), ": one call per key"},
		{benchtimeNote("20000x"), ": 20,000 calls"},
		{benchtimeNote("300ms"), ""},
		{per(time.Minute), "a minute"},
		{per(2 * time.Second), "per 2s"},
		{callsNote("1000000x"), " (1,000,000 calls)"},
		{callsNote("1s"), ""},
		{callsNote("x"), ""},
		{list([]string{"a"}), "a"},
		{list([]string{"a", "b", "c"}), "a, b and c"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
