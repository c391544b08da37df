// Command report runs the side-by-side benchmarks of package bench and the
// memory program, and writes BENCHMARKS.md, the SVG charts in charts/ and
// the raw results in results/.
//
// Run it from the bench module:
//
//	cd bench
//	go run ./cmd/report
//
// It builds the benchmark binary once and runs -rounds rounds. Each round
// runs four processes in turn: BenchmarkKeys1M (every structure once per
// -cpu value), BenchmarkChurn1M (the limiters with keys that expire, and
// the mutex map, once per -cpu value), BenchmarkLatency1M (the time of
// each call, once per -latencycpu value) and BenchmarkHTTP (every
// middleware once per -cpu value), so that the runs of one structure are
// spread over the whole run rather than taken back to back; times are the
// medians of the rounds. Then it runs cmd/memory once per structure.
//
// By default each benchmark run makes 1,000,000 calls, one pass over the
// keys. A fixed count rather than a time keeps the run short: the testing
// package collects garbage before each attempt at the benchmark time, and
// with a million keys in a structure full of pointers one collection takes
// up to a second. BenchmarkHTTP serves 500,000 requests per run by default
// (-httpbenchtime). BenchmarkLatency1M calls from one goroutine, so it runs
// at one GOMAXPROCS by default, 2 (-latencycpu): its percentiles are what
// the report shows, and a second value would add a fifth to the run.
//
// With the defaults a whole run takes six to seven minutes on two cores: two
// runs on a shared two-core Intel Xeon machine took 6 min 15 s and 6 min
// 57 s, each round about 75 s (BenchmarkKeys1M 35 s, BenchmarkChurn1M 18 s,
// BenchmarkLatency1M 18 s, BenchmarkHTTP 4 s), then cmd/memory.
//
// With -from it only renders the results saved by an earlier run; results
// of runs made before BenchmarkChurn1M, BenchmarkLatency1M or BenchmarkHTTP
// existed render without their sections.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/limitsgo/limits/bench"
	"github.com/limitsgo/limits/internal/report"
)

func main() {
	var o options
	flag.IntVar(&o.rounds, "rounds", 5, "runs of the benchmark suite; times are medians over them")
	flag.StringVar(&o.benchtime, "benchtime", "1000000x", "-benchtime of each run of BenchmarkKeys1M, BenchmarkChurn1M and BenchmarkLatency1M")
	flag.StringVar(&o.httpBenchtime, "httpbenchtime", "500000x", "-benchtime of each run of BenchmarkHTTP")
	flag.StringVar(&o.cpu, "cpu", "1,2", "-cpu list of the benchmarks; the parallel ones run exactly 8 goroutines when each value divides 8")
	flag.StringVar(&o.latencyCPU, "latencycpu", "2", "-cpu list of BenchmarkLatency1M, which calls from one goroutine")
	flag.StringVar(&o.out, "out", ".", "directory to write BENCHMARKS.md, charts/ and results/ in")
	flag.StringVar(&o.from, "from", "", "render the results saved in this results/ directory instead of running")
	flag.Parse()

	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	rounds        int
	benchtime     string // of BenchmarkKeys1M, BenchmarkChurn1M and BenchmarkLatency1M
	httpBenchtime string // of BenchmarkHTTP
	cpu           string // -cpu of every benchmark but BenchmarkLatency1M
	latencyCPU    string // -cpu of BenchmarkLatency1M
	out, from     string
}

// Files the report writes under -out.
const (
	benchFile  = "results/benchmarks.txt"
	memoryFile = "results/memory.jsonl"
)

func run(o options) error {
	var benchOut, memOut []byte
	if o.from != "" {
		var err error
		if benchOut, err = os.ReadFile(filepath.Join(o.from, filepath.Base(benchFile))); err != nil {
			return err
		}
		if memOut, err = os.ReadFile(filepath.Join(o.from, filepath.Base(memoryFile))); err != nil {
			return err
		}
	} else {
		if o.rounds < 1 {
			return errors.New("-rounds must be at least 1")
		}
		var err error
		if benchOut, memOut, err = measure(o); err != nil {
			return err
		}
		if err := report.WriteFile(filepath.Join(o.out, benchFile), benchOut); err != nil {
			return err
		}
		if err := report.WriteFile(filepath.Join(o.out, memoryFile), memOut); err != nil {
			return err
		}
	}

	r, err := newReport(benchOut, memOut)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"BENCHMARKS.md":        r.markdown(),
		"charts/ns-per-op.svg": r.keysChart(r.headlineProcs()),
		"charts/heap.svg":      r.heapChart(),
	}
	if len(r.res.churn) > 0 {
		files["charts/churn.svg"] = r.churnChart(r.churnProcs())
	}
	if len(r.res.http) > 0 {
		files["charts/http.svg"] = r.httpChart(r.httpProcs())
	}
	for name, data := range files {
		if err := report.WriteFile(filepath.Join(o.out, name), data); err != nil {
			return err
		}
	}
	fmt.Print(r.headlineTable(r.headlineProcs()))
	if len(r.res.churn) > 0 {
		fmt.Print("\n", r.churnTable(r.churnProcs()))
	}
	if len(r.res.latency) > 0 {
		fmt.Print("\n", r.latencyTable(r.latencyProcs()))
	}
	if t := r.goalsTable(r.headlineProcs()); t != "" {
		fmt.Print("\n", t)
	}
	if len(r.res.http) > 0 {
		fmt.Print("\n", r.httpTable(r.httpProcs()))
	}
	return nil
}

