package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestFormat(t *testing.T) {
	nan := math.NaN()
	tests := []struct{ got, want string }{
		{Group(0), "0"},
		{Group(999), "999"},
		{Group(1000), "1,000"},
		{Group(973855), "973,855"},
		{Group(1000000), "1,000,000"},
		{Group(-1234567), "-1,234,567"},
		{Float(211.94, 2), "212"},
		{Float(4.567, 2), "4.57"},
		{Float(0, 2), "0.00"},
		{Float(-150.4, 1), "-150"},
		{Float(99.994, 2), "99.99"},
		{Float(13150.4, 2), "13,150"},
		{Float(math.Inf(1), 2), "+Inf"},
		{Float(1e300, 2), "1e+300"},
		{Float(nan, 2), "n/a"},
		{Ns(123.4), "123"},
		{Ns(23.45), "23.4"},
		{Ns(100), "100"},
		{Ns(1234.5), "1,234"}, // half to even, as strconv rounds
		{Ns(1235.5), "1,236"},
		{Ns(nan), "n/a"},
		{Bytes(0), "0 B"},
		{Bytes(512), "512 B"},
		{Bytes(1023), "1023 B"},
		{Bytes(1024), "1 KiB"},
		{Bytes(1536), "1.5 KiB"},
		{Bytes(32 << 10), "32 KiB"},
		{Bytes(33792), "33 KiB"},
		{Bytes(4 * 26589 * 8), "830.9 KiB"},
		{Bytes(1<<20 - 1), "1 MiB"},
		{Bytes(1<<20 + 1<<19), "1.5 MiB"},
		{Bytes(70 << 20), "70 MiB"},
		{Bytes(3 << 30), "3 GiB"},
		{Bytes(nan), "n/a"},
		{Ratio(50, 100), "0.50"},
		{Ratio(1, 3000), "0.00033"},
		{Ratio(1500, 100), "15"},
		{Ratio(1, 0), "n/a"},
		{Ratio(nan, 1), "n/a"},
		{Ratio(1, nan), "n/a"},
		{Percent(0), "0%"},
		{Percent(1), "100.0%"},
		{Percent(0.953), "95.3%"},
		{Percent(0.0996), "10.0%"},
		{Percent(0.043), "4.3%"},
		{Percent(0.0027), "0.27%"},
		{Percent(0.000041), "0.0041%"},
		{Percent(0.99996), "99.996%"},
		{Percent(0.9999999), "99.99999%"},
		{Percent(-0.5), "-50.0%"},
		{Percent(nan), "n/a"},
	}
	for i, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("case %d: got %q, want %q", i, tt.got, tt.want)
		}
	}
}

func TestTable(t *testing.T) {
	tb := NewTable(Text("size"), Num("mean"), Text("note"))
	tb.Row("4 x 1024", "211", "a|b")
	tb.Row("2 x 2048", "80.24", "two\nlines")
	want := "| size | mean | note |\n" +
		"| --- | ---: | --- |\n" +
		"| 4 x 1024 | 211 | a\\|b |\n" +
		"| 2 x 2048 | 80.24 | two lines |\n"
	if got := tb.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
	if tb.Len() != 2 {
		t.Errorf("Len() = %d, want 2", tb.Len())
	}
	defer func() {
		if recover() == nil {
			t.Error("Row with too few cells did not panic")
		}
	}()
	tb.Row("one")
}

func TestNiceAxis(t *testing.T) {
	tests := []struct{ max, step, top float64 }{
		{0, 1, 1},
		{math.NaN(), 1, 1},
		{889, 200, 1000},
		{100, 20, 100},
		{101, 25, 125},
		{184.5, 50, 200},
		{0.3, 0.1, 0.3},
	}
	for _, tt := range tests {
		step, top := niceAxis(tt.max)
		if math.Abs(step-tt.step) > 1e-9 || math.Abs(top-tt.top) > 1e-9 {
			t.Errorf("niceAxis(%v) = %v, %v; want %v, %v", tt.max, step, top, tt.step, tt.top)
		}
	}
}

