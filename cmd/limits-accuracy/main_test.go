package main

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// tinyConfig returns a configuration small enough for a test: workloads
// of 300 keys and 600 keys, three sizes of two hashes in the sweep, and
// two candidates at 1 KiB.
func tinyConfig(dir string) config {
	return config{
		keys:        300,
		trials:      2,
		hashes:      []int{1, 2},
		slots:       []int{16, 64, 256},
		refusalKeys: []int{300, 600},
		limits:      []int64{10, 100},
		candidates:  []size{{2, 64}, {1, 128}},
		exactKeys:   []int{300},
		md:          filepath.Join(dir, "out", "ACCURACY.md"),
		svg:         filepath.Join(dir, "out", "accuracy.svg"),
		refusalSVG:  filepath.Join(dir, "out", "refusals.svg"),
	}
}

// TestRunTiny runs the whole command on small workloads and checks that
// the report has every section and row and the charts are well-formed SVG
// with every line and bar.
func TestRunTiny(t *testing.T) {
	cfg := tinyConfig(t.TempDir())
	var out strings.Builder
	if err := run(cfg, &out); err != nil {
		t.Fatalf("run: %v", err)
	}
	if !strings.Contains(out.String(), "wrote "+cfg.md) {
		t.Errorf("summary %q does not name the report", out.String())
	}

	md, err := os.ReadFile(cfg.md)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## The default windows of a Rate\n", "| zipf | 300 | 20 | default (exact first) | 0% | 0% | 0% | 100.0% |",
		"| lognormal | 300 |", "| bimodal | 300 |", "| uniform | 300 | 62 | former default (conservative 4 x 4096) |",
		"## The sketch of count-min windows\n", "## False refusals\n", "## Over-count against memory\n", "## Sizing\n",
		"### zipf, 300 keys\n", "### uniform, 600 keys\n", "### zipf\n", "### uniform\n",
		"| 1 x 16 | 128 B |", "| 2 x 256 | 4 KiB |", "| 2 x 64 | 1 KiB | conservative |",
		"| keys refused, L = 10 | keys refused, L = 100 |",
		"| zipf | 600 | 41,568 | 69.3 | 55 | 541 |",
		"| uniform | 600 | 41,568 | 69.3 | 0 | 600 |",
		"**zipf**: 300 keys",
		"(accuracy.svg)", "(refusals.svg)",
		"The default was not among the candidates of this run.",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if i := strings.Index(string(md), "%!"); i >= 0 {
		t.Errorf("report has a formatting error: %q", md[i:min(i+40, len(md))])
	}
	// Rows, headers and separators included: the workloads of the refusal
	// measurement (2+4), four tables of its two candidates in two modes
	// (4 x (2+4)), the sweep of two workloads of 2 x 3 sizes (2 x (2+6)),
	// 4 sizings per workload (2+8), and the default Rate and the former
	// one on four workloads of 300 keys (2+8).
	if got, want := strings.Count(string(md), "\n| "), (2+4)+4*(2+4)+2*(2+6)+(2+8)+(2+8); got != want {
		t.Errorf("report has %d table rows (headers included), want %d", got, want)
	}

	// One line per workload, mode and hashes.
	checkSVG(t, cfg.svg, map[string]int{"polyline": 2 * 2 * 2})
	// A background, and a legend square and a bar per candidate and mode
	// for each workload of 300 keys and limit with a key within it: both
	// limits of the zipf workload, and 100 only of the uniform one, whose
	// keys count 62 or 63 events.
	checkSVG(t, cfg.refusalSVG, map[string]int{"rect": 1 + 3 + 2*2*3})
}

// TestRunDefault runs the command with the default and the former default
// among the candidates, on small workloads, and checks that the report
// explains the choice with figures.
func TestRunDefault(t *testing.T) {
	cfg := tinyConfig(t.TempDir())
	cfg.limits = []int64{70, 1000}
	cfg.candidates = []size{formerDefault.size, {2, 2048}, {8, 2048}, rateDefault.size, {2, 8192}}
	if err := run(cfg, io.Discard); err != nil {
		t.Fatalf("run: %v", err)
	}
	data, err := os.ReadFile(cfg.md)
	if err != nil {
		t.Fatal(err)
	}
	md := string(data)
	i, j := strings.Index(md, "## The sketch of count-min windows"), strings.Index(md, "## False refusals")
	if i < 0 || j < i {
		t.Fatalf("report lacks the section on the default:\n%s", md)
	}
	sec := md[i:j]
	for _, want := range []string{
		"| **4 x 4096 conservative** (default) |",
		"| keys refused, uniform, 600 keys, L = 70 |",
		"- The former default, 4 x 1024 plain, refuses ",
		"- At the same size, conservative update refuses ",
		"- Fewer hashes, conservative 2 x 8192: ",
		"- More hashes, conservative 8 x 2048: ",
		"- The same at 32 KiB: conservative 2 x 2048 has ",
	} {
		if !strings.Contains(sec, want) {
			t.Errorf("section on the default lacks %q:\n%s", want, sec)
		}
	}
	for _, bad := range []string{"%!", "n/a", "NaN"} {
		if strings.Contains(sec, bad) {
			t.Errorf("section on the default has %q:\n%s", bad, sec)
		}
	}
}

