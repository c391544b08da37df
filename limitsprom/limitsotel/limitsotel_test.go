package limitsotel_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/limitsprom/limitsotel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
)

// collect returns the metrics reader has for the meter of scope
// "limits".
func collect(t *testing.T, reader *sdkmetric.ManualReader) []metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name == "limits" {
			return sm.Metrics
		}
	}
	return nil
}

// newMeter returns a meter of scope "limits" and the manual reader of its
// provider.
func newMeter() (metric.Meter, *sdkmetric.ManualReader) {
	reader := sdkmetric.NewManualReader()
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("limits"), reader
}

// TestGate checks the instruments of a Gate exactly: names, units,
// descriptions, kinds, attributes and values.
func TestGate(t *testing.T) {
	meter, reader := newMeter()
	gate, _ := limits.NewGate(2, limits.WithReserve(limits.PriorityCritical, 1))
	reg, err := limitsotel.Register(meter, "jobs", gate)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := gate.TryEnter()
	defer p.Release()
	gate.TryEnterPriority(limits.PriorityCritical)
	gate.TryEnter() // shed

	attrs := attribute.NewSet(attribute.String("name", "jobs"))
	gauge := func(name, desc string, v int64) metricdata.Metrics {
		return metricdata.Metrics{Name: name, Description: desc, Unit: "{request}",
			Data: metricdata.Gauge[int64]{DataPoints: []metricdata.DataPoint[int64]{{Attributes: attrs, Value: v}}}}
	}
	sum := func(name, desc string, v int64) metricdata.Metrics {
		return metricdata.Metrics{Name: name, Description: desc, Unit: "{request}",
			Data: metricdata.Sum[int64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true,
				DataPoints: []metricdata.DataPoint[int64]{{Attributes: attrs, Value: v}}}}
	}
	unit := func(m metricdata.Metrics, u string) metricdata.Metrics {
		m.Unit = u
		return m
	}
	byPriority := func(m metricdata.Metrics, v [3]int64) metricdata.Metrics {
		var dps []metricdata.DataPoint[int64]
		for i, p := range []string{"sheddable", "default", "critical"} {
			dps = append(dps, metricdata.DataPoint[int64]{
				Attributes: attribute.NewSet(attribute.String("name", "jobs"), attribute.String("priority", p)), Value: v[i]})
		}
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			d.DataPoints = dps
			m.Data = d
		case metricdata.Gauge[int64]:
			d.DataPoints = dps
			m.Data = d
		}
		return m
	}
	want := []metricdata.Metrics{
		gauge("limits.gate.capacity", "Most requests the gate admits at once.", 2),
		gauge("limits.gate.in_flight", "Requests inside the gate now.", 2),
		gauge("limits.gate.peak_in_flight", "Most requests inside the gate at once since it was made.", 2),
		gauge("limits.gate.waiting", "Requests waiting for a place in the gate now.", 0),
		sum("limits.gate.admitted", "Requests the gate let in.", 2),
		sum("limits.gate.shed", "Requests the gate refused at once, being full with no room to wait.", 1),
		sum("limits.gate.timed_out", "Requests that waited for a place in the gate and gave up.", 0),
		sum("limits.gate.waited", "Requests that waited for a place in the gate and have stopped waiting, let in or not.", 0),
		unit(gauge("limits.gate.overloaded", "1 while the gate refuses at once, having judged waiting futile under sustained overload (Gate.AdaptWait); 0 otherwise.", 0), "1"),
		unit(sum("limits.gate.overloads", "Times the gate began to refuse at once under sustained overload.", 0), "{period}"),
		{Name: "limits.gate.wait", Unit: "s",
			Description: "Time the requests that waited for a place in the gate spent waiting, added up: divided by those requests, the mean wait.",
			Data: metricdata.Sum[float64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true,
				DataPoints: []metricdata.DataPoint[float64]{{Attributes: attrs, Value: 0}}}},
		byPriority(gauge("limits.gate.priority_capacity", "Requests inside the gate below which one of the priority may enter: "+
			"the capacity less the places reserved for higher priorities.", 0), [3]int64{1, 1, 2}),
		byPriority(sum("limits.gate.priority_admitted", "Requests of the priority the gate let in.", 0), [3]int64{0, 1, 1}),
		byPriority(sum("limits.gate.priority_shed", "Requests of the priority the gate refused at once.", 0), [3]int64{0, 1, 0}),
	}
	got := collect(t, reader)
	if len(got) != len(want) {
		t.Fatalf("%d metrics, want %d: %v", len(got), len(want), got)
	}
	for i := range want {
		metricdatatest.AssertEqual(t, want[i], got[i], metricdatatest.IgnoreTimestamp())
	}

	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	for _, m := range collect(t, reader) {
		if n := dataPoints(m); n != 0 {
			t.Errorf("%s: %d data points after Unregister", m.Name, n)
		}
	}
}

