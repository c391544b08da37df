package main

import (
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunTiny runs the whole command on a small workload and checks that
// the report has every row and the chart is well-formed SVG with every line.
func TestRunTiny(t *testing.T) {
	dir := t.TempDir()
	cfg := config{
		keys:   300,
		trials: 2,
		hashes: []int{1, 2},
		slots:  []int{16, 64, 256},
		md:     filepath.Join(dir, "out", "ACCURACY.md"),
		svg:    filepath.Join(dir, "out", "accuracy.svg"),
	}
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
		"## zipf\n", "## uniform\n", "## Sizing\n",
		"| 1 x 16 | 128 B |", "| 2 x 256 | 4 KiB |",
		"**zipf**: 300 keys",
		"(accuracy.svg)",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// Two workloads of 2 x 3 sizes, and 4 sizings per workload, each
	// table with a header and a separator row.
	if got, want := strings.Count(string(md), "\n| "), 2*(2+6)+(2+8); got != want {
		t.Errorf("report has %d table rows (headers included), want %d", got, want)
	}

	f, err := os.Open(cfg.svg)
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
			t.Fatalf("chart is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok {
			if root == "" {
				root = se.Name.Local
				if se.Name.Space != "http://www.w3.org/2000/svg" {
					t.Errorf("root namespace %q, want the SVG namespace", se.Name.Space)
				}
			}
			elems[se.Name.Local]++
		}
	}
	if root != "svg" {
		t.Errorf("root element %q, want svg", root)
	}
	// One line per workload, mode and hashes.
	if got, want := elems["polyline"], 2*2*2; got != want {
		t.Errorf("chart has %d lines, want %d", got, want)
	}
}

func TestRunRejects(t *testing.T) {
	dir := t.TempDir()
	ok := config{keys: 10, trials: 1, hashes: []int{2}, slots: []int{8}, md: filepath.Join(dir, "a.md"), svg: filepath.Join(dir, "a.svg")}
	tests := []struct {
		name string
		edit func(*config)
	}{
		{"one key", func(c *config) { c.keys = 1 }},
		{"no trials", func(c *config) { c.trials = 0 }},
		{"no hashes", func(c *config) { c.hashes = nil }},
		{"17 hashes", func(c *config) { c.hashes = []int{17} }},
		{"unwritable", func(c *config) { c.md = filepath.Join(dir, "a.svg", "x.md") }},
	}
	if err := os.WriteFile(filepath.Join(dir, "a.svg"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		c := ok
		tt.edit(&c)
		if err := run(c, io.Discard); err == nil {
			t.Errorf("%s: run succeeded, want an error", tt.name)
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
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		over []int64
		want stats
	}{
		{[]int64{0, 0, 1, 5}, stats{exact: 50, mean: 1.5, p99: 5, max: 5}},
		{[]int64{0}, stats{exact: 100}},
		{append(make([]int64, 99), 7), stats{exact: 99, mean: 0.07, p99: 0, max: 7}},
		{append(make([]int64, 98), 3, 7), stats{exact: 98, mean: 0.1, p99: 3, max: 7}},
	}
	for _, tt := range tests {
		if got := summarize(tt.over); got != tt.want {
			t.Errorf("summarize(%v) = %+v, want %+v", tt.over, got, tt.want)
		}
	}
}

func TestFormatting(t *testing.T) {
	tests := []struct{ got, want string }{
		{memory(128), "128 B"},
		{memory(2048), "2 KiB"},
		{memory(3 << 20), "3 MiB"},
		{memory(1536), "1.5 KiB"},
		{memory(4 * 26589 * 8), "830.9 KiB"},
		{memory(1<<20 + 1<<19), "1.5 MiB"},
		{group(973855), "973,855"},
		{group(100), "100"},
		{group(1000000), "1,000,000"},
		{num(211.94), "212"},
		{num(4.567), "4.57"},
		{esc(`a<b & "c"`), "a&lt;b &amp; &#34;c&#34;"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