// checkSVG checks that the file name is well-formed SVG with the given
// numbers of elements.
func checkSVG(t *testing.T, name string, want map[string]int) {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := xml.NewDecoder(f)
	elems := map[string]int{}
	root := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s is not well-formed XML: %v", name, err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
				if se.Name.Space != "http://www.w3.org/2000/svg" {
					t.Errorf("%s: root namespace %q, want the SVG namespace", name, se.Name.Space)
				}
			}
			elems[se.Name.Local]++
		}
	}
	if root != "svg" {
		t.Errorf("%s: root element %q, want svg", name, root)
	}
	for el, n := range want {
		if elems[el] != n {
			t.Errorf("%s has %d %s elements, want %d", name, elems[el], el, n)
		}
	}
}

func TestRunRejects(t *testing.T) {
	dir := t.TempDir()
	ok := tinyConfig(dir)
	ok.keys, ok.trials, ok.hashes, ok.slots = 10, 1, []int{2}, []int{8}
	ok.refusalKeys = []int{10}
	ok.md, ok.svg, ok.refusalSVG = filepath.Join(dir, "a.md"), filepath.Join(dir, "a.svg"), filepath.Join(dir, "r.svg")
	if err := run(ok, io.Discard); err != nil {
		t.Fatalf("run: %v", err)
	}
	tests := []struct {
		name string
		edit func(*config)
	}{
		{"one key", func(c *config) { c.keys = 1 }},
		{"no trials", func(c *config) { c.trials = 0 }},
		{"no hashes", func(c *config) { c.hashes = nil }},
		{"17 hashes", func(c *config) { c.hashes = []int{17} }},
		{"no refusal workload", func(c *config) { c.refusalKeys = nil }},
		{"a refusal workload of one key", func(c *config) { c.refusalKeys = []int{10, 1} }},
		{"no limit", func(c *config) { c.limits = nil }},
		{"no candidate", func(c *config) { c.candidates = nil }},
		{"a candidate of 17 hashes", func(c *config) { c.candidates = []size{{17, 8}} }},
		{"unwritable", func(c *config) { c.md = filepath.Join(dir, "a.svg", "x.md") }},
	}
	for _, tt := range tests {
		c := ok
		tt.edit(&c)
		if err := run(c, io.Discard); err == nil {
			t.Errorf("%s: run succeeded, want an error", tt.name)
		}
	}
}

func TestParseSizes(t *testing.T) {
	got, err := parseSizes("4x1024, 2x2048")
	if want := []size{{4, 1024}, {2, 2048}}; err != nil || !slices.Equal(got, want) {
		t.Errorf("parseSizes = %v, %v; want %v", got, err, want)
	}
	for _, bad := range []string{"4", "4x", "x8", "0x8", "4x-1", "4*8", ""} {
		if got, err := parseSizes(bad); err == nil {
			t.Errorf("parseSizes(%q) = %v, want an error", bad, got)
		}
	}
}

func TestWorkloads(t *testing.T) {
	z := zipf(10000)
	if z.events != 973855 {
		t.Errorf("zipf(10000) has %d events, want 973,855", z.events)
	}
	u := uniform(10000, z.events)
	if u.events != z.events || u.counts[0] != 98 || u.counts[9999] != 97 {
		t.Errorf("uniform: %d events, counts %d..%d, want %d, 98..97", u.events, u.counts[0], u.counts[9999], z.events)
	}
	seen := make([]int64, len(z.counts))
	for _, i := range z.stream {
		seen[i]++
	}
	for i, c := range z.counts {
		if seen[i] != c {
			t.Fatalf("zipf stream has key %d %d times, want %d", i, seen[i], c)
		}
	}
	if got, want := keysUnder(z, 100), int64(9010); got != want {
		t.Errorf("zipf(10000) has %d keys at or under 100, want %d", got, want)
	}
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		over []int64
		want stats
	}{
		{[]int64{0, 0, 1, 5}, stats{exact: 0.5, mean: 1.5, p99: 5, max: 5}},
		{[]int64{0}, stats{exact: 1}},
		{append(make([]int64, 99), 7), stats{exact: 0.99, mean: 0.07, p99: 0, max: 7}},
		{append(make([]int64, 98), 3, 7), stats{exact: 0.98, mean: 0.1, p99: 3, max: 7}},
	}
	for _, tt := range tests {
		if got := summarize(tt.over); got != tt.want {
			t.Errorf("summarize(%v) = %+v, want %+v", tt.over, got, tt.want)
		}
	}
}

