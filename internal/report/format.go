// Package report formats the figures, markdown tables and SVG charts of
// the commands that write this module's reports (cmd/limits-accuracy and
// the benchmark report of the bench module), so that they read alike.
//
// It uses the standard library only. Formatters return "n/a" for NaN, which
// the commands use for a figure that was not measured.
package report

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// na is what a formatter returns for NaN, a figure not measured.
const na = "n/a"

// Group formats n with a comma between groups of three digits: 973,855.
func Group(n int64) string {
	s := strconv.FormatInt(n, 10)
	sign := ""
	if n < 0 {
		sign, s = "-", s[1:]
	}
	var b strings.Builder
	b.WriteString(sign)
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Float formats v as a whole number, grouped as by Group, if its
// magnitude is 100 or more, and with the given number of decimals below
// that: the precision a measured figure deserves, rounded half to even.
// Float(211.94, 2) is "212", Float(4.567, 2) "4.57", Float(13150, 2)
// "13,150".
func Float(v float64, decimals int) string {
	switch {
	case math.IsNaN(v):
		return na
	case math.IsInf(v, 0) || math.Abs(v) >= 1<<63:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case math.Abs(v) >= 100:
		return Group(int64(math.RoundToEven(v)))
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// Ns formats a time in nanoseconds, as Float does with one decimal:
// "123", "23.4".
func Ns(ns float64) string { return Float(ns, 1) }

// Bytes formats a size in bytes in B, KiB, MiB or GiB, whichever keeps
// the figure below 1024, with one decimal unless it is 0: "512 B",
// "1.5 KiB", "32 KiB", "70.4 MiB".
func Bytes(b float64) string {
	if math.IsNaN(b) {
		return na
	}
	if math.Abs(b) < 1024 {
		return strconv.FormatFloat(b, 'f', 0, 64) + " B"
	}
	v, unit := b, ""
	for _, u := range []string{"KiB", "MiB", "GiB"} {
		v, unit = v/1024, u
		// Move up while the figure would print as 1024 or more.
		if math.Abs(v) < 1024-0.05 {
			break
		}
	}
	s := strconv.FormatFloat(v, 'f', 1, 64)
	return strings.TrimSuffix(s, ".0") + " " + unit
}

// Ratio formats x/base to about two significant digits: "15", "0.50",
// "0.00033". It returns "n/a" if either is NaN or base is 0.
func Ratio(x, base float64) string {
	if math.IsNaN(x) || math.IsNaN(base) || base == 0 {
		return na
	}
	q := x / base
	switch a := math.Abs(q); {
	case a >= 10:
		return strconv.FormatFloat(q, 'f', 0, 64)
	case a >= 0.1:
		return strconv.FormatFloat(q, 'f', 2, 64)
	default:
		return strconv.FormatFloat(q, 'g', 2, 64)
	}
}

// Percent formats a share, 0.25 for a quarter, as a percentage: with one
// decimal from 10% up, two significant digits below ("4.3%", "0.27%"), and
// "0%" for none at all, so that a rare event does not print as 0.0%; a
// share just short of all gets the decimals that keep it short of 100%.
func Percent(share float64) string {
	if math.IsNaN(share) {
		return na
	}
	p := 100 * share
	a := math.Abs(p)
	if a == 0 {
		return "0%"
	}
	decimals := 1
	if a < 9.95 {
		decimals = 1 - int(math.Floor(math.Log10(a)))
	}
	// Nearly all is not all: 99.996% prints so, not as 100.0%.
	for a < 100 && decimals < 6 && math.Round(a*math.Pow10(decimals)) >= 100*math.Pow10(decimals) {
		decimals++
	}
	return strconv.FormatFloat(p, 'f', decimals, 64) + "%"
}

// WriteFile writes data to the file name, creating it and its directory
// if need be, and truncating it otherwise.
func WriteFile(name string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	return os.WriteFile(name, data, 0o644)
}
