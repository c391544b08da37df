// Package metrics describes the metrics of every component of limits and
// reads their values from the components' snapshots, once for every
// exporter: the Prometheus collectors of module limitsprom and the
// OpenTelemetry instruments of module limitsotel export the same series,
// with the same values, from the one description here.
//
// It knows a limits.Gate, a limits.GCRA, and anything with the Stats of an
// admission engine (an admit.Engine, an httplimit.Middleware, a
// grpclimit.Interceptor): one description for every front end, its
// metrics named by Stats.Protocol. A component of another module (a
// redislimit.GCRA) describes itself, with a Metrics method returning its
// Set (a Describer), so that this package, and an exporter of the core's
// components, links no Redis or gRPC client. It needs only the standard
// library, and costs a request nothing: a Set reads a component's
// snapshot when an exporter collects.
package metrics

import (
	"reflect"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/pace"
)

// Kind is the kind of a metric.
type Kind uint8

const (
	Counter   Kind = iota // a count that only grows
	Gauge                 // a value that goes up and down
	Histogram             // a distribution, in fixed buckets
)

// Metric describes one metric of a component.
type Metric struct {
	// Subsystem and Name make the metric's name: limits_<Subsystem>_<Name>
	// for Prometheus, counters with _total appended, histograms and
	// counters in seconds with _seconds (and _total);
	// limits.<Subsystem>.<Name> for OpenTelemetry.
	Subsystem, Name string
	// Help describes the metric, as one sentence or two.
	Help string
	Kind Kind
	// Unit is the metric's unit in UCUM, as OpenTelemetry takes it: "s"
	// for the seconds of a histogram or a counter, "{request}" and so on
	// for counts. A counter in "s" has float64 values, sent with
	// Emitter.Float.
	Unit string
	// Labels names the variable labels, whose values are given with each
	// value, in this order.
	Labels []string
}

// Emitter receives the values a Set reads, one call per series.
type Emitter interface {
	// Value is the value of the series of metric m with the label values
	// given, of a Counter or a Gauge.
	Value(m int, v int64, labels ...string)
	// Float is the value of the series of metric m with the label values
	// given, of a Counter in seconds.
	Float(m int, v float64, labels ...string)
	// Histogram is the value of a Histogram metric m: count values
	// adding up to sum, of which cumulative[i] were at most bounds[i].
	Histogram(m int, count uint64, sum float64, bounds []float64, cumulative []uint64)
}

// Set is the metrics of one component and what reads them.
type Set struct {
	// Metrics describes every metric the component has.
	Metrics []Metric
	// Read reads the component's snapshot and sends the value of every
	// series to e, Metrics[m] as m.
	Read func(e Emitter)
}

// Prometheus returns the name of m for Prometheus, with namespace
// "limits".
func (m *Metric) Prometheus() string {
	n := "limits_" + m.Subsystem + "_" + m.Name
	switch m.Kind {
	case Counter:
		if m.Unit == "s" {
			return n + "_seconds_total"
		}
		return n + "_total"
	case Histogram:
		return n + "_seconds"
	}
	return n
}

// OTel returns the name of m for OpenTelemetry, with namespace "limits".
func (m *Metric) OTel() string { return "limits." + m.Subsystem + "." + m.Name }

// Describer is a component that describes its own metrics, such as a
// redislimit.GCRA.
type Describer interface {
	// Metrics returns the component's Set.
	Metrics() Set
}

// For returns the Set of c: a Describer's own; that of a *limits.Gate or a
// *limits.GCRA; for anything with a Stats method returning admit.Stats,
// that of a front end (see below); for anything with a Stats method
// returning pace.Stats (an httplimit.Transport, a
// grpclimit.ClientInterceptor, a pace.Pacer), that of a client: its
// requests, those sent, waits, pauses, retries, local refusals and keys,
// as limits_http_client_*, limits_grpc_client_* or limits_client_*. It
// reports false for anything else, and for nil, a nil pointer included.
//
// A front end's metrics are named by the Protocol of its Stats:
// limits_http_* for "http", limits_grpc_* for "grpc", limits_admit_* for
// an Engine used directly (""), limits_<protocol>_* for another. They
// are its requests by layer and outcome, those that layers in shadow
// mode would have refused, each rate policy's outcomes and table of keys,
// and the requests of each route pattern of its configuration (label
// route; method for gRPC, whose routes are full method names). A front
// end with a gate of its own adds the gate's metrics, those of a
// *limits.Gate; a shared gate (Stats.SharedGate) is left to the gate's
// own registration, so that it is counted once. Whether there is a gate
// of its own is read once, by For.
func For(c any) (Set, bool) {
	if c == nil {
		return Set{}, false
	}
	if v := reflect.ValueOf(c); v.Kind() == reflect.Pointer && v.IsNil() {
		return Set{}, false
	}
	switch c := c.(type) {
	case Describer:
		return c.Metrics(), true
	case *limits.Gate:
		return gateSet(c), true
	case *limits.GCRA:
		return gcraSet(c), true
	case interface{ Stats() admit.Stats }:
		return frontSet(c.Stats), true
	case interface{ Stats() pace.Stats }:
		return clientSet(c.Stats), true
	}
	return Set{}, false
}

// The metrics of a Gate, at these indices of the Metrics of its Set.
const (
	gateCapacity = iota
	gateInFlight
	gatePeak
	gateWaiting
	gateAdmitted
	gateShed
	gateTimedOut
	gateWaited
	gateOverloaded
	gateOverloads
	gateWait
	gatePriorityCapacity
	gatePriorityAdmitted
	gatePriorityShed
	nGate
)

