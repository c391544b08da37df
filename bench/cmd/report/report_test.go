package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
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
		"`BenchmarkHTTP` (`-benchtime 500000x`)",
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
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
