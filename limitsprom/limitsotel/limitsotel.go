// Package limitsotel exports the counters of package limits and its front
// ends as OpenTelemetry asynchronous instruments: the series of package
// limitsprom, with the same values, for services that report through an
// OpenTelemetry MeterProvider rather than a Prometheus registry.
//
//	reg, err := limitsotel.Register(otel.Meter("limits"), "api", middleware)
//	...
//	defer reg.Unregister()
//
// Each metric of limitsprom is an instrument named with dots and without
// the unit suffixes: limits_http_requests_total is the counter
// limits.http.requests, of unit {request}; limits_gate_in_flight the gauge
// limits.gate.in_flight. Counters are Int64ObservableCounters and gauges
// Int64ObservableGauges; every observation carries the attribute
// name=<name>, and the labels of the Prometheus series as attributes of
// the same names and values. The latency histogram of the Redis GCRA is
// left out: OpenTelemetry has no asynchronous histogram to carry it.
//
// The instruments are read by one callback per component, which reads
// the component's snapshot once per collection: the request path pays
// nothing for them.
package limitsotel

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/limitsprom/internal/series"
	"github.com/limitsgo/limits/redislimit"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Component is the set of types whose counters this package exports: the
// Gate and the GCRA of package limits, the net/http Middleware of package
// httplimit and the Redis GCRA of package redislimit.
type Component interface {
	*limits.Gate | *limits.GCRA | *httplimit.Middleware | *redislimit.GCRA
}

// Register creates the instruments of c's kind on meter, or takes those
// meter has already, and registers a callback that observes c's counters
// at each collection, with the attribute name=<name>. Unregister the
// Registration returned to stop observing c.
//
// name tells components of a kind apart, and must be unique among them:
// OpenTelemetry does not check that two callbacks observe different
// series. Register returns an error if name is empty or not UTF-8, or if
// meter refuses an instrument or the callback. It panics if c is nil, a
// programming error.
func Register[C Component](meter metric.Meter, name string, c C) (metric.Registration, error) {
	set, ok := series.For(c)
	if !ok {
		panic("limitsotel: nil component")
	}
	if name == "" || !utf8.ValidString(name) {
		return nil, errors.New("limitsotel: the name must be a non-empty UTF-8 string")
	}
	insts := make([]metric.Int64Observable, len(set.Metrics))
	var observed []metric.Observable
	for i, m := range set.Metrics {
		var err error
		switch m.Kind {
		case series.Counter:
			insts[i], err = meter.Int64ObservableCounter(m.OTel(), metric.WithDescription(m.Help), metric.WithUnit(m.Unit))
		case series.Gauge:
			insts[i], err = meter.Int64ObservableGauge(m.OTel(), metric.WithDescription(m.Help), metric.WithUnit(m.Unit))
		default:
			continue // no asynchronous histogram
		}
		if err != nil {
			return nil, fmt.Errorf("limitsotel: %s: %w", m.OTel(), err)
		}
		observed = append(observed, insts[i])
	}
	o := &observer{set: set, insts: insts, name: attribute.String("name", name)}
	r, err := meter.RegisterCallback(o.observe, observed...)
	if err != nil {
		return nil, fmt.Errorf("limitsotel: %w", err)
	}
	return r, nil
}

// observer observes one component's instruments.
type observer struct {
	set   series.Set
	insts []metric.Int64Observable // of set.Metrics, in order; nil for histograms
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
	attrs := make([]attribute.KeyValue, 1, 1+len(labels))
	attrs[0] = o.name
	for i, l := range labels {
		attrs = append(attrs, attribute.String(o.set.Metrics[m].Labels[i], l))
	}
	o.o.ObserveInt64(o.insts[m], v, metric.WithAttributes(attrs...))
}

// Histogram observes nothing: OpenTelemetry has no asynchronous
// histogram.
func (o *observer) Histogram(int, uint64, float64, []float64, []uint64) {}