func TestScale(t *testing.T) {
	// Linear, in MiB: values up to 70 MiB give ticks 0, 20, ..., 80 MiB.
	lin := newScale(Axis{Unit: 1 << 20}, []float64{math.NaN(), 33792, 70 << 20})
	if want := []float64{0, 20 << 20, 40 << 20, 60 << 20, 80 << 20}; !slices.Equal(lin.ticks, want) {
		t.Errorf("linear ticks %v, want %v", lin.ticks, want)
	}
	if got := lin.at(40 << 20); got != 0.5 {
		t.Errorf("linear at(40 MiB) = %v, want 0.5", got)
	}
	// Logarithmic from a floor: 0 and values below it sit on the floor.
	lg := newScale(Axis{Log: 10, Min: 0.01}, []float64{0, 0.001, 3786})
	if want := []float64{0.01, 0.1, 1, 10, 100, 1000, 10000}; !slices.EqualFunc(lg.ticks, want, close) {
		t.Errorf("log ticks %v, want %v", lg.ticks, want)
	}
	if lg.at(0) != 0 || lg.at(0.001) != 0 || lg.at(10000) != 1 {
		t.Errorf("log at(0), at(0.001), at(10000) = %v, %v, %v, want 0, 0, 1", lg.at(0), lg.at(0.001), lg.at(10000))
	}
	// 12 powers of 2 are thinned to the even ones.
	l2 := newScale(Axis{Log: 2}, []float64{2 << 10, 4 << 20})
	if want := []float64{4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20}; !slices.EqualFunc(l2.ticks, want, close) {
		t.Errorf("log2 ticks %v, want %v", l2.ticks, want)
	}
	// A single value still spans one power.
	if one := newScale(Axis{Log: 10}, []float64{5}); one.hi-one.lo != 1 {
		t.Errorf("one value spans %v powers, want 1", one.hi-one.lo)
	}
}

func close(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Abs(b) }

// elements parses doc as XML and returns its root element's name and
// namespace and the number of elements of each name, or an error if doc
// is not well-formed.
func elements(doc []byte) (root xml.Name, count map[string]int, texts []string, err error) {
	count = map[string]int{}
	d := xml.NewDecoder(bytes.NewReader(doc))
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return root, count, texts, nil
		}
		if err != nil {
			return root, nil, nil, err
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root.Local == "" {
				root = tok.Name
			}
			count[tok.Name.Local]++
		case xml.CharData:
			if s := strings.TrimSpace(string(tok)); s != "" {
				texts = append(texts, s)
			}
		}
	}
}

func checkSVG(t *testing.T, name string, doc []byte, want map[string]int, wantTexts []string) {
	t.Helper()
	root, count, texts, err := elements(doc)
	if err != nil {
		t.Fatalf("%s: not well-formed XML: %v\n%s", name, err, doc)
	}
	if root.Local != "svg" || root.Space != "http://www.w3.org/2000/svg" {
		t.Errorf("%s: root element %v, want svg in the SVG namespace", name, root)
	}
	for el, n := range want {
		if count[el] != n {
			t.Errorf("%s: %d %s elements, want %d", name, count[el], el, n)
		}
	}
	for _, w := range wantTexts {
		if !slices.Contains(texts, w) {
			t.Errorf("%s: no text %q among %q", name, w, texts)
		}
	}
}

func TestBarChart(t *testing.T) {
	c := BarChart{
		Chart: Chart{
			Title:    "Time per call <lower is better>",
			Subtitle: "median ns/op",
			Legend:   []Key{{Name: "1 goroutine", Color: "#4e79a7"}, {Name: "8 goroutines", Color: "#f28e2b"}},
			Note:     "a note & more",
		},
		Rows: []BarRow{
			{Label: "sync.Mutex + map", Values: []float64{120, 250}},
			{Label: "limits.Estimator", Bold: true, Group: 1, Values: []float64{23, math.NaN()}},
		},
		Value:  Axis{Label: "ns per call", Tick: func(v float64) string { return Ns(v) + " ns" }},
		Format: Ns,
	}
	doc := c.SVG()
	// A background and a legend square per key, and three bars (one value
	// is NaN); ticks 0, 50, ..., 250: a line each, with the separator
	// between the groups.
	checkSVG(t, "bar chart", doc, map[string]int{"svg": 1, "rect": 1 + 2 + 3, "line": 6 + 1},
		[]string{"Time per call <lower is better>", "median ns/op", "1 goroutine", "8 goroutines",
			"sync.Mutex + map", "limits.Estimator", "120", "250", "23.0", "n/a", "250 ns", "ns per call", "a note & more"})
	if !bytes.Contains(doc, []byte(`font-weight="bold">limits.Estimator<`)) {
		t.Error("bar chart: the bold row's label is not bold")
	}
	// The 250 bar is the full span, the 120 bar about half of it.
	if !bytes.Contains(doc, []byte(`width="470" height="12" fill="#f28e2b"`)) || !bytes.Contains(doc, []byte(`width="225.6" height="12" fill="#4e79a7"`)) {
		t.Errorf("bar chart: bars not to scale:\n%s", doc)
	}
}