func dataPoints(m metricdata.Metrics) int {
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		return len(d.DataPoints)
	case metricdata.Gauge[int64]:
		return len(d.DataPoints)
	case metricdata.Sum[float64]:
		return len(d.DataPoints)
	}
	return -1
}

// TestMiddleware checks the instruments of an httplimit.Middleware: the
// counter of its requests by layer and outcome, of unit {request}, and
// that of its routes, by route pattern.
func TestMiddleware(t *testing.T) {
	meter, reader := newMeter()
	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{
		Exempt: []string{"/healthz"},
		Rate:   limits.Limit{Events: 1, Period: time.Hour},
	}})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := limitsotel.Register(meter, "api", m)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, path := range []string{"/healthz", "/a", "/a"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil))
	}
	got := map[string]int64{}
	units := map[string]string{}
	for _, m := range collect(t, reader) {
		units[m.Name] = m.Unit
		if d, ok := m.Data.(metricdata.Sum[int64]); ok {
			for _, dp := range d.DataPoints {
				var kv []string
				for _, a := range dp.Attributes.ToSlice() {
					kv = append(kv, string(a.Key)+"="+a.Value.AsString())
				}
				got[m.Name+"{"+strings.Join(kv, ",")+"}"] = dp.Value
			}
		}
	}
	for k, want := range map[string]int64{
		"limits.http.requests{layer=all,name=api,outcome=allowed}":           1,
		"limits.http.requests{layer=exempt,name=api,outcome=exempt}":         1,
		"limits.http.requests{layer=rate,name=api,outcome=rate_limited}":     1,
		"limits.http.route_requests{name=api,outcome=exempt,route=/healthz}": 1,
		"limits.http.route_requests{name=api,outcome=allowed,route=other}":   1,
	} {
		if got[k] != want {
			t.Errorf("%s: %d, want %d", k, got[k], want)
		}
	}
	if units["limits.http.requests"] != "{request}" || units["limits.http.policy_keys"] != "{key}" {
		t.Errorf("units %v", units)
	}
}

// TestRegisterErrors checks what Register refuses: an invalid name, a nil
// component, and a value that is no component.
func TestRegisterErrors(t *testing.T) {
	meter, _ := newMeter()
	for _, name := range []string{"", "\xff"} {
		if _, err := limitsotel.Register(meter, name, limits.NewGCRA(1, time.Second)); err == nil || !strings.HasPrefix(err.Error(), "limitsotel: ") {
			t.Errorf("name %q: error %v, want one of limitsotel", name, err)
		}
	}
	for _, c := range []any{nil, (*limits.Gate)(nil), (*limits.GCRA)(nil), (*httplimit.Middleware)(nil), (*admit.Engine)(nil), 42} {
		if reg, err := limitsotel.Register(meter, "x", c); err == nil || reg != nil || !strings.HasPrefix(err.Error(), "limitsotel: ") {
			t.Errorf("%T %v: %v, %v; want an error of limitsotel", c, c, reg, err)
		}
	}
}
