package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/metrics"
	"github.com/limitsgo/limits/pace"
)

// recorder is an Emitter that keeps every value it is sent, by series,
// and checks each call against the Set's description.
type recorder struct {
	t      *testing.T
	set    metrics.Set
	values map[string]float64 // "<prometheus name>{v1,v2}" -> value
}

// read reads set once into a new recorder.
func read(t *testing.T, set metrics.Set) *recorder {
	t.Helper()
	r := &recorder{t: t, set: set, values: map[string]float64{}}
	set.Read(r)
	return r
}

func (r *recorder) put(m int, v float64, labels []string) {
	r.t.Helper()
	if m < 0 || m >= len(r.set.Metrics) {
		r.t.Fatalf("metric %d of %d", m, len(r.set.Metrics))
	}
	d := &r.set.Metrics[m]
	if len(labels) != len(d.Labels) {
		r.t.Errorf("%s: label values %q for labels %q", d.Prometheus(), labels, d.Labels)
	}
	key := d.Prometheus() + "{" + strings.Join(labels, ",") + "}"
	if _, dup := r.values[key]; dup {
		r.t.Errorf("%s: sent twice in one read", key)
	}
	r.values[key] = v
}

func (r *recorder) Value(m int, v int64, labels ...string) {
	r.t.Helper()
	if k := r.set.Metrics[m].Kind; k == metrics.Histogram || r.set.Metrics[m].Unit == "s" {
		r.t.Errorf("%s: Value of a metric of kind %d, unit %s", r.set.Metrics[m].Prometheus(), k, r.set.Metrics[m].Unit)
	}
	r.put(m, float64(v), labels)
}

func (r *recorder) Float(m int, v float64, labels ...string) {
	r.t.Helper()
	if d := r.set.Metrics[m]; d.Kind != metrics.Counter || d.Unit != "s" {
		r.t.Errorf("%s: Float of a metric of kind %d, unit %s", d.Prometheus(), d.Kind, d.Unit)
	}
	r.put(m, v, labels)
}

func (r *recorder) Histogram(m int, count uint64, sum float64, bounds []float64, cumulative []uint64) {
	r.t.Helper()
	if r.set.Metrics[m].Kind != metrics.Histogram {
		r.t.Errorf("%s: Histogram of a metric of kind %d", r.set.Metrics[m].Prometheus(), r.set.Metrics[m].Kind)
	}
	r.put(m, float64(count), nil)
}

// names returns the Prometheus names of the metrics set describes.
func names(set metrics.Set) []string {
	var ns []string
	for i := range set.Metrics {
		ns = append(ns, set.Metrics[i].Prometheus())
	}
	return ns
}

// series returns the series of the metric named, as "v1,v2" -> value.
func (r *recorder) series(name string) map[string]float64 {
	got := map[string]float64{}
	for k, v := range r.values {
		if n, labels, ok := strings.Cut(k, "{"); ok && n == name {
			got[strings.TrimSuffix(labels, "}")] = v
		}
	}
	return got
}

// describer describes itself, and has an engine's Stats too: its own
// description comes first.
type describer struct{ e *admit.Engine }

func (d *describer) Stats() admit.Stats { return d.e.Stats() }

func (d *describer) Metrics() metrics.Set {
	return metrics.Set{
		Metrics: []metrics.Metric{{Subsystem: "test", Name: "things", Kind: metrics.Gauge, Unit: "{thing}", Help: "Things."}},
		Read:    func(e metrics.Emitter) { e.Value(0, 7) },
	}
}

