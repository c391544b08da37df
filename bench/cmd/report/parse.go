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
	keysBench = "Keys1M" // BenchmarkKeys1M: the structures
	httpBench = "HTTP"   // BenchmarkHTTP: the middlewares
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

// results are the benchmark measurements by cell, and the cpu line the
// benchmarks printed.
type results struct {
	cells map[cell]*samples // of BenchmarkKeys1M, by structure
	http  map[cell]*samples // of BenchmarkHTTP, by middleware
	cpu   string
}

// parseBench reads the output of go test -bench for BenchmarkKeys1M and
// BenchmarkHTTP. Lines that are not results are ignored; results of other
// benchmarks too. Results of BenchmarkHTTP may be missing, as in the
// output of runs made before it existed.
func parseBench(r io.Reader) (*results, error) {
	res := &results{cells: make(map[cell]*samples), http: make(map[cell]*samples)}
	br := benchfmt.NewReader(r, "bench")
	for br.Scan() {
		rec, ok := br.Result().(*benchfmt.Result)
		if !ok {
			continue // a syntax error or unit metadata: not a result
		}
		if cpu := rec.GetConfig("cpu"); cpu != "" {
			res.cpu = cpu
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
		if bench == httpBench {
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

// parseName splits a name like Keys1M/MutexMap/parallel-2 into its
// benchmark, keysBench or httpBench, and its cell. GOMAXPROCS is 1 when the
// name has no -N suffix, as go test prints it.
func parseName(n benchfmt.Name) (bench string, c cell, ok bool) {
	base, parts := n.Parts()
	bench = string(base)
	if bench != keysBench && bench != httpBench || len(parts) < 2 {
		return "", cell{}, false
	}
	c = cell{procs: 1}
	if last := parts[len(parts)-1]; last[0] == '-' {
		p, err := strconv.Atoi(string(last[1:]))
		if err != nil {
			return "", cell{}, false
		}
		c.procs = p
		parts = parts[:len(parts)-1]
	}
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
