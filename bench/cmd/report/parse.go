package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/perf/benchfmt"
)

// Benchmarks whose results the report reads.
const (
	keysBench    = "Keys1M"    // BenchmarkKeys1M: the structures
	churnBench   = "Churn1M"   // BenchmarkChurn1M: the limiters, their keys expiring
	latencyBench = "Latency1M" // BenchmarkLatency1M: the time of each call
	httpBench    = "HTTP"      // BenchmarkHTTP: the middlewares
)

// churnSuffix ends the names of the runs of BenchmarkLatency1M with a
// churning configuration: Latency1M/GCRA/churn.
const churnSuffix = "churn"

// Units of the metrics BenchmarkLatency1M reports, in nanoseconds.
const (
	p50Unit  = "p50-ns"
	p99Unit  = "p99-ns"
	p999Unit = "p99.9-ns"
	maxUnit  = "max-ns"
)

// Modes of a benchmark: one goroutine, or parallel goroutines.
const (
	serial   = "serial"
	parallel = "parallel"
)

// cell identifies the runs of one structure (or middleware) in one mode at
// one GOMAXPROCS.
type cell struct {
	structure string
	mode      string
	procs     int
}

// samples are the measurements of one cell, one per run.
type samples struct {
	ns     []float64 // ns/op
	allocs []float64 // allocs/op
	bytes  []float64 // B/op
}

// latencyCell identifies the runs of BenchmarkLatency1M of one structure,
// live or churning, at one GOMAXPROCS.
type latencyCell struct {
	structure string
	churn     bool
	procs     int
}

// latencySamples are the measurements of one latencyCell, one per run: the
// percentiles and the maximum of the time of one call, in nanoseconds.
type latencySamples struct {
	p50, p99, p999, max []float64
	allocs              []float64 // allocs/op
}

// results are the benchmark measurements by cell, and the cpu line the
// benchmarks printed.
type results struct {
	cells   map[cell]*samples               // of BenchmarkKeys1M, by structure
	churn   map[cell]*samples               // of BenchmarkChurn1M, by structure
	latency map[latencyCell]*latencySamples // of BenchmarkLatency1M
	http    map[cell]*samples               // of BenchmarkHTTP, by middleware
	cpu     string
}

// parseBench reads the output of go test -bench for BenchmarkKeys1M,
// BenchmarkChurn1M, BenchmarkLatency1M and BenchmarkHTTP. Lines that are
// not results are ignored; results of other benchmarks too. Results of
// any but BenchmarkKeys1M may be missing, as in the output of runs made
// before those benchmarks existed.
func parseBench(r io.Reader) (*results, error) {
	res := &results{
		cells:   make(map[cell]*samples),
		churn:   make(map[cell]*samples),
		latency: make(map[latencyCell]*latencySamples),
		http:    make(map[cell]*samples),
	}
	br := benchfmt.NewReader(r, "bench")
	for br.Scan() {
		rec, ok := br.Result().(*benchfmt.Result)
		if !ok {
			continue // a syntax error or unit metadata: not a result
		}
		if cpu := rec.GetConfig("cpu"); cpu != "" {
			res.cpu = cpu
		}
		if lc, ok := parseLatencyName(rec.Name); ok {
			res.addLatency(lc, rec)
			continue
		}
		bench, c, ok := parseName(rec.Name)
		if !ok {
			continue
		}
		ns, ok := rec.Value("sec/op")
		if !ok {
			return nil, fmt.Errorf("%s: no ns/op", rec.Name.Full())
		}
		cells := res.cells
		switch bench {
		case churnBench:
			cells = res.churn
		case httpBench:
			cells = res.http
		}
		s := cells[c]
		if s == nil {
			s = &samples{}
			cells[c] = s
		}
		s.ns = append(s.ns, ns*1e9)
		if a, ok := rec.Value("allocs/op"); ok {
			s.allocs = append(s.allocs, a)
		}
		if b, ok := rec.Value("B/op"); ok {
			s.bytes = append(s.bytes, b)
		}
	}
	if err := br.Err(); err != nil {
		return nil, err
	}
	if len(res.cells) == 0 {
		return nil, fmt.Errorf("no results of Benchmark%s found", keysBench)
	}
	return res, nil
}