// handSketch is a sketch whose estimates are set by hand: key i's estimate
// is its count so far plus offset[i].
type handSketch struct {
	index  map[string]uint64 // key to index
	counts []int64
	offset []int64
}

func (s *handSketch) Hash(key []byte) uint64 { return s.index[string(key)] }

func (s *handSketch) IncrHash(h uint64, delta int64) int64 {
	s.counts[h] += delta
	return s.GetHash(h)
}

func (s *handSketch) GetHash(h uint64) int64 { return s.counts[h] + s.offset[h] }

// handWorkload returns a workload of the given counts, the events of each
// key in a row, key after key.
func handWorkload(counts ...int64) *workload {
	w := &workload{name: "hand", counts: counts}
	for i, c := range counts {
		w.keys = append(w.keys, fmt.Sprint("key", i))
		for range c {
			w.stream = append(w.stream, int32(i))
		}
		w.events += c
	}
	return w
}

// TestReplayRefusals checks the refusal counts against a sketch whose
// over-counts are set by hand.
func TestReplayRefusals(t *testing.T) {
	w := handWorkload(5, 6, 10, 2)
	sk := &handSketch{index: map[string]uint64{}, counts: make([]int64, 4), offset: []int64{3, 0, 1, 10}}
	for i, k := range w.keys {
		sk.index[k] = uint64(i)
	}
	over, refused, err := replay(sk, w, []int64{6, 100})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{0, 1, 3, 10}; !slices.Equal(over, want) {
		t.Errorf("over-counts %v, want %v", over, want)
	}
	// Limit 6: keys 0, 1 and 3 are within it. Key 0 (5 events, 3 over)
	// reaches 7 on its 4th event; key 1 (6, exact) never passes 6; key 3
	// (2, 10 over) is refused from its first event. Key 2, over the limit
	// with 10 events, estimates 7 on its 6th event, which is within it.
	// Requests within the limit: 5+6+6+2; refused: 2+0+1+2.
	// Limit 100: no key is refused.
	want := []refusal{
		{under: 3, keys: 2, within: 19, refused: 5},
		{under: 4, keys: 0, within: 23, refused: 0},
	}
	if !slices.Equal(refused, want) {
		t.Errorf("refusals %+v, want %+v", refused, want)
	}
	if got := refused[0].keyShare(); math.Abs(got-2.0/3) > 1e-12 {
		t.Errorf("keyShare = %v, want 2/3", got)
	}
	if got := refused[0].eventShare(); math.Abs(got-5.0/19) > 1e-12 {
		t.Errorf("eventShare = %v, want 5/19", got)
	}
	if got := (refusal{}).keyShare(); !math.IsNaN(got) {
		t.Errorf("keyShare with no key within the limit = %v, want NaN", got)
	}

	// A sketch that estimates too low is a bug in the package.
	sk.offset = []int64{0, -1, 0, 0}
	sk.counts = make([]int64, 4)
	if _, _, err := replay(sk, w, nil); err == nil {
		t.Error("replay of a sketch that under-counts succeeded")
	}
}

// TestReplayOneCell replays a stream into real sketches of a single cell,
// in both modes: every estimate is then the number of events so far.
func TestReplayOneCell(t *testing.T) {
	// Keys a, b, c; events a b a c: estimates 1 2 3 4.
	w := &workload{name: "one cell", keys: []string{"a", "b", "c"}, counts: []int64{2, 1, 1}, stream: []int32{0, 1, 0, 2}, events: 4}
	for _, cons := range []bool{false, true} {
		over, refused, err := replay(newSketch(size{1, 1}, cons), w, []int64{1, 2})
		if err != nil {
			t.Fatal(err)
		}
		if want := []int64{2, 3, 3}; !slices.Equal(over, want) {
			t.Errorf("%s: over-counts %v, want %v", modes[mode(cons)], over, want)
		}
		// Limit 1: b and c are within it and both refused (2 and 4), as
		// is their only request; a's first request (1) is not.
		// Limit 2: all three keys are within it; a's second request (3)
		// and c's (4) are refused, b's (2) is not.
		want := []refusal{
			{under: 2, keys: 2, within: 3, refused: 2},
			{under: 3, keys: 2, within: 4, refused: 2},
		}
		if !slices.Equal(refused, want) {
			t.Errorf("%s: refusals %+v, want %+v", modes[mode(cons)], refused, want)
		}
	}
}