func TestLineChart(t *testing.T) {
	c := LineChart{
		Chart: Chart{
			Title:  "Mean over-count",
			Legend: []Key{{Name: "plain", Color: "#d95f02", Width: 3}, {Name: "4 hashes", Color: "#444444", Dash: "8 4"}},
			Note:   "A line ends where it drops below 0.01.",
		},
		X: Axis{Label: "memory", Log: 2, Tick: func(v float64) string { return Bytes(v) }},
		Y: Axis{Label: "mean over-count", Log: 10, Min: 0.01},
		Panels: []Panel{
			{Title: "zipf", Lines: []Line{
				{Key: Key{Name: "plain, 4 hashes", Color: "#d95f02", Dash: "8 4"}, Points: []Point{{2048, 3786}, {4096, 1929}, {8192, 0}}},
			}},
			{Title: "uniform", Lines: []Line{
				{Key: Key{Name: "plain, 4 hashes", Color: "#d95f02"}, Points: []Point{{2048, 3805}, {8192, 12}}},
			}},
		},
	}
	doc := c.SVG()
	// Per panel: y ticks 0.01 to 10,000 (7) and x ticks 2, 4, 8 KiB (3),
	// a grid line each, and a frame; a legend line per key.
	checkSVG(t, "line chart", doc, map[string]int{"svg": 1, "polyline": 2, "title": 2, "rect": 1 + 2, "line": 2*(7+3) + 2, "text": 1 + 2 + 2*(1+7+3+2) + 1},
		[]string{"Mean over-count", "zipf", "uniform", "plain", "4 hashes", "2 KiB", "8 KiB", "0.01", "10000",
			"memory", "mean over-count", "plain, 4 hashes", "A line ends where it drops below 0.01."})
	for _, want := range []string{`stroke-dasharray="8 4"`, `stroke-width="3"`, `rotate(-90)`} {
		if !bytes.Contains(doc, []byte(want)) {
			t.Errorf("line chart lacks %s", want)
		}
	}
	// The point at 0 sits on the floor, the bottom of the panel.
	if !bytes.Contains(doc, []byte(" 504,400\"")) {
		t.Errorf("line chart: the point below the floor is not on the panel's bottom edge:\n%s", doc)
	}
}

func TestEmptyCharts(t *testing.T) {
	checkSVG(t, "empty bar chart", (&BarChart{}).SVG(), map[string]int{"svg": 1}, nil)
	checkSVG(t, "empty line chart", (&LineChart{}).SVG(), map[string]int{"svg": 1}, nil)
}

func TestWriteFile(t *testing.T) {
	name := filepath.Join(t.TempDir(), "a", "b", "c.md")
	if err := WriteFile(name, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(name, []byte("y")); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(name); err != nil || string(got) != "y" {
		t.Errorf("file holds %q, %v; want \"y\"", got, err)
	}
	if err := WriteFile(filepath.Join(name, "d"), nil); err == nil {
		t.Error("WriteFile under a file succeeded")
	}
}

func TestPercentile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.1, 1}, {0.5, 5}, {0.55, 6}, {0.9, 9}, {0.99, 10}, {1, 10}} {
		if got := Percentile(ds, tc.q); got != tc.want {
			t.Errorf("Percentile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := Percentile(nil, 0.5); got != 0 {
		t.Errorf("Percentile of none = %v", got)
	}
}