// newReport builds the report from the saved benchmark output, with its
// header of meta lines, and the memory program's lines.
func newReport(benchOut, memOut []byte) (*benchReport, error) {
	res, err := parseBench(bytes.NewReader(benchOut))
	if err != nil {
		return nil, err
	}
	heap, err := parseMemory(memOut)
	if err != nil {
		return nil, err
	}
	r := &benchReport{structures: bench.Structures(), middlewares: bench.Middlewares(), res: res, heap: heap}
	meta := parseMeta(benchOut)
	r.machine = machine{
		CPU:       meta["cpu-model"],
		OSArch:    meta["os-arch"],
		GoVersion: meta["go"],
		Date:      meta["date"],
		LoadStart: meta["loadavg-start"],
		LoadEnd:   meta["loadavg-end"],
	}
	if r.machine.CPU == "" {
		r.machine.CPU = res.cpu
	}
	r.machine.Cores, _ = strconv.Atoi(meta["cores"])
	r.settings = settings{
		Benchtime:     meta["benchtime"],
		HTTPBenchtime: meta["http-benchtime"],
		CPU:           meta["cpus"],
		LatencyCPU:    meta["latency-cpus"],
	}
	r.settings.Rounds, _ = strconv.Atoi(meta["rounds"])
	r.settings.Seconds, _ = strconv.ParseFloat(meta["seconds"], 64)
	return r, nil
}

// metaPrefix starts the lines the report adds to the benchmark output.
// They have the form of benchmark configuration lines, so benchstat reads
// the file as it is.
const metaPrefix = "report-"

// parseMeta returns the report's meta lines, keyed without their prefix.
func parseMeta(data []byte) map[string]string {
	meta := make(map[string]string)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if ok && strings.HasPrefix(k, metaPrefix) {
			meta[strings.TrimPrefix(k, metaPrefix)] = strings.TrimSpace(v)
		}
	}
	return meta
}

// measure runs the benchmarks and the memory program, and returns their
// output: the benchmark output with meta lines before and after it, and one
// JSON line per structure.
func measure(o options) (benchOut, memOut []byte, err error) {
	start := time.Now()
	tmp, err := os.MkdirTemp("", "limits-bench-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(tmp)
	testBin, memBin := filepath.Join(tmp, "bench.test"), filepath.Join(tmp, "memory")
	progress("building the benchmarks and the memory program")
	if err := goCmd("test", "-c", "-o", testBin, ".").Run(); err != nil {
		return nil, nil, fmt.Errorf("go test -c (run the report from the bench module): %w", err)
	}
	if err := goCmd("build", "-o", memBin, "./cmd/memory").Run(); err != nil {
		return nil, nil, fmt.Errorf("go build ./cmd/memory: %w", err)
	}

	var b bytes.Buffer
	meta := func(k, v string) { fmt.Fprintf(&b, "%s%s: %s\n", metaPrefix, k, v) }
	meta("date", start.UTC().Format("2006-01-02 15:04 MST"))
	meta("cpu-model", cpuModel())
	meta("cores", strconv.Itoa(runtime.NumCPU()))
	meta("os-arch", runtime.GOOS+"/"+runtime.GOARCH)
	meta("go", runtime.Version())
	meta("rounds", strconv.Itoa(o.rounds))
	meta("benchtime", o.benchtime)
	meta("http-benchtime", o.httpBenchtime)
	meta("cpus", o.cpu)
	meta("latency-cpus", o.latencyCPU)
	meta("loadavg-start", loadAvg())

	// Each benchmark runs in a process of its own, so that one leaves
	// nothing behind in the heap of the next.
	runs := []struct{ bench, benchtime, cpu string }{
		{keysBench, o.benchtime, o.cpu},
		{churnBench, o.benchtime, o.cpu},
		{latencyBench, o.benchtime, o.latencyCPU},
		{httpBench, o.httpBenchtime, o.cpu},
	}
	for i := range o.rounds {
		t := time.Now()
		var took []string
		for _, run := range runs {
			rt := time.Now()
			cmd := exec.Command(testBin, "-test.run", "^$", "-test.bench", "^Benchmark"+run.bench+"$",
				"-test.benchtime", run.benchtime, "-test.cpu", run.cpu, "-test.count", "1")
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			if err != nil {
				return nil, nil, fmt.Errorf("round %d, Benchmark%s: %w\n%s", i+1, run.bench, err, out)
			}
			b.Write(out)
			took = append(took, fmt.Sprintf("%s %.0f s", run.bench, time.Since(rt).Seconds()))
		}
		progress("round %d of %d: %.0f s (%s)", i+1, o.rounds, time.Since(t).Seconds(), strings.Join(took, ", "))
	}

	t := time.Now()
	var m bytes.Buffer
	for _, s := range bench.Structures() {
		cmd := exec.Command(memBin, s.Name)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, nil, fmt.Errorf("memory %s: %w", s.Name, err)
		}
		m.Write(out)
	}
	progress("memory: %.0f s", time.Since(t).Seconds())

	meta("loadavg-end", loadAvg())
	meta("seconds", fmt.Sprintf("%.0f", time.Since(start).Seconds()))
	return b.Bytes(), m.Bytes(), nil
}

// goCmd returns a go command whose output goes to the report's stderr.
func goCmd(args ...string) *exec.Cmd {
	cmd := exec.Command("go", args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd
}

// progress reports on stderr how the run is going.
func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "report: "+format+"\n", args...)
}

// cpuModel returns the processor's model name from /proc/cpuinfo, or ""
// where there is none (the benchmarks' own cpu line is used then).
func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// loadAvg returns the 1, 5 and 15 minute load averages from /proc/loadavg,
// or "" where there are none.
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], ", ")
}