// gateMetrics are the metrics of a Gate, for a Gate alone and for a front
// end's.
var gateMetrics = [nGate]Metric{
	gateCapacity: {Subsystem: "gate", Name: "capacity", Kind: Gauge, Unit: "{request}",
		Help: "Most requests the gate admits at once."},
	gateInFlight: {Subsystem: "gate", Name: "in_flight", Kind: Gauge, Unit: "{request}",
		Help: "Requests inside the gate now."},
	gatePeak: {Subsystem: "gate", Name: "peak_in_flight", Kind: Gauge, Unit: "{request}",
		Help: "Most requests inside the gate at once since it was made."},
	gateWaiting: {Subsystem: "gate", Name: "waiting", Kind: Gauge, Unit: "{request}",
		Help: "Requests waiting for a place in the gate now."},
	gateAdmitted: {Subsystem: "gate", Name: "admitted", Kind: Counter, Unit: "{request}",
		Help: "Requests the gate let in."},
	gateShed: {Subsystem: "gate", Name: "shed", Kind: Counter, Unit: "{request}",
		Help: "Requests the gate refused at once, being full with no room to wait."},
	gateTimedOut: {Subsystem: "gate", Name: "timed_out", Kind: Counter, Unit: "{request}",
		Help: "Requests that waited for a place in the gate and gave up."},
	gateWaited: {Subsystem: "gate", Name: "waited", Kind: Counter, Unit: "{request}",
		Help: "Requests that waited for a place in the gate and have stopped waiting, let in or not."},
	gateOverloaded: {Subsystem: "gate", Name: "overloaded", Kind: Gauge, Unit: "1",
		Help: "1 while the gate refuses at once, having judged waiting futile under sustained overload (Gate.AdaptWait); 0 otherwise."},
	gateOverloads: {Subsystem: "gate", Name: "overloads", Kind: Counter, Unit: "{period}",
		Help: "Times the gate began to refuse at once under sustained overload."},
	gateWait: {Subsystem: "gate", Name: "wait", Kind: Counter, Unit: "s",
		Help: "Time the requests that waited for a place in the gate spent waiting, added up: divided by those requests, the mean wait."},
	gatePriorityCapacity: {Subsystem: "gate", Name: "priority_capacity", Kind: Gauge, Unit: "{request}", Labels: []string{"priority"},
		Help: "Requests inside the gate below which one of the priority may enter: the capacity less the places reserved for higher priorities."},
	gatePriorityAdmitted: {Subsystem: "gate", Name: "priority_admitted", Kind: Counter, Unit: "{request}", Labels: []string{"priority"},
		Help: "Requests of the priority the gate let in."},
	gatePriorityShed: {Subsystem: "gate", Name: "priority_shed", Kind: Counter, Unit: "{request}", Labels: []string{"priority"},
		Help: "Requests of the priority the gate refused at once."},
}

// readGate sends the values of a Gate's snapshot s, whose metrics start
// at index at.
func readGate(e Emitter, at int, s limits.GateStats) {
	e.Value(at+gateCapacity, int64(s.Max))
	e.Value(at+gateInFlight, int64(s.InFlight))
	e.Value(at+gatePeak, int64(s.Peak))
	e.Value(at+gateWaiting, int64(s.Waiting))
	e.Value(at+gateAdmitted, Count(s.Admitted))
	e.Value(at+gateShed, Count(s.Shed))
	e.Value(at+gateTimedOut, Count(s.TimedOut))
	e.Value(at+gateWaited, Count(s.Waited))
	overloaded := int64(0)
	if s.Overloaded {
		overloaded = 1
	}
	e.Value(at+gateOverloaded, overloaded)
	e.Value(at+gateOverloads, Count(s.Overloads))
	e.Float(at+gateWait, s.WaitTime.Seconds())
	for _, c := range s.Classes {
		p := c.Priority.String()
		e.Value(at+gatePriorityCapacity, int64(c.Limit), p)
		e.Value(at+gatePriorityAdmitted, Count(c.Admitted), p)
		e.Value(at+gatePriorityShed, Count(c.Shed), p)
	}
}

func gateSet(g *limits.Gate) Set {
	return Set{Metrics: gateMetrics[:], Read: func(e Emitter) { readGate(e, 0, g.Stats()) }}
}

func gcraSet(g *limits.GCRA) Set {
	return Set{
		Metrics: []Metric{
			{Subsystem: "gcra", Name: "keys", Kind: Gauge, Unit: "{key}",
				Help: "Keys the GCRA's table holds, including expired keys whose place has not been reused yet."},
			{Subsystem: "gcra", Name: "max_keys", Kind: Gauge, Unit: "{key}",
				Help: "Most keys the GCRA's table holds."},
			{Subsystem: "gcra", Name: "table_full", Kind: Counter, Unit: "{request}",
				Help: "Requests of new keys refused because the table was full of keys in use."},
		},
		Read: func(e Emitter) {
			e.Value(0, int64(g.Len()))
			e.Value(1, int64(g.MaxKeys()))
			e.Value(2, Count(g.TableFull()))
		},
	}
}

// Count returns a counter's value as an int64, capped at the largest: a
// count no process reaches.
func Count(n uint64) int64 { return int64(min(n, 1<<63-1)) }
