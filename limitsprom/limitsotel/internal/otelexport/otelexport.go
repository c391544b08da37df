// Package otelexport registers the OpenTelemetry instruments of a
// metrics.Set, for package limitsotel.
package otelexport

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/limitsgo/limits/metrics"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Register creates the instruments of set on meter, or takes those meter
// has already, and registers a callback that observes them with the
// attribute name=<name>. Its errors are prefixed pkg.
func Register(pkg string, meter metric.Meter, name string, set metrics.Set) (metric.Registration, error) {
	if name == "" || !utf8.ValidString(name) {
		return nil, errors.New(pkg + ": the name must be a non-empty UTF-8 string")
	}
	insts := make([]metric.Observable, len(set.Metrics))
	var observed []metric.Observable
	for i, m := range set.Metrics {
		var err error
		switch {
		case m.Kind == metrics.Counter && m.Unit == "s":
			insts[i], err = meter.Float64ObservableCounter(m.OTel(), metric.WithDescription(m.Help), metric.WithUnit(m.Unit))
		case m.Kind == metrics.Counter:
			insts[i], err = meter.Int64ObservableCounter(m.OTel(), metric.WithDescription(m.Help), metric.WithUnit(m.Unit))
		case m.Kind == metrics.Gauge:
			insts[i], err = meter.Int64ObservableGauge(m.OTel(), metric.WithDescription(m.Help), metric.WithUnit(m.Unit))
		default:
			continue // no asynchronous histogram
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", pkg, m.OTel(), err)
		}
		observed = append(observed, insts[i])
	}
	o := &observer{set: set, insts: insts, name: attribute.String("name", name)}
	r, err := meter.RegisterCallback(o.observe, observed...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pkg, err)
	}
	return r, nil
}

// observer observes one component's instruments.
type observer struct {
	set   metrics.Set
	insts []metric.Observable // of set.Metrics, in order; nil for histograms
	name  attribute.KeyValue
	o     metric.Observer // during observe
}

func (o *observer) observe(_ context.Context, obs metric.Observer) error {
	// A copy for this collection: collections for several readers may
	// run at once.
	e := *o
	e.o = obs
	o.set.Read(&e)
	return nil
}

// Value observes the value of a counter or a gauge.
func (o *observer) Value(m int, v int64, labels ...string) {
	o.o.ObserveInt64(o.insts[m].(metric.Int64Observable), v, o.attrs(m, labels))
}

// Float observes the value of a counter in seconds.
func (o *observer) Float(m int, v float64, labels ...string) {
	o.o.ObserveFloat64(o.insts[m].(metric.Float64Observable), v, o.attrs(m, labels))
}

// attrs returns the attributes of a value of metric m.
func (o *observer) attrs(m int, labels []string) metric.ObserveOption {
	attrs := make([]attribute.KeyValue, 1, 1+len(labels))
	attrs[0] = o.name
	for i, l := range labels {
		attrs = append(attrs, attribute.String(o.set.Metrics[m].Labels[i], l))
	}
	return metric.WithAttributes(attrs...)
}

// Histogram observes nothing: OpenTelemetry has no asynchronous
// histogram.
func (o *observer) Histogram(int, uint64, float64, []float64, []uint64) {}