func TestSpreadOf(t *testing.T) {
	nan := math.NaN()
	if got, want := spreadOf([]float64{0.2, nan, 0.1, 0.3}), (spread{0.2, 0.1, 0.3}); math.Abs(got.mean-want.mean) > 1e-12 || got.lo != want.lo || got.hi != want.hi {
		t.Errorf("spreadOf = %+v, want %+v", got, want)
	}
	if got := spreadOf([]float64{nan, nan}); !math.IsNaN(got.mean) || !math.IsNaN(got.lo) || !math.IsNaN(got.hi) {
		t.Errorf("spreadOf(all NaN) = %+v, want NaN", got)
	}
}

func TestFormatting(t *testing.T) {
	tests := []struct{ got, want string }{
		{keysRefused(spread{0.5, 0.5, 0.5}), "50.0%"},
		{keysRefused(spread{0.0021, 0.0016, 0.003}), "0.21% (0.16–0.30%)"},
		{keysRefused(spreadOf(nil)), "–"},
		{limitName(1000), "L = 1,000"},
		{memoryList([]size{{4, 1024}, {2, 2048}, {4, 4096}}), "32 KiB and 128 KiB"},
		{memoryList([]size{{4, 1024}}), "32 KiB"},
		{relPath("docs/ACCURACY.md", "docs/accuracy.svg"), "accuracy.svg"},
		{relPath("ACCURACY.md", "accuracy.svg"), "accuracy.svg"},
		{relPath("/tmp/a.md", "/var/a.svg"), "../var/a.svg"},
		{relPath("a.md", "/var/a.svg"), "/var/a.svg"},
		{candidate{size{4, 4096}, true}.String(), "4 x 4096 conservative"},
		{rank(2, 1, "above", "below", "at") + " " + rank(1, 2, "above", "below", "at") + " " + rank(1, 1, "above", "below", "at"), "above below at"},
		{goInt(100000), "100_000"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// TestCheckDefault checks that the report describes NewRate's default.
func TestCheckDefault(t *testing.T) {
	if err := checkDefault(); err != nil {
		t.Error(err)
	}
}

func TestTimeObserve(t *testing.T) {
	c := candidate{size{2, 64}, true}
	costs := timeObserve([]candidate{c})
	for i, ns := range costs[c] {
		if !(ns > 0 && ns < 1e6) {
			t.Errorf("timing %d: %v ns per Observe", i, ns)
		}
	}
}

// TestCrowdNote checks the note on workloads that no candidate serves,
// with outcomes set by hand.
func TestCrowdNote(t *testing.T) {
	z, u := handWorkload(50, 150, 2000), handWorkload(120, 120, 120)
	z.name, u.name = "zipf", "uniform"
	at := func(keys ...float64) outcome {
		o := outcome{stats: stats{mean: 300}}
		for _, k := range keys {
			o.keys = append(o.keys, spread{mean: k})
		}
		return o
	}
	r := &accuracyReport{cfg: config{limits: []int64{100, 1000}}, refusals: []result{
		{load: z, size: rateDefault.size, modes: [2]outcome{at(1, 0.5), at(0.99, 0.002)}},
		{load: z, size: size{2, 8192}, modes: [2]outcome{at(0.995, 0.1), at(0.98, 0.01)}},
		{load: u, size: rateDefault.size, modes: [2]outcome{at(math.NaN(), 1), at(math.NaN(), 0.9998)}},
	}}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	r.crowdNote(w, z, u)
	want := "- With 3 keys a window, every candidate refuses at least 98.0% of the keys within 100 on the zipf workload of 3 keys (the default: 99.0%); " +
		"the lowest mean over-count among them, 300, is above the limit. Within 1,000, the default refuses 0.20% of the keys on the zipf workload of 3 keys " +
		"and 99.98% on the uniform workload of 3 keys. Size such a `Rate` from its keys: `Sizing{Keys: 3, Conservative: true}` gives 4 x 6, 192 B per window.\n"
	if b.String() != want {
		t.Errorf("crowdNote wrote\n%s\nwant\n%s", b.String(), want)
	}

	// A candidate that serves the workload: no note.
	r.refusals[1].modes[1] = at(0.1, 0)
	b.Reset()
	r.crowdNote(w, z, u)
	if b.Len() != 0 {
		t.Errorf("crowdNote wrote %q, want nothing as a candidate serves the workload", b.String())
	}
}
