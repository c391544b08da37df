package limitsprom

import (
	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/limitsprom/internal/promexport"
	"github.com/limitsgo/limits/limitsprom/internal/series"
	"github.com/prometheus/client_golang/prometheus"
)

// Component is the set of types of the core module whose counters this
// package exports: the Gate and the GCRA of package limits and the
// net/http Middleware of package httplimit. The components of other
// modules have packages of their own: redislimitprom for the Redis GCRA,
// grpclimitprom for the gRPC Interceptor.
type Component interface {
	*limits.Gate | *limits.GCRA | *httplimit.Middleware
}

// NewCollector returns a prometheus.Collector that exports c's counters
// under the metric names of its kind (see the package documentation),
// each labelled name="<name>".
//
// The collector reads c's snapshot (its Stats method; Len, MaxKeys and
// TableFull for a GCRA) each time it is collected, and keeps nothing in
// between: serving a request through c costs the same with or without it.
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
	return promexport.Collector("limitsprom", name, set)
}

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
