package limitsprom

import (
	"errors"
	"unicode/utf8"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/limitsprom/internal/series"
	"github.com/limitsgo/limits/redislimit"
	"github.com/prometheus/client_golang/prometheus"
)

// nameLabel is the label every metric carries, set to the name its
// component was registered under.
const nameLabel = "name"

// Component is the set of types whose counters this package exports: the
// Gate and the GCRA of package limits, the net/http Middleware of package
// httplimit and the Redis GCRA of package redislimit.
type Component interface {
	*limits.Gate | *limits.GCRA | *httplimit.Middleware | *redislimit.GCRA
}

// NewCollector returns a prometheus.Collector that exports c's counters
// under the metric names of its kind (see the package documentation),
// each labelled name="<name>".
//
// The collector reads c's snapshot (its Stats method; also CallStats for a
// Redis GCRA, and Len, MaxKeys and TableFull for a GCRA) each time it is
// collected, and keeps nothing in between: serving a request through c
// costs the same with or without it.
// It is safe for concurrent use, as c is.
//
// name tells components of a kind apart: several may be registered side
// by side under different names, and registering two of a kind under one
// name fails. It must be a non-empty UTF-8 string; otherwise registering
// the collector returns an error saying so. NewCollector panics if c is
// nil, a programming error.
func NewCollector[C Component](name string, c C) prometheus.Collector {
	set, ok := series.For(c)
	if !ok {
		panic("limitsprom: nil component")
	}
	if name == "" || !utf8.ValidString(name) {
		return &collector{invalid: prometheus.NewInvalidDesc(errBadName)}
	}
	col := &collector{set: set, descs: make([]*prometheus.Desc, len(set.Metrics))}
	for i, m := range set.Metrics {
		col.descs[i] = prometheus.NewDesc(m.Prometheus(), m.Help, m.Labels, prometheus.Labels{nameLabel: name})
	}
	return col
}

// errBadName is the registration error of a collector with an invalid
// name.
var errBadName = errors.New("limitsprom: the name must be a non-empty UTF-8 string")

// Register registers NewCollector(name, c) with reg, and returns reg's
// error, if any: an invalid name, or a component of the same kind already
// registered under name.
//
// To add labels to every metric of a component, such as the service or
// the region, register it with a registerer made by
// prometheus.WrapRegistererWith.
func Register[C Component](reg prometheus.Registerer, name string, c C) error {
	return reg.Register(NewCollector(name, c))
}

// collector is the prometheus.Collector of one component: the
// descriptions of its metrics, and the Set that reads them.
type collector struct {
	set     series.Set
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

var valueTypes = [...]prometheus.ValueType{series.Counter: prometheus.CounterValue, series.Gauge: prometheus.GaugeValue}

// Value sends the value of a counter or a gauge. An error, which the
// descriptions made here cannot cause, is sent as an invalid metric, for
// the registry to report.
func (e emitter) Value(m int, v int64, labels ...string) {
	d := e.c.descs[m]
	metric, err := prometheus.NewConstMetric(d, valueTypes[e.c.set.Metrics[m].Kind], float64(v), labels...)
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