// addLatency adds the metrics of rec, a result of BenchmarkLatency1M, to
// the samples of lc. Each metric is optional, as the benchmark reports none
// when it timed no call; ns/op is not used, as it is the mean.
func (res *results) addLatency(lc latencyCell, rec *benchfmt.Result) {
	s := res.latency[lc]
	if s == nil {
		s = &latencySamples{}
		res.latency[lc] = s
	}
	for _, m := range []struct {
		unit string
		to   *[]float64
	}{{p50Unit, &s.p50}, {p99Unit, &s.p99}, {p999Unit, &s.p999}, {maxUnit, &s.max}} {
		if v, ok := metric(rec, m.unit); ok {
			*m.to = append(*m.to, v)
		}
	}
	if a, ok := rec.Value("allocs/op"); ok {
		s.allocs = append(s.allocs, a)
	}
}

// metric returns the value of rec in unit as the benchmark printed it.
// benchfmt tidies units that contain "ns", so that p50-ns becomes p50-sec
// with its value in seconds: the value printed is then the original one.
func metric(rec *benchfmt.Result, unit string) (float64, bool) {
	for _, v := range rec.Values {
		if v.OrigUnit == unit {
			return v.OrigValue, true
		}
		if v.OrigUnit == "" && v.Unit == unit {
			return v.Value, true
		}
	}
	return 0, false
}

// splitProcs returns the parts of a benchmark name without its -N suffix,
// and N, GOMAXPROCS: 1 when the name has no suffix, as go test prints it.
func splitProcs(parts [][]byte) ([][]byte, int, bool) {
	if len(parts) == 0 {
		return parts, 1, true
	}
	last := parts[len(parts)-1]
	if len(last) == 0 || last[0] != '-' {
		return parts, 1, true
	}
	p, err := strconv.Atoi(string(last[1:]))
	if err != nil || p < 1 {
		return nil, 0, false
	}
	return parts[:len(parts)-1], p, true
}

// parseLatencyName splits a name like Latency1M/GCRA/churn-2 into its
// cell: the structure, whether its keys churn, and GOMAXPROCS.
func parseLatencyName(n benchfmt.Name) (latencyCell, bool) {
	base, parts := n.Parts()
	if string(base) != latencyBench {
		return latencyCell{}, false
	}
	parts, procs, ok := splitProcs(parts)
	if !ok || len(parts) < 1 || len(parts) > 2 {
		return latencyCell{}, false
	}
	lc := latencyCell{structure: strings.TrimPrefix(string(parts[0]), "/"), procs: procs}
	if len(parts) == 2 {
		if strings.TrimPrefix(string(parts[1]), "/") != churnSuffix {
			return latencyCell{}, false
		}
		lc.churn = true
	}
	return lc, lc.structure != ""
}

// parseName splits a name like Keys1M/MutexMap/parallel-2 into its
// benchmark, keysBench, churnBench or httpBench, and its cell. GOMAXPROCS
// is 1 when the name has no -N suffix, as go test prints it.
func parseName(n benchfmt.Name) (bench string, c cell, ok bool) {
	base, parts := n.Parts()
	bench = string(base)
	if bench != keysBench && bench != churnBench && bench != httpBench {
		return "", cell{}, false
	}
	parts, procs, ok := splitProcs(parts)
	if !ok {
		return "", cell{}, false
	}
	c = cell{procs: procs}
	if len(parts) != 2 {
		return "", cell{}, false
	}
	c.structure = strings.TrimPrefix(string(parts[0]), "/")
	c.mode = strings.TrimPrefix(string(parts[1]), "/")
	if c.mode != serial && c.mode != parallel {
		return "", cell{}, false
	}
	return bench, c, true
}

// median returns the median of xs, or 0 if there are none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// memResult is a line printed by cmd/memory.
type memResult struct {
	Structure string `json:"structure"`
	Keys      int    `json:"keys"`
	HeapBytes uint64 `json:"heap_bytes"`
}

// parseMemory reads lines printed by cmd/memory into heap bytes by
// structure name.
func parseMemory(data []byte) (map[string]uint64, error) {
	heap := make(map[string]uint64)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var m memResult
		if err := json.Unmarshal(line, &m); err != nil {
			return nil, fmt.Errorf("memory output %q: %v", line, err)
		}
		heap[m.Structure] = m.HeapBytes
	}
	return heap, sc.Err()
}
