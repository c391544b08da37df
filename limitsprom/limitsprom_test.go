package limitsprom_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/limitsprom"
	"github.com/limitsgo/limits/limitsprom/internal/promtest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// site is a service behind a Middleware, with its metrics next to its API
// on one loopback server, as a service would serve them.
type site struct {
	srv     *httptest.Server
	m       *httplimit.Middleware
	reg     *prometheus.Registry
	entered chan struct{} // a request to /slow has entered its handler
	release chan struct{} // lets the requests to /slow return
}

// newSite serves a Middleware that admits one request at a time, allows
// each client address 2 requests an hour ("default", a table of 1,000
// clients), and 1 an hour on /login ("login", of 100), and exempts
// /healthz. Clients are told apart by X-Forwarded-For, trusted from
// loopback.
func newSite(t *testing.T) *site {
	t.Helper()
	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{
		Exempt:         []string{"/healthz"},
		MaxInFlight:    1,
		Rate:           limits.Limit{Events: 2, Period: time.Hour},
		MaxKeys:        1000,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
		Policies: []admit.Policy{
			{Name: "login", Routes: []string{"/login"}, Rate: limits.Limit{Events: 1, Period: time.Hour}, MaxKeys: 100},
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s := &site{m: m, reg: prometheus.NewRegistry(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	app := http.NewServeMux()
	app.Handle("/healthz", ok)
	app.Handle("/api", ok)
	app.Handle("/login", ok)
	app.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		s.entered <- struct{}{}
		<-s.release
	})
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	mux.Handle("/", m.Handler(app))
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	if err := limitsprom.Register(s.reg, "api", m); err != nil {
		t.Fatal(err)
	}
	return s
}

// get sends a request for path from the client address addr and returns
// the status.
func (s *site) get(t *testing.T, addr, path string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Forwarded-For", addr)
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// traffic sends the known traffic that the tests' expected values count.
func (s *site) traffic(t *testing.T) {
	t.Helper()
	want := func(got, want int, what string) {
		t.Helper()
		if got != want {
			t.Fatalf("%s: status %d, want %d", what, got, want)
		}
	}
	// Two probes, exempt.
	want(s.get(t, "192.0.2.1", "/healthz"), 200, "probe")
	want(s.get(t, "192.0.2.1", "/healthz"), 200, "probe")
	// A client that sends 3 requests: the third is rate limited.
	want(s.get(t, "192.0.2.10", "/api"), 200, "A 1")
	want(s.get(t, "192.0.2.10", "/api"), 200, "A 2")
	want(s.get(t, "192.0.2.10", "/api"), 429, "A 3")
	// A client that logs in twice: the second is refused by the login
	// policy, and its charge of the default policy given back.
	want(s.get(t, "192.0.2.20", "/login"), 200, "B 1")
	want(s.get(t, "192.0.2.20", "/login"), 429, "B 2")
	// A slow request holds the gate's only place: the next is shed.
	done := make(chan int)
	go func() { done <- s.get(t, "192.0.2.30", "/slow") }()
	<-s.entered
	want(s.get(t, "192.0.2.40", "/api"), 503, "D while the gate is full")
	close(s.release)
	want(<-done, 200, "C's slow request")
}

// The expected exposition of the site's middleware after traffic.
const wantHTTP = `
# HELP limits_http_requests_total HTTP requests by outcome, with the layer that decided it: allowed (layer all), exempt, or the reason of a refusal. request_timeout also counts requests allowed and cut short, and limiter_error every failed limiter call, including those the failure policy let through.
# TYPE limits_http_requests_total counter
limits_http_requests_total{layer="all",name="api",outcome="allowed"} 4
limits_http_requests_total{layer="capacity",name="api",outcome="request_timeout"} 0
limits_http_requests_total{layer="capacity",name="api",outcome="server_busy"} 1
limits_http_requests_total{layer="concurrency",name="api",outcome="concurrency_limited"} 0
limits_http_requests_total{layer="concurrency",name="api",outcome="concurrency_table_full"} 0
limits_http_requests_total{layer="exempt",name="api",outcome="exempt"} 2
limits_http_requests_total{layer="rate",name="api",outcome="cost_above_burst"} 0
limits_http_requests_total{layer="rate",name="api",outcome="invalid_cost"} 0
limits_http_requests_total{layer="rate",name="api",outcome="limiter_error"} 0
limits_http_requests_total{layer="rate",name="api",outcome="rate_limited"} 2
limits_http_requests_total{layer="rate",name="api",outcome="table_full"} 0
# HELP limits_http_policy_requests_total HTTP requests by rate policy and outcome: allowed, or the reason the policy refused them.
# TYPE limits_http_policy_requests_total counter
limits_http_policy_requests_total{name="api",outcome="allowed",policy="default"} 5
limits_http_policy_requests_total{name="api",outcome="allowed",policy="login"} 1
limits_http_policy_requests_total{name="api",outcome="cost_above_burst",policy="default"} 0
limits_http_policy_requests_total{name="api",outcome="cost_above_burst",policy="login"} 0
limits_http_policy_requests_total{name="api",outcome="invalid_cost",policy="default"} 0
limits_http_policy_requests_total{name="api",outcome="invalid_cost",policy="login"} 0
limits_http_policy_requests_total{name="api",outcome="limiter_error",policy="default"} 0
limits_http_policy_requests_total{name="api",outcome="limiter_error",policy="login"} 0
limits_http_policy_requests_total{name="api",outcome="rate_limited",policy="default"} 1
limits_http_policy_requests_total{name="api",outcome="rate_limited",policy="login"} 1
limits_http_policy_requests_total{name="api",outcome="table_full",policy="default"} 0
limits_http_policy_requests_total{name="api",outcome="table_full",policy="login"} 0
# HELP limits_http_policy_keys Keys the local GCRA of the rate policy holds, including expired keys whose place has not been reused yet; 0 for a policy decided by another limiter alone, or that shares the table of a policy before it (keyless), so that a sum counts each table once.
# TYPE limits_http_policy_keys gauge
limits_http_policy_keys{name="api",policy="default"} 3
limits_http_policy_keys{name="api",policy="login"} 1
# HELP limits_http_policy_max_keys Most keys the local GCRA of the rate policy holds; 0 for a policy decided by another limiter alone, or that shares the table of a policy before it.
# TYPE limits_http_policy_max_keys gauge
limits_http_policy_max_keys{name="api",policy="default"} 1000
limits_http_policy_max_keys{name="api",policy="login"} 100
# HELP limits_http_shadow_refusals_total HTTP requests that a layer in shadow mode (the gate, or a rate policy) would have refused, by layer and reason; they went on as if allowed.
# TYPE limits_http_shadow_refusals_total counter
limits_http_shadow_refusals_total{layer="capacity",name="api",outcome="server_busy"} 0
limits_http_shadow_refusals_total{layer="rate",name="api",outcome="cost_above_burst"} 0
limits_http_shadow_refusals_total{layer="rate",name="api",outcome="invalid_cost"} 0
limits_http_shadow_refusals_total{layer="rate",name="api",outcome="rate_limited"} 0
limits_http_shadow_refusals_total{layer="rate",name="api",outcome="table_full"} 0
# HELP limits_http_policy_shadow_refusals_total HTTP requests that a rate policy in shadow mode would have refused, by policy and reason.
# TYPE limits_http_policy_shadow_refusals_total counter
limits_http_policy_shadow_refusals_total{name="api",outcome="cost_above_burst",policy="default"} 0
limits_http_policy_shadow_refusals_total{name="api",outcome="cost_above_burst",policy="login"} 0
limits_http_policy_shadow_refusals_total{name="api",outcome="invalid_cost",policy="default"} 0
limits_http_policy_shadow_refusals_total{name="api",outcome="invalid_cost",policy="login"} 0
limits_http_policy_shadow_refusals_total{name="api",outcome="rate_limited",policy="default"} 0
limits_http_policy_shadow_refusals_total{name="api",outcome="rate_limited",policy="login"} 0
limits_http_policy_shadow_refusals_total{name="api",outcome="table_full",policy="default"} 0
limits_http_policy_shadow_refusals_total{name="api",outcome="table_full",policy="login"} 0
# HELP limits_http_route_requests_total HTTP requests by the route pattern of the configuration they matched (other for the rest) and outcome: allowed, exempt, or the reason of a refusal by any layer.
# TYPE limits_http_route_requests_total counter
limits_http_route_requests_total{name="api",outcome="allowed",route="/healthz"} 0
limits_http_route_requests_total{name="api",outcome="concurrency_limited",route="/healthz"} 0
limits_http_route_requests_total{name="api",outcome="concurrency_table_full",route="/healthz"} 0
limits_http_route_requests_total{name="api",outcome="cost_above_burst",route="/healthz"} 0
limits_http_route_requests_total{name="api",outcome="exempt",route="/healthz"} 2
limits_http_route_requests_total{name="api",outcome="invalid_cost",route="/healthz"} 0
limits_http_route_requests_total{name="api",outcome="limiter_error",route="/healthz"} 0
limits_http_route_requests_total{name="api",outcome="rate_limited",route="/healthz"} 0
limits_http_route_requests_total{name="api",outcome="request_timeout",route="/healthz"} 0
limits_http_route_requests_total{name="api",outcome="server_busy",route="/healthz"} 0
limits_http_route_requests_total{name="api",outcome="table_full",route="/healthz"} 0
limits_http_route_requests_total{name="api",outcome="allowed",route="/login"} 1
limits_http_route_requests_total{name="api",outcome="concurrency_limited",route="/login"} 0
limits_http_route_requests_total{name="api",outcome="concurrency_table_full",route="/login"} 0
limits_http_route_requests_total{name="api",outcome="cost_above_burst",route="/login"} 0
limits_http_route_requests_total{name="api",outcome="exempt",route="/login"} 0
limits_http_route_requests_total{name="api",outcome="invalid_cost",route="/login"} 0
limits_http_route_requests_total{name="api",outcome="limiter_error",route="/login"} 0
limits_http_route_requests_total{name="api",outcome="rate_limited",route="/login"} 1
limits_http_route_requests_total{name="api",outcome="request_timeout",route="/login"} 0
limits_http_route_requests_total{name="api",outcome="server_busy",route="/login"} 0
limits_http_route_requests_total{name="api",outcome="table_full",route="/login"} 0
limits_http_route_requests_total{name="api",outcome="allowed",route="other"} 3
limits_http_route_requests_total{name="api",outcome="concurrency_limited",route="other"} 0
limits_http_route_requests_total{name="api",outcome="concurrency_table_full",route="other"} 0
limits_http_route_requests_total{name="api",outcome="cost_above_burst",route="other"} 0
limits_http_route_requests_total{name="api",outcome="exempt",route="other"} 0
limits_http_route_requests_total{name="api",outcome="invalid_cost",route="other"} 0
limits_http_route_requests_total{name="api",outcome="limiter_error",route="other"} 0
limits_http_route_requests_total{name="api",outcome="rate_limited",route="other"} 1
limits_http_route_requests_total{name="api",outcome="request_timeout",route="other"} 0
limits_http_route_requests_total{name="api",outcome="server_busy",route="other"} 1
limits_http_route_requests_total{name="api",outcome="table_full",route="other"} 0
`

// The expected exposition of the middleware's gate, and of a gate of 2
// with two callers inside, one shed and one timed out.
const wantGates = `
# HELP limits_gate_admitted_total Requests the gate let in.
# TYPE limits_gate_admitted_total counter
limits_gate_admitted_total{name="api"} 6
limits_gate_admitted_total{name="jobs"} 2
# HELP limits_gate_capacity Most requests the gate admits at once.
# TYPE limits_gate_capacity gauge
limits_gate_capacity{name="api"} 1
limits_gate_capacity{name="jobs"} 2
# HELP limits_gate_in_flight Requests inside the gate now.
# TYPE limits_gate_in_flight gauge
limits_gate_in_flight{name="api"} 0
limits_gate_in_flight{name="jobs"} 2
# HELP limits_gate_peak_in_flight Most requests inside the gate at once since it was made.
# TYPE limits_gate_peak_in_flight gauge
limits_gate_peak_in_flight{name="api"} 1
limits_gate_peak_in_flight{name="jobs"} 2
# HELP limits_gate_priority_admitted_total Requests of the priority the gate let in.
# TYPE limits_gate_priority_admitted_total counter
limits_gate_priority_admitted_total{name="api",priority="critical"} 0
limits_gate_priority_admitted_total{name="api",priority="default"} 6
limits_gate_priority_admitted_total{name="api",priority="sheddable"} 0
limits_gate_priority_admitted_total{name="jobs",priority="critical"} 0
limits_gate_priority_admitted_total{name="jobs",priority="default"} 2
limits_gate_priority_admitted_total{name="jobs",priority="sheddable"} 0
# HELP limits_gate_priority_capacity Requests inside the gate below which one of the priority may enter: the capacity less the places reserved for higher priorities.
# TYPE limits_gate_priority_capacity gauge
limits_gate_priority_capacity{name="api",priority="critical"} 1
limits_gate_priority_capacity{name="api",priority="default"} 1
limits_gate_priority_capacity{name="api",priority="sheddable"} 1
limits_gate_priority_capacity{name="jobs",priority="critical"} 2
limits_gate_priority_capacity{name="jobs",priority="default"} 2
limits_gate_priority_capacity{name="jobs",priority="sheddable"} 2
# HELP limits_gate_priority_shed_total Requests of the priority the gate refused at once.
# TYPE limits_gate_priority_shed_total counter
limits_gate_priority_shed_total{name="api",priority="critical"} 0
limits_gate_priority_shed_total{name="api",priority="default"} 1
limits_gate_priority_shed_total{name="api",priority="sheddable"} 0
limits_gate_priority_shed_total{name="jobs",priority="critical"} 0
limits_gate_priority_shed_total{name="jobs",priority="default"} 1
limits_gate_priority_shed_total{name="jobs",priority="sheddable"} 0
# HELP limits_gate_shed_total Requests the gate refused at once, being full with no room to wait.
# TYPE limits_gate_shed_total counter
limits_gate_shed_total{name="api"} 1
limits_gate_shed_total{name="jobs"} 1
# HELP limits_gate_timed_out_total Requests that waited for a place in the gate and gave up.
# TYPE limits_gate_timed_out_total counter
limits_gate_timed_out_total{name="api"} 0
limits_gate_timed_out_total{name="jobs"} 1
# HELP limits_gate_waiting Requests waiting for a place in the gate now.
# TYPE limits_gate_waiting gauge
limits_gate_waiting{name="api"} 0
limits_gate_waiting{name="jobs"} 0
`

// The expected exposition of a GCRA of 2 keys after 4 new keys and one
// known one asked.
const wantGCRA = `
# HELP limits_gcra_keys Keys the GCRA's table holds, including expired keys whose place has not been reused yet.
# TYPE limits_gcra_keys gauge
limits_gcra_keys{name="tokens"} 2
# HELP limits_gcra_max_keys Most keys the GCRA's table holds.
# TYPE limits_gcra_max_keys gauge
limits_gcra_max_keys{name="tokens"} 2
# HELP limits_gcra_table_full_total Requests of new keys refused because the table was full of keys in use.
# TYPE limits_gcra_table_full_total counter
limits_gcra_table_full_total{name="tokens"} 2
`

// gateAndGCRA registers a Gate "jobs" and a GCRA "tokens" with reg, and
// puts through them the traffic wantGates and wantGCRA count.
func gateAndGCRA(t *testing.T, reg prometheus.Registerer) (*limits.Gate, *limits.GCRA) {
	t.Helper()
	gate, err := limits.NewGate(2)
	if err != nil {
		t.Fatal(err)
	}
	g := limits.NewGCRA(1, time.Hour, limits.WithMaxKeys(2))
	if err := limitsprom.Register(reg, "jobs", gate); err != nil {
		t.Fatal(err)
	}
	if err := limitsprom.Register(reg, "tokens", g); err != nil {
		t.Fatal(err)
	}
	p1, _ := gate.TryEnter()
	p2, _ := gate.TryEnter()
	t.Cleanup(func() { p1.Release(); p2.Release() })
	if _, ok := gate.TryEnter(); ok {
		t.Fatal("a third caller entered a gate of 2")
	}
	if _, ok := gate.Enter(context.Background(), time.Millisecond); ok {
		t.Fatal("a waiting caller entered a full gate")
	}
	for _, k := range []string{"a", "b", "c", "a", "d"} {
		g.Allow(k)
	}
	return gate, g
}

// TestScrape sends known traffic through a Middleware, a Gate and a GCRA
// and scrapes their metrics from the service's /metrics over loopback.
func TestScrape(t *testing.T) {
	s := newSite(t)
	gateAndGCRA(t, s.reg)
	s.traffic(t)
	url := s.srv.URL + "/metrics"
	if err := testutil.ScrapeAndCompare(url, strings.NewReader(wantHTTP), "limits_http_requests_total", "limits_http_policy_requests_total",
		"limits_http_policy_keys", "limits_http_policy_max_keys", "limits_http_shadow_refusals_total", "limits_http_policy_shadow_refusals_total",
		"limits_http_route_requests_total"); err != nil {
		t.Error(err)
	}
	gates := []string{"limits_gate_admitted_total", "limits_gate_capacity", "limits_gate_in_flight", "limits_gate_peak_in_flight",
		"limits_gate_shed_total", "limits_gate_timed_out_total", "limits_gate_waiting",
		"limits_gate_priority_admitted_total", "limits_gate_priority_capacity", "limits_gate_priority_shed_total"}
	if err := testutil.ScrapeAndCompare(url, strings.NewReader(wantGates), gates...); err != nil {
		t.Error(err)
	}
	if err := testutil.ScrapeAndCompare(url, strings.NewReader(wantGCRA), "limits_gcra_keys", "limits_gcra_max_keys", "limits_gcra_table_full_total"); err != nil {
		t.Error(err)
	}
	promtest.CheckConventions(t, promtest.Scrape(t, url))
	promtest.Lint(t, s.reg)
}

// TestNoGateNoPolicy checks a Middleware without a gate, a rate or a
// route: no gate metrics and no policy or route series, but every outcome
// at 0, and every refusal of a layer in shadow mode.
func TestNoGateNoPolicy(t *testing.T) {
	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{MaxInFlightPerClient: 4}})
	if err != nil {
		t.Fatal(err)
	}
	c := limitsprom.NewCollector("bare", m)
	if n := testutil.CollectAndCount(c); n != 11+5 {
		t.Errorf("%d series, want the 11 outcomes and 5 refusals in shadow mode", n)
	}
	if n := testutil.CollectAndCount(c, "limits_gate_in_flight", "limits_http_policy_requests_total", "limits_http_route_requests_total"); n != 0 {
		t.Errorf("%d gate, policy or route series, want none", n)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	promtest.Lint(t, reg)
}

// TestEngine registers an admit.Engine used directly, and a Middleware
// over another: the Engine's metrics are those of a front end, named
// limits_admit_*, and its gate is exported under its name.
func TestEngine(t *testing.T) {
	e, err := admit.New(admit.Config{
		MaxInFlight: 2,
		Rate:        limits.Limit{Events: 1, Period: time.Hour},
		Policies:    []admit.Policy{{Name: "jobs", Routes: []string{"/jobs/"}, Rate: limits.Limit{Events: 5, Period: time.Hour}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := limitsprom.Register(reg, "queue", e); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		var tk admit.Ticket
		if err := e.Admit(context.Background(), &admit.Request{Peer: "192.0.2.1", Route: "/jobs/resize"}, &tk); err == nil {
			tk.Done(adaptive.Success)
		}
	}
	want := `
# HELP limits_admit_requests_total Requests by outcome, with the layer that decided it: allowed (layer all), exempt, or the reason of a refusal. request_timeout also counts requests allowed and cut short, and limiter_error every failed limiter call, including those the failure policy let through.
# TYPE limits_admit_requests_total counter
limits_admit_requests_total{layer="all",name="queue",outcome="allowed"} 1
limits_admit_requests_total{layer="capacity",name="queue",outcome="request_timeout"} 0
limits_admit_requests_total{layer="capacity",name="queue",outcome="server_busy"} 0
limits_admit_requests_total{layer="concurrency",name="queue",outcome="concurrency_limited"} 0
limits_admit_requests_total{layer="concurrency",name="queue",outcome="concurrency_table_full"} 0
limits_admit_requests_total{layer="exempt",name="queue",outcome="exempt"} 0
limits_admit_requests_total{layer="rate",name="queue",outcome="cost_above_burst"} 0
limits_admit_requests_total{layer="rate",name="queue",outcome="invalid_cost"} 0
limits_admit_requests_total{layer="rate",name="queue",outcome="limiter_error"} 0
limits_admit_requests_total{layer="rate",name="queue",outcome="rate_limited"} 1
limits_admit_requests_total{layer="rate",name="queue",outcome="table_full"} 0
# HELP limits_gate_admitted_total Requests the gate let in.
# TYPE limits_gate_admitted_total counter
limits_gate_admitted_total{name="queue"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "limits_admit_requests_total", "limits_gate_admitted_total"); err != nil {
		t.Error(err)
	}
	for metric, n := range map[string]int{
		"limits_admit_policy_requests_total": 2 * 6, "limits_admit_policy_keys": 2, "limits_admit_route_requests_total": 2 * 11,
	} {
		if got, err := testutil.GatherAndCount(reg, metric); err != nil || got != n {
			t.Errorf("%s: %d series, %v; want %d", metric, got, err, n)
		}
	}
	if err := limitsprom.Register(reg, "queue", e); err == nil {
		t.Error("the Engine twice under one name: no error")
	}
	// A Middleware is a front end of its own protocol: it may share a
	// name with an Engine, but for their gates.
	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{Rate: limits.Limit{Events: 1, Period: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := limitsprom.Register(reg, "queue", m); err != nil {
		t.Errorf("a Middleware without a gate under an Engine's name: %v", err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	promtest.CheckConventions(t, byName)
	promtest.Lint(t, reg)
}

// TestRegisterErrors checks what Register refuses, and that components of
// a kind register side by side under different names.
func TestRegisterErrors(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	g1, _ := limits.NewGate(1)
	g2, _ := limits.NewGate(1)
	if err := limitsprom.Register(reg, "a", g1); err != nil {
		t.Fatal(err)
	}
	if err := limitsprom.Register(reg, "b", g2); err != nil {
		t.Errorf("a second gate under another name: %v", err)
	}
	if err := limitsprom.Register(reg, "a", g2); err == nil {
		t.Error("a second gate under the same name: no error")
	}
	// A middleware's gate takes the middleware's name among the gates.
	m, _ := httplimit.New(httplimit.Config{Limits: admit.Config{MaxInFlight: 1}})
	if err := limitsprom.Register(reg, "a", m); err == nil {
		t.Error("a middleware with a gate under a gate's name: no error")
	}
	if err := limitsprom.Register(reg, "c", m); err != nil {
		t.Errorf("a middleware under a new name: %v", err)
	}
	// Another kind may share a name.
	if err := limitsprom.Register(reg, "a", limits.NewGCRA(1, time.Second)); err != nil {
		t.Errorf("a GCRA under a gate's name: %v", err)
	}
	for _, name := range []string{"", "\xff"} {
		if err := limitsprom.Register(reg, name, limits.NewGCRA(1, time.Second)); err == nil || !strings.HasPrefix(err.Error(), "limitsprom: ") {
			t.Errorf("name %q: error %v, want one of limitsprom", name, err)
		}
	}
	for _, c := range []any{nil, (*limits.Gate)(nil), (*limits.GCRA)(nil), (*httplimit.Middleware)(nil), (*admit.Engine)(nil),
		limits.Limit{Events: 1, Period: time.Second}, "api"} {
		if err := limitsprom.Register(reg, "d", c); err == nil || !strings.HasPrefix(err.Error(), "limitsprom: ") {
			t.Errorf("%T %v: error %v, want one of limitsprom", c, c, err)
		}
	}
	if _, err := reg.Gather(); err != nil {
		t.Error(err)
	}
}

// TestNewCollectorPanics checks that NewCollector panics for what
// Register refuses as no component.
func TestNewCollectorPanics(t *testing.T) {
	for _, c := range []any{nil, (*limits.Gate)(nil), (*httplimit.Middleware)(nil), 42} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%T %v: no panic", c, c)
				}
			}()
			limitsprom.NewCollector("x", c)
		}()
	}
}

// TestScrapeUnderLoad scrapes while requests flow, for the race detector,
// and checks that counters never go back.
func TestScrapeUnderLoad(t *testing.T) {
	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{
		MaxInFlight: 4,
		Rate:        limits.Limit{Events: 100, Period: time.Second},
		Policies:    []admit.Policy{{Name: "items", Routes: []string{"/items/"}, Rate: limits.Limit{Events: 50, Period: time.Second}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := limitsprom.Register(reg, "api", m); err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 500 {
				r := httptest.NewRequest(http.MethodGet, []string{"/", "/items/1"}[i%2], nil)
				r.RemoteAddr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(w*10 + i%10)}), 1).String()
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
		})
	}
	last := map[string]float64{}
	for range 20 {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fams {
			if f.GetType() != dto.MetricType_COUNTER {
				continue
			}
			total := 0.0
			for _, s := range f.GetMetric() {
				total += s.GetCounter().GetValue()
			}
			if total < last[f.GetName()] {
				t.Errorf("%s went back from %v to %v", f.GetName(), last[f.GetName()], total)
			}
			last[f.GetName()] = total
		}
	}
	wg.Wait()
	for metric, want := range map[string]int{"limits_http_requests_total": 11, "limits_http_route_requests_total": 2 * 11} {
		if n, _ := testutil.GatherAndCount(reg, metric); n != want {
			t.Errorf("%s: %d series, want %d", metric, n, want)
		}
	}
}

// TestGateWaitAndPriorities checks the series of a gate's total wait and
// of its classes, on a gate of 3 with one place reserved for critical
// callers, in a bubble whose waits last exactly what they are told.
func TestGateWaitAndPriorities(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		gate, err := limits.NewGate(3, limits.WithReserve(limits.PriorityCritical, 1))
		if err != nil {
			t.Fatal(err)
		}
		if err := limitsprom.Register(reg, "ws", gate); err != nil {
			t.Fatal(err)
		}
		a, _ := gate.TryEnterPriority(limits.PrioritySheddable)
		b, _ := gate.TryEnter()
		defer b.Release()
		gate.TryEnterPriority(limits.PrioritySheddable) // shed: the reserve
		c, _ := gate.TryEnterPriority(limits.PriorityCritical)
		defer c.Release()
		// A wait of 5ms that runs out, and a critical caller's let in
		// after 2ms.
		gate.Enter(context.Background(), 5*time.Millisecond)
		go func() {
			time.Sleep(2 * time.Millisecond)
			a.Release()
		}()
		if p, ok := gate.EnterPriority(context.Background(), time.Second, limits.PriorityCritical); ok {
			defer p.Release()
		} else {
			t.Fatal("Enter refused a place freed while it waited")
		}
		want := `
# HELP limits_gate_priority_admitted_total Requests of the priority the gate let in.
# TYPE limits_gate_priority_admitted_total counter
limits_gate_priority_admitted_total{name="ws",priority="critical"} 2
limits_gate_priority_admitted_total{name="ws",priority="default"} 1
limits_gate_priority_admitted_total{name="ws",priority="sheddable"} 1
# HELP limits_gate_priority_capacity Requests inside the gate below which one of the priority may enter: the capacity less the places reserved for higher priorities.
# TYPE limits_gate_priority_capacity gauge
limits_gate_priority_capacity{name="ws",priority="critical"} 3
limits_gate_priority_capacity{name="ws",priority="default"} 2
limits_gate_priority_capacity{name="ws",priority="sheddable"} 2
# HELP limits_gate_priority_shed_total Requests of the priority the gate refused at once.
# TYPE limits_gate_priority_shed_total counter
limits_gate_priority_shed_total{name="ws",priority="critical"} 0
limits_gate_priority_shed_total{name="ws",priority="default"} 0
limits_gate_priority_shed_total{name="ws",priority="sheddable"} 1
# HELP limits_gate_wait_seconds_total Time the requests that waited for a place in the gate spent waiting, added up: divided by those requests, the mean wait.
# TYPE limits_gate_wait_seconds_total counter
limits_gate_wait_seconds_total{name="ws"} 0.007
# HELP limits_gate_waited_total Requests that waited for a place in the gate and have stopped waiting, let in or not.
# TYPE limits_gate_waited_total counter
limits_gate_waited_total{name="ws"} 2
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "limits_gate_priority_admitted_total", "limits_gate_priority_capacity",
			"limits_gate_priority_shed_total", "limits_gate_wait_seconds_total", "limits_gate_waited_total"); err != nil {
			t.Error(err)
		}
	})
}

// TestTransport registers a client, an httplimit.Transport, and scrapes
// its counters after a refusal that paused its key.
func TestTransport(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	tr := &httplimit.Transport{}
	reg := prometheus.NewPedanticRegistry()
	if err := limitsprom.Register(reg, "upstream", tr); err != nil {
		t.Fatal(err)
	}
	res, err := (&http.Client{Transport: tr}).Get(srv.URL + "/busy")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	want := `
# HELP limits_http_client_paused_total Answers of the server that paused their key, until the time they gave.
# TYPE limits_http_client_paused_total counter
limits_http_client_paused_total{name="upstream"} 1
# HELP limits_http_client_requests_total Requests given to the client.
# TYPE limits_http_client_requests_total counter
limits_http_client_requests_total{name="upstream"} 1
# HELP limits_http_client_sent_total Requests sent to the server, retries included.
# TYPE limits_http_client_sent_total counter
limits_http_client_sent_total{name="upstream"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "limits_http_client_paused_total",
		"limits_http_client_requests_total", "limits_http_client_sent_total"); err != nil {
		t.Error(err)
	}
	promtest.Lint(t, reg)
}