// TestFor checks which components For describes, and which it refuses:
// nil, nil pointers of every kind it knows, and other types.
func TestFor(t *testing.T) {
	gate, _ := limits.NewGate(2)
	e, err := admit.New(admit.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := httplimit.New(httplimit.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		c     any
		first string // the first metric's name
	}{
		{gate, "limits_gate_capacity"},
		{limits.NewGCRA(1, time.Second), "limits_gcra_keys"},
		{e, "limits_admit_requests_total"},
		{m, "limits_http_requests_total"},
		{&describer{e}, "limits_test_things"},
	} {
		set, ok := metrics.For(c.c)
		if !ok {
			t.Errorf("%T: not described", c.c)
			continue
		}
		if got := names(set); len(got) == 0 || got[0] != c.first {
			t.Errorf("%T: metrics %q, want %s first", c.c, got, c.first)
		}
		read(t, set)
	}
	for _, c := range []any{nil, (*limits.Gate)(nil), (*limits.GCRA)(nil), (*admit.Engine)(nil), (*httplimit.Middleware)(nil),
		(*describer)(nil), 42, "gate", limits.Limit{}, errors.New("x")} {
		if set, ok := metrics.For(c); ok || set.Read != nil {
			t.Errorf("%T %v: described", c, c)
		}
	}
}

// TestNames checks the names of every kind of metric for each exporter.
func TestNames(t *testing.T) {
	for _, c := range []struct {
		m          metrics.Metric
		prom, otel string
	}{
		{metrics.Metric{Subsystem: "gate", Name: "admitted", Kind: metrics.Counter, Unit: "{request}"}, "limits_gate_admitted_total", "limits.gate.admitted"},
		{metrics.Metric{Subsystem: "gate", Name: "wait", Kind: metrics.Counter, Unit: "s"}, "limits_gate_wait_seconds_total", "limits.gate.wait"},
		{metrics.Metric{Subsystem: "gate", Name: "in_flight", Kind: metrics.Gauge, Unit: "{request}"}, "limits_gate_in_flight", "limits.gate.in_flight"},
		{metrics.Metric{Subsystem: "redis", Name: "call_duration", Kind: metrics.Histogram, Unit: "s"}, "limits_redis_call_duration_seconds", "limits.redis.call_duration"},
	} {
		if got := c.m.Prometheus(); got != c.prom {
			t.Errorf("Prometheus: %s, want %s", got, c.prom)
		}
		if got := c.m.OTel(); got != c.otel {
			t.Errorf("OTel: %s, want %s", got, c.otel)
		}
	}
}

// admitN sends n requests for route from peer through e, and returns the
// reasons of their outcomes; the admitted ones are done at once.
func admitN(t *testing.T, e *admit.Engine, n int, peer, route string) []string {
	t.Helper()
	var got []string
	for range n {
		var tk admit.Ticket
		err := e.Admit(context.Background(), &admit.Request{Peer: peer, Method: http.MethodGet, Route: route}, &tk)
		var ref *admit.Refusal
		switch {
		case err == nil && tk.Exempt():
			got = append(got, "exempt")
		case err == nil:
			got = append(got, "allowed")
			tk.Done(adaptive.Success)
		case errors.As(err, &ref):
			got = append(got, ref.Reason.String())
		default:
			t.Fatal(err)
		}
	}
	return got
}

// TestEngine sends known requests through an Engine used directly, with
// a gate, an exempt route, a route policy and a policy of every request,
// and checks every series of its Set.
func TestEngine(t *testing.T) {
	e, err := admit.New(admit.Config{
		Exempt:      []string{"/healthz"},
		MaxInFlight: 4,
		Rate:        limits.Limit{Events: 3, Period: time.Hour},
		MaxKeys:     100,
		Policies: []admit.Policy{
			{Name: "login", Routes: []string{"/login"}, Rate: limits.Limit{Events: 1, Period: time.Hour}, MaxKeys: 10},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	set, ok := metrics.For(e)
	if !ok {
		t.Fatal("an Engine: not described")
	}
	want := []string{"limits_admit_requests_total", "limits_admit_shadow_refusals_total", "limits_admit_policy_requests_total",
		"limits_admit_policy_shadow_refusals_total", "limits_admit_policy_keys", "limits_admit_policy_max_keys",
		"limits_admit_route_requests_total"}
	if got := names(set); len(got) != len(want)+14 || !slices.Equal(got[:len(want)], want) || got[len(want)] != "limits_gate_capacity" {
		t.Fatalf("metrics %q, want %q and the 14 of its gate", got, want)
	}
	before := read(t, set)

	steps := []struct {
		peer, route string
		n           int
		want        string
	}{
		{"192.0.2.1:1", "/healthz", 2, "exempt exempt"},
		{"192.0.2.2:1", "/login", 2, "allowed rate_limited"},
		{"192.0.2.3:1", "/items", 4, "allowed allowed allowed rate_limited"},
	}
	for _, s := range steps {
		if got := strings.Join(admitN(t, e, s.n, s.peer, s.route), " "); got != s.want {
			t.Fatalf("%s from %s: %s, want %s", s.route, s.peer, got, s.want)
		}
	}
	after := read(t, set)
	if len(after.values) != len(before.values) {
		t.Errorf("%d series after the requests, %d before: every series exists from the start", len(after.values), len(before.values))
	}

	check := func(name string, want map[string]float64, n int) {
		t.Helper()
		got := after.series(name)
		if len(got) != n {
			t.Errorf("%s: %d series, want %d: %v", name, len(got), n, got)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s{%s}: %v, want %v", name, k, got[k], v)
			}
		}
		for k, v := range got {
			if _, ok := want[k]; !ok && v != 0 {
				t.Errorf("%s{%s}: %v, want 0", name, k, v)
			}
		}
	}
	check("limits_admit_requests_total", map[string]float64{
		"all,allowed": 4, "exempt,exempt": 2, "rate,rate_limited": 2,
	}, 11)
	check("limits_admit_shadow_refusals_total", map[string]float64{
		"capacity,server_busy": 0, "rate,rate_limited": 0, "rate,table_full": 0, "rate,cost_above_burst": 0, "rate,invalid_cost": 0,
	}, 5)
	check("limits_admit_policy_requests_total", map[string]float64{
		"default,allowed": 5, "default,rate_limited": 1, "login,allowed": 1, "login,rate_limited": 1,
	}, 2*6)
	check("limits_admit_policy_shadow_refusals_total", map[string]float64{"default,rate_limited": 0, "login,rate_limited": 0}, 2*4)
	check("limits_admit_policy_keys", map[string]float64{"default": 2, "login": 1}, 2)
	check("limits_admit_policy_max_keys", map[string]float64{"default": 100, "login": 10}, 2)
	check("limits_admit_route_requests_total", map[string]float64{
		"/healthz,exempt": 2, "/login,allowed": 1, "/login,rate_limited": 1, "other,allowed": 3, "other,rate_limited": 1,
	}, 3*11)
	check("limits_gate_admitted_total", map[string]float64{"": 6}, 1) // the gate comes before the rate layer
	check("limits_gate_capacity", map[string]float64{"": 4}, 1)
	check("limits_gate_priority_admitted_total", map[string]float64{"default": 6}, 3)
}

// TestMiddleware checks that an httplimit.Middleware's metrics are an
// Engine's, named limits_http_*, with its routes under the label route.
func TestMiddleware(t *testing.T) {
	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{
		Rate: limits.Limit{Events: 1, Period: time.Hour},
		Policies: []admit.Policy{
			{Name: "login", Routes: []string{"POST /login"}, Rate: limits.Limit{Events: 1, Period: time.Hour}},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	set, ok := metrics.For(m)
	if !ok {
		t.Fatal("a Middleware: not described")
	}
	for _, d := range set.Metrics {
		if d.Subsystem != "http" || !strings.HasPrefix(d.Help, "HTTP requests") && d.Unit != "{key}" {
			t.Errorf("%s: subsystem %s, help %q", d.Prometheus(), d.Subsystem, d.Help)
		}
	}
	if d := set.Metrics[len(set.Metrics)-1]; d.Prometheus() != "limits_http_route_requests_total" || !slices.Equal(d.Labels, []string{"route", "outcome"}) {
		t.Errorf("last metric %s%q, want limits_http_route_requests_total by route and outcome", d.Prometheus(), d.Labels)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for i := range 3 {
		r := httptest.NewRequest(http.MethodPost, "/login", nil)
		r.RemoteAddr = fmt.Sprintf("192.0.2.%d:1", 1+i%2)
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	got := read(t, set).series("limits_http_route_requests_total")
	for k, v := range map[string]float64{"POST /login,allowed": 2, "POST /login,rate_limited": 1, "other,allowed": 0} {
		if got[k] != v {
			t.Errorf("limits_http_route_requests_total{%s}: %v, want %v", k, got[k], v)
		}
	}
}

// TestSharedGate checks that a front end leaves a shared gate to the
// gate's own Set, and exports one of its own.
func TestSharedGate(t *testing.T) {
	gate, _ := limits.NewGate(3)
	shared, err := admit.New(admit.Config{Gate: gate})
	if err != nil {
		t.Fatal(err)
	}
	own, err := admit.New(admit.Config{MaxInFlight: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		e    *admit.Engine
		gate bool
	}{{shared, false}, {own, true}} {
		set, _ := metrics.For(c.e)
		if has := slices.Contains(names(set), "limits_gate_in_flight"); has != c.gate {
			t.Errorf("shared gate %v: gate metrics %v, want %v", !c.gate, has, c.gate)
		}
		read(t, set)
	}
}

// TestCount checks that a count past the largest int64 is capped.
func TestCount(t *testing.T) {
	for n, want := range map[uint64]int64{0: 0, 5: 5, 1<<63 - 1: 1<<63 - 1, 1 << 63: 1<<63 - 1, 1<<64 - 1: 1<<63 - 1} {
		if got := metrics.Count(n); got != want {
			t.Errorf("Count(%d) = %d, want %d", n, got, want)
		}
	}
}

// client is a client whose counters are fixed.
type client struct{ s pace.Stats }

func (c client) Stats() pace.Stats { return c.s }

// TestClient checks the metrics of a client: each counter of its
// pace.Stats in its series, named by its protocol, and a Transport's.
func TestClient(t *testing.T) {
	s := pace.Stats{Protocol: "grpc", Requests: 11, Sent: 12, Waited: 3, WaitTime: 1500 * time.Millisecond, Paused: 4,
		Retries: 5, RetryBudgetSpent: 6, Throttled: 7, DeadlineExceeded: 8, TableFull: 9, Keys: 10}
	set, ok := metrics.For(client{s})
	if !ok {
		t.Fatal("For(a client) = false")
	}
	got := read(t, set).values
	want := map[string]float64{
		"limits_grpc_client_requests_total{}": 11, "limits_grpc_client_sent_total{}": 12, "limits_grpc_client_waited_total{}": 3,
		"limits_grpc_client_wait_seconds_total{}": 1.5, "limits_grpc_client_paused_total{}": 4, "limits_grpc_client_retries_total{}": 5,
		"limits_grpc_client_retry_budget_spent_total{}": 6, "limits_grpc_client_throttled_total{}": 7,
		"limits_grpc_client_deadline_exceeded_total{}": 8, "limits_grpc_client_table_full_total{}": 9, "limits_grpc_client_keys{}": 10,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("values:\n%v\nwant\n%v", got, want)
	}

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer srv.Close()
	tr := &httplimit.Transport{}
	c := &http.Client{Transport: tr}
	for range 3 {
		res, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	set, ok = metrics.For(tr)
	if !ok {
		t.Fatal("For(a Transport) = false")
	}
	v := read(t, set).values
	if v["limits_http_client_requests_total{}"] != 3 || v["limits_http_client_sent_total{}"] != 3 || v["limits_http_client_keys{}"] != 1 {
		t.Errorf("a Transport's values: %v", v)
	}
}
