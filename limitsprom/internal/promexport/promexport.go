// Package promexport makes the prometheus.Collector of a metrics.Set, for
// package limitsprom.
package promexport

import (
	"errors"
	"unicode/utf8"

	"github.com/limitsgo/limits/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// nameLabel is the label every metric carries, set to the name its
// component was registered under.
const nameLabel = "name"

// Collector returns the collector of set, whose metrics are labelled
// name="<name>". An empty or invalid UTF-8 name makes a collector whose
// registration fails with an error prefixed pkg.
func Collector(pkg, name string, set metrics.Set) prometheus.Collector {
	if err := CheckName(pkg, name); err != nil {
		return &collector{invalid: prometheus.NewInvalidDesc(err)}
	}
	c := &collector{set: set, descs: make([]*prometheus.Desc, len(set.Metrics))}
	for i, m := range set.Metrics {
		c.descs[i] = prometheus.NewDesc(m.Prometheus(), m.Help, m.Labels, prometheus.Labels{nameLabel: name})
	}
	return c
}

// CheckName returns an error prefixed pkg if name cannot be a
// component's name: empty, or not UTF-8.
func CheckName(pkg, name string) error {
	if name == "" || !utf8.ValidString(name) {
		return errors.New(pkg + ": the name must be a non-empty UTF-8 string")
	}
	return nil
}

// collector is the prometheus.Collector of one component: the
// descriptions of its metrics, and the Set that reads them.
type collector struct {
	set     metrics.Set
	descs   []*prometheus.Desc // of set.Metrics, in order
	invalid *prometheus.Desc   // set instead for an invalid name
}

// Describe sends the descriptions of every metric c collects.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	if c.invalid != nil {
		ch <- c.invalid
		return
	}
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect reads the component and sends its metrics.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	if c.invalid == nil {
		c.set.Read(emitter{c, ch})
	}
}

// emitter sends the values a Set reads as constant metrics.
type emitter struct {
	c  *collector
	ch chan<- prometheus.Metric
}

var valueTypes = [...]prometheus.ValueType{metrics.Counter: prometheus.CounterValue, metrics.Gauge: prometheus.GaugeValue}

// Value sends the value of a counter or a gauge. An error, which the
// descriptions made here cannot cause, is sent as an invalid metric, for
// the registry to report.
func (e emitter) Value(m int, v int64, labels ...string) {
	e.Float(m, float64(v), labels...)
}

// Float sends the value of a counter or a gauge in seconds, as Value does.
func (e emitter) Float(m int, v float64, labels ...string) {
	d := e.c.descs[m]
	metric, err := prometheus.NewConstMetric(d, valueTypes[e.c.set.Metrics[m].Kind], v, labels...)
	if err != nil {
		metric = prometheus.NewInvalidMetric(d, err)
	}
	e.ch <- metric
}

// Histogram sends the value of a histogram.
func (e emitter) Histogram(m int, count uint64, sum float64, bounds []float64, cumulative []uint64) {
	d := e.c.descs[m]
	buckets := make(map[float64]uint64, len(bounds))
	for i, b := range bounds {
		buckets[b] = cumulative[i]
	}
	metric, err := prometheus.NewConstHistogram(d, count, sum, buckets)
	if err != nil {
		metric = prometheus.NewInvalidMetric(d, err)
	}
	e.ch <- metric
}
