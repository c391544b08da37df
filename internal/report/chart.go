package report

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Chart is what every chart has: a title and a subtitle at the top, a
// legend under them, the plot, and a note at the foot. BarChart and
// LineChart draw their plots under it.
type Chart struct {
	Title    string // in bold at the top
	Subtitle string // under the title; "" for none
	// Legend names the series: the bars of a BarChart row take the
	// colours of its keys in order; a LineChart's lines have their own
	// keys, and its legend says what their colours and dashes mean.
	Legend []Key
	Note   string // a line of text under the plot; "" for none
}

// Key is the style of a series of bars or of a line, and its entry in a
// legend.
type Key struct {
	Name  string  // the series' name in the legend
	Color string  // an SVG colour, such as "#1b6fb5"
	Dash  string  // a line's stroke-dasharray, such as "8 4"; "" for solid
	Width float64 // a line's stroke width; 0 means 1.5
}

// Axis is an axis of values: its label, its scale and how its ticks read.
type Axis struct {
	Label string // along the axis; "" for none
	// Log is 0 for a linear axis from 0, with ticks on round multiples of
	// Unit; else the base of a logarithmic axis, with ticks on the whole
	// powers of Log between the powers around the values, at most eight.
	Log  float64
	Unit float64 // linear: the ticks' unit, such as 1<<20 for MiB; 0 means 1
	// Min is the lowest value a logarithmic axis shows: lower values, and
	// 0, are drawn at Min. 0 means the lowest positive value plotted.
	Min  float64
	Tick func(v float64) string // a tick's label; nil formats v with %g
}

// Chart geometry shared by both kinds, in SVG user units.
const (
	fontSize   = 12
	charWidth  = 7 // rough width of a character at fontSize, for layout
	legendRow  = 18
	legendLeft = 10
	noteHeight = 20
)

// svg is an SVG document being written.
type svg struct {
	b bytes.Buffer
}

func (s *svg) f(format string, args ...any) { fmt.Fprintf(&s.b, format, args...) }

// text writes a text element at x, y with the given attributes.
func (s *svg) text(x, y float64, attrs, body string) {
	if attrs != "" {
		attrs = " " + attrs
	}
	s.f(`<text x="%s" y="%s"%s>%s</text>`+"\n", num(x), num(y), attrs, esc(body))
}

// line writes a line element.
func (s *svg) line(x1, y1, x2, y2 float64, attrs string) {
	s.f(`<line x1="%s" y1="%s" x2="%s" y2="%s" %s/>`+"\n", num(x1), num(y1), num(x2), num(y2), attrs)
}

