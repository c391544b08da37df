package limitsprom

import (
	"fmt"

	"github.com/limitsgo/limits/limitsprom/internal/promexport"
	"github.com/limitsgo/limits/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// NewCollector returns a prometheus.Collector that exports c's counters
// under the metric names of its kind (see the package documentation),
// each labelled name="<name>". c is any component package metrics
// describes (metrics.For): a *limits.Gate, a *limits.GCRA, an
// *httplimit.Middleware, a *grpclimit.Interceptor, an *admit.Engine, a
// *redislimit.GCRA, or another metrics.Describer.
//
// The collector reads c's snapshot each time it is collected, and keeps
// nothing in between: serving a request through c costs the same with or
// without it. It is safe for concurrent use, as c is.
//
// name tells components of a kind apart: several may be registered side
// by side under different names, and registering two of a kind under one
// name fails. It must be a non-empty UTF-8 string; otherwise registering
// the collector returns an error saying so. NewCollector panics if c is
// nil or of a type package metrics does not describe, a programming
// error; Register returns an error instead.
func NewCollector(name string, c any) prometheus.Collector {
	set, ok := metrics.For(c)
	if !ok {
		panic(unsupported(c))
	}
	return promexport.Collector("limitsprom", name, set)
}

// Register registers NewCollector(name, c) with reg, and returns an
// error if c is nil or of a type package metrics does not describe, or
// reg's error: an invalid name, or a component of the same kind already
// registered under name.
//
// To add labels to every metric of a component, such as the service or
// the region, register it with a registerer made by
// prometheus.WrapRegistererWith.
func Register(reg prometheus.Registerer, name string, c any) error {
	set, ok := metrics.For(c)
	if !ok {
		return unsupported(c)
	}
	if err := promexport.CheckName("limitsprom", name); err != nil {
		return err
	}
	return reg.Register(promexport.Collector("limitsprom", name, set))
}

// unsupported returns the error of a component that metrics.For refuses.
func unsupported(c any) error {
	if c == nil {
		return fmt.Errorf("limitsprom: nil component")
	}
	return fmt.Errorf("limitsprom: %T: nil, or not a component package metrics describes", c)
}
