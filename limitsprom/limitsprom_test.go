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
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/limitsprom"
	"github.com/limitsgo/limits/limitsprom/internal/promtest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
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
	m, err := httplimit.New(httplimit.Config{
		Exempt:         httplimit.ExemptPaths("/healthz"),
		MaxInFlight:    1,
		Rate:           limits.Limit{Events: 2, Period: time.Hour},
		MaxKeys:        1000,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
	})
	if err != nil {
		t.Fatal(err)
	}
	login, err := m.With(httplimit.Policy{Name: "login", Rate: limits.Limit{Events: 1, Period: time.Hour}, MaxKeys: 100})
	if err != nil {
		t.Fatal(err)
	}
	s := &site{m: m, reg: prometheus.NewRegistry(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	app := http.NewServeMux()
	app.Handle("/healthz", ok)
	app.Handle("/api", ok)
	app.Handle("/login", login.Handler(ok))
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
# HELP limits_http_requests_total HTTP requests by outcome, with the layer that decided it: allowed (layer all), exempt, or the reason of a refusal. request_timeout also counts as allowed, and so does limiter_error when the policy lets requests through.
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
		"limits_http_policy_keys", "limits_http_policy_max_keys"); err != nil {
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

// TestNoGateNoPolicy checks a Middleware without a gate or a rate: no
// gate metrics and no policy series, but every outcome at 0.
func TestNoGateNoPolicy(t *testing.T) {
	m, err := httplimit.New(httplimit.Config{MaxInFlightPerClient: 4})
	if err != nil {
		t.Fatal(err)
	}
	c := limitsprom.NewCollector("bare", m)
	if n := testutil.CollectAndCount(c); n != 11 {
		t.Errorf("%d series, want the 11 outcomes", n)
	}
	if n := testutil.CollectAndCount(c, "limits_gate_in_flight", "limits_http_policy_requests_total"); n != 0 {
		t.Errorf("%d gate or policy series, want none", n)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
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
	m, _ := httplimit.New(httplimit.Config{MaxInFlight: 1})
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
		if err := limitsprom.Register(reg, name, limits.NewGCRA(1, time.Second)); err == nil {
			t.Errorf("name %q: no error", name)
		}
	}
	if _, err := reg.Gather(); err != nil {
		t.Error(err)
	}
}

func TestNilComponent(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	limitsprom.NewCollector("x", (*limits.Gate)(nil))
}

// TestScrapeUnderLoad scrapes while requests flow and a route is added,
// for the race detector, and checks that counters never go back.
func TestScrapeUnderLoad(t *testing.T) {
	m, err := httplimit.New(httplimit.Config{MaxInFlight: 4, Rate: limits.Limit{Events: 100, Period: time.Second}})
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
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				r.RemoteAddr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(w*10 + i%10)}), 1).String()
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
		})
	}
	wg.Go(func() {
		m.With(httplimit.Policy{Name: "late", Rate: limits.Limit{Events: 1, Period: time.Second}})
	})
	var last float64
	for range 20 {
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var total float64
		for _, f := range fams {
			if f.GetName() == "limits_http_requests_total" {
				for _, s := range f.GetMetric() {
					total += s.GetCounter().GetValue()
				}
			}
		}
		if total < last {
			t.Errorf("requests went back from %v to %v", last, total)
		}
		last = total
	}
	wg.Wait()
	if n, _ := testutil.GatherAndCount(reg, "limits_http_requests_total"); n != 11 {
		t.Errorf("%d series of requests, want 11", n)
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