// document returns the body wrapped in the svg element of a chart of the
// given size, on a white background.
func document(width, height float64, body *svg) []byte {
	var s svg
	s.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="sans-serif" font-size="%d">`+"\n",
		num(width), num(height), num(width), num(height), fontSize)
	s.f(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	s.b.Write(body.b.Bytes())
	s.f("</svg>\n")
	return s.b.Bytes()
}

// head writes c's title, subtitle and legend across width, with line
// swatches in the legend if lines, else squares, and returns the y where
// the plot may start.
func (c *Chart) head(s *svg, width float64, lines bool) float64 {
	s.text(legendLeft, 22, `font-size="15" font-weight="bold"`, c.Title)
	y := 32.0
	if c.Subtitle != "" {
		s.text(legendLeft, 40, `fill="#555555"`, c.Subtitle)
		y = 50
	}
	x := float64(legendLeft)
	for i, k := range c.Legend {
		swatch := 12.0
		if lines {
			swatch = 26
		}
		w := swatch + 4 + float64(charWidth*len(k.Name)) + 14
		if i > 0 && x+w > width-legendLeft {
			x, y = legendLeft, y+legendRow
		}
		if lines {
			s.line(x, y+6, x+swatch, y+6, k.stroke(k.width()))
		} else {
			s.f(`<rect x="%s" y="%s" width="12" height="12" fill="%s"/>`+"\n", num(x), num(y), esc(k.Color))
		}
		s.text(x+swatch+4, y+10, "", k.Name)
		x += w
	}
	if len(c.Legend) > 0 {
		y += legendRow
	}
	return y + 6
}

// foot writes c's note, if any, at the bottom of a chart of the given
// height, and returns the height the note adds.
func (c *Chart) foot(s *svg, height float64) float64 {
	if c.Note == "" {
		return 0
	}
	s.text(legendLeft, height+noteHeight-6, `fill="#555555"`, c.Note)
	return noteHeight
}

// width returns k's stroke width.
func (k Key) width() float64 {
	if k.Width > 0 {
		return k.Width
	}
	return 1.5
}

// stroke returns the attributes that draw a line in k's style, width
// wide.
func (k Key) stroke(width float64) string {
	a := fmt.Sprintf(`stroke="%s" stroke-width="%s"`, esc(k.Color), num(width))
	if k.Dash != "" {
		a += fmt.Sprintf(` stroke-dasharray="%s"`, esc(k.Dash))
	}
	return a
}

// scale maps the values of an axis onto [0, 1].
type scale struct {
	log    float64   // base, or 0 for linear
	lo, hi float64   // the ends: values if linear, exponents if log
	min    float64   // log: values below are drawn at it
	ticks  []float64 // values
	label  func(float64) string
}

// newScale returns the scale of axis a for the values plotted on it; NaN
// and infinite values are ignored.
func newScale(a Axis, values []float64) scale {
	sc := scale{log: a.Log, label: a.Tick}
	if sc.label == nil {
		sc.label = func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range values {
		if math.IsNaN(v) || math.IsInf(v, 0) || (a.Log > 0 && v <= 0) {
			continue
		}
		lo, hi = min(lo, v), max(hi, v)
	}
	if a.Log <= 1 {
		unit := a.Unit
		if unit <= 0 {
			unit = 1
		}
		step, top := niceAxis(max(hi, 0) / unit)
		step, top = step*unit, top*unit
		sc.log, sc.lo, sc.hi = 0, 0, top
		for i := 0; float64(i)*step <= top*(1+1e-9); i++ {
			sc.ticks = append(sc.ticks, float64(i)*step)
		}
		return sc
	}
	if a.Min > 0 {
		lo = a.Min
	}
	if math.IsInf(lo, 1) { // nothing to plot
		lo, hi = 1, a.Log
	}
	hi = max(hi, lo)
	logb := func(v float64) float64 { return math.Log(v) / math.Log(a.Log) }
	sc.min = lo
	sc.lo = math.Floor(logb(lo) + 1e-9)
	sc.hi = math.Ceil(logb(hi) - 1e-9)
	if sc.hi <= sc.lo {
		sc.hi = sc.lo + 1
	}
	every := math.Ceil((sc.hi - sc.lo + 1) / 8)
	for e := sc.lo; e <= sc.hi; e++ {
		if math.Mod(e, every) == 0 {
			sc.ticks = append(sc.ticks, math.Pow(a.Log, e))
		}
	}
	return sc
}

// at returns where v lies on the scale, from 0 at the low end to 1 at the
// high end.
func (sc scale) at(v float64) float64 {
	if sc.log == 0 {
		return v / sc.hi
	}
	e := math.Log(max(v, sc.min)) / math.Log(sc.log)
	return (e - sc.lo) / (sc.hi - sc.lo)
}

// niceAxis returns a round tick step and the axis end, a multiple of it,
// for values up to maxV: at most five or so ticks past 0.
func niceAxis(maxV float64) (step, top float64) {
	if maxV <= 0 || math.IsNaN(maxV) {
		return 1, 1
	}
	raw := maxV / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step = 10 * mag
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	return step, math.Ceil(maxV/step) * step
}

// num formats a coordinate with at most one decimal.
func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}

// esc returns s escaped for SVG text and attribute values.
func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s)) // writes to a strings.Builder cannot fail
	return b.String()
}

// BarChart is a chart of horizontal bars: a row per item, labelled on the
// left, with one bar per key of the legend, in its colour, and the bar's
// value at its end. The zero value draws an empty chart.
type BarChart struct {
	Chart
	Rows []BarRow // from the top down
	// Value is the axis of the bars' values, along the bottom. A bar's
	// label is the value formatted by Format, or by Value.Tick if
	// Format is nil.
	Value  Axis
	Format func(float64) string
}

// BarRow is a row of a BarChart.
type BarRow struct {
	Label string // on the left of the bars
	Bold  bool   // sets the label in bold, to single out a row
	// Group tells which rows belong together: a dashed line separates
	// adjacent rows of different groups.
	Group int
	// Values holds a bar per key of the legend, in order; NaN draws no
	// bar but "n/a".
	Values []float64
}

// BarChart geometry.
const (
	barChartWidth = 820
	labelRight    = 220 // row labels end here
	barLeft       = 228 // bars start here
	barSpan       = 470 // length of a bar at the end of the axis
	barHeight     = 12
	barGap        = 2
	rowGap        = 9
)

// SVG returns the chart as an SVG document.
func (c *BarChart) SVG() []byte {
	var values []float64
	for _, r := range c.Rows {
		values = append(values, r.Values...)
	}
	sc := newScale(c.Value, values)
	format := c.Format
	if format == nil {
		format = sc.label
	}
	bars := max(len(c.Legend), 1)
	for _, r := range c.Rows {
		bars = max(bars, len(r.Values))
	}
	rowH := float64(bars*(barHeight+barGap) - barGap + rowGap)
	x := func(v float64) float64 { return barLeft + sc.at(v)*barSpan }

	var s svg
	top := c.head(&s, barChartWidth, false)
	bottom := top + float64(len(c.Rows))*rowH + 2
	for _, v := range sc.ticks {
		s.line(x(v), top-6, x(v), bottom, `stroke="#dddddd"`)
		s.text(x(v), bottom+14, `text-anchor="middle" fill="#555555"`, sc.label(v))
	}
	height := bottom + 28
	if c.Value.Label != "" {
		s.text(barLeft+barSpan/2, bottom+32, `text-anchor="middle"`, c.Value.Label)
		height += 18
	}
	y := top
	for i, r := range c.Rows {
		if i > 0 && r.Group != c.Rows[i-1].Group {
			s.line(10, y-rowGap/2-1, barChartWidth-10, y-rowGap/2-1, `stroke="#bbbbbb" stroke-dasharray="3,3"`)
		}
		attrs := `text-anchor="end"`
		if r.Bold {
			attrs += ` font-weight="bold"`
		}
		s.text(labelRight, y+(rowH-rowGap)/2+4, attrs, r.Label)
		for j, v := range r.Values {
			by := y + float64(j*(barHeight+barGap))
			if math.IsNaN(v) {
				s.text(barLeft+4, by+barHeight-2, `fill="#555555"`, na)
				continue
			}
			color := "#4e79a7"
			if j < len(c.Legend) {
				color = c.Legend[j].Color
			}
			bw := max(x(v)-barLeft, 1)
			s.f(`<rect x="%d" y="%s" width="%s" height="%d" fill="%s"/>`+"\n", barLeft, num(by), num(bw), barHeight, esc(color))
			s.text(barLeft+bw+4, by+barHeight-2, `font-size="11"`, format(v))
		}
		y += rowH
	}
	height += c.foot(&s, height)
	return document(barChartWidth, height, &s)
}

// LineChart is a chart of lines, in one or more panels side by side that
// share their axes. The zero value draws an empty chart.
type LineChart struct {
	Chart
	X, Y   Axis    // shared by the panels
	Panels []Panel // from left to right
}

// Panel is one plot of a LineChart.
type Panel struct {
	Title string // above the plot
	Lines []Line
}

// Line is a line of a Panel, drawn in the style of its Key, whose Name
// shows when the pointer rests on it.
type Line struct {
	Key
	Points []Point // joined in order
}

// Point is a point of a Line, in the values of the axes.
type Point struct{ X, Y float64 }

// LineChart geometry.
const (
	panelWidth  = 440
	panelHeight = 320
	panelLeft   = 64 // room for the first panel's tick labels and axis label
	panelGap    = 80 // between panels, and after the last one
	panelHead   = 24 // a panel's title above it
	panelFoot   = 52 // tick labels and axis label below it
)

// SVG returns the chart as an SVG document.
func (c *LineChart) SVG() []byte {
	var xs, ys []float64
	for _, p := range c.Panels {
		for _, l := range p.Lines {
			for _, pt := range l.Points {
				xs, ys = append(xs, pt.X), append(ys, pt.Y)
			}
		}
	}
	sx, sy := newScale(c.X, xs), newScale(c.Y, ys)
	width := float64(panelLeft + max(len(c.Panels), 1)*(panelWidth+panelGap))

	var s svg
	top := c.head(&s, width, true) + panelHead
	for i, p := range c.Panels {
		left := float64(panelLeft + i*(panelWidth+panelGap))
		px := func(v float64) float64 { return left + sx.at(v)*panelWidth }
		py := func(v float64) float64 { return top + (1-sy.at(v))*panelHeight }
		s.text(left, top-10, `font-size="13" font-weight="bold"`, p.Title)
		s.f(`<rect x="%s" y="%s" width="%d" height="%d" fill="none" stroke="#888888"/>`+"\n", num(left), num(top), panelWidth, panelHeight)
		for _, v := range sy.ticks {
			s.line(left, py(v), left+panelWidth, py(v), `stroke="#dddddd"`)
			s.text(left-6, py(v)+4, `text-anchor="end"`, sy.label(v))
		}
		for _, v := range sx.ticks {
			s.line(px(v), top, px(v), top+panelHeight, `stroke="#dddddd"`)
			s.text(px(v), top+panelHeight+16, `text-anchor="middle"`, sx.label(v))
		}
		if c.X.Label != "" {
			s.text(left+panelWidth/2, top+panelHeight+36, `text-anchor="middle"`, c.X.Label)
		}
		if c.Y.Label != "" {
			s.f(`<text transform="translate(%s %s) rotate(-90)" text-anchor="middle">%s</text>`+"\n",
				num(left-44), num(top+panelHeight/2), esc(c.Y.Label))
		}
		for _, l := range p.Lines {
			pts := make([]string, len(l.Points))
			for j, pt := range l.Points {
				pts[j] = num(px(pt.X)) + "," + num(py(pt.Y))
			}
			s.f(`<polyline fill="none" %s points="%s"><title>%s</title></polyline>`+"\n",
				l.stroke(l.width()), strings.Join(pts, " "), esc(l.Name))
		}
	}
	height := top + panelHeight + panelFoot
	height += c.foot(&s, height)
	return document(width, height, &s)
}
