package limitsprom_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/limitsprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
)

// show prints the exposition of the metrics named, as a scrape would
// serve it, without the help text.
func show(g prometheus.Gatherer, names ...string) {
	text, err := testutil.GatherAndFormat(g, expfmt.TypeTextPlain, names...)
	if err != nil {
		panic(err)
	}
	for line := range strings.Lines(string(text)) {
		if !strings.HasPrefix(line, "# HELP") {
			fmt.Print(line)
		}
	}
}

// A Gate of 2 with both places taken sheds the third caller.
func ExampleRegister() {
	reg := prometheus.NewRegistry()
	gate, _ := limits.NewGate(2)
	if err := limitsprom.Register(reg, "api", gate); err != nil {
		panic(err)
	}
	p1, _ := gate.TryEnter()
	defer p1.Release()
	p2, _ := gate.TryEnter()
	defer p2.Release()
	gate.TryEnter() // refused: shed

	show(reg, "limits_gate_capacity", "limits_gate_in_flight", "limits_gate_shed_total")
	// Output:
	// # TYPE limits_gate_capacity gauge
	// limits_gate_capacity{name="api"} 2
	// # TYPE limits_gate_in_flight gauge
	// limits_gate_in_flight{name="api"} 2
	// # TYPE limits_gate_shed_total counter
	// limits_gate_shed_total{name="api"} 1
}

// A middleware allowing 2 requests a minute per client, of which one
// client sends 3: every outcome is exported, those that never happened at
// 0, and so is the fullness of the policy's table of clients.
func ExampleRegister_middleware() {
	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{
		Rate:    limits.Limit{Events: 2, Period: time.Minute},
		MaxKeys: 10_000,
	}})
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	if err := limitsprom.Register(reg, "api", m); err != nil {
		panic(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for range 3 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	}

	show(reg, "limits_http_requests_total", "limits_http_policy_keys", "limits_http_policy_max_keys")
	// Output:
	// # TYPE limits_http_policy_keys gauge
	// limits_http_policy_keys{name="api",policy="default"} 1
	// # TYPE limits_http_policy_max_keys gauge
	// limits_http_policy_max_keys{name="api",policy="default"} 10000
	// # TYPE limits_http_requests_total counter
	// limits_http_requests_total{layer="all",name="api",outcome="allowed"} 2
	// limits_http_requests_total{layer="capacity",name="api",outcome="request_timeout"} 0
	// limits_http_requests_total{layer="capacity",name="api",outcome="server_busy"} 0
	// limits_http_requests_total{layer="concurrency",name="api",outcome="concurrency_limited"} 0
	// limits_http_requests_total{layer="concurrency",name="api",outcome="concurrency_table_full"} 0
	// limits_http_requests_total{layer="exempt",name="api",outcome="exempt"} 0
	// limits_http_requests_total{layer="rate",name="api",outcome="cost_above_burst"} 0
	// limits_http_requests_total{layer="rate",name="api",outcome="invalid_cost"} 0
	// limits_http_requests_total{layer="rate",name="api",outcome="limiter_error"} 0
	// limits_http_requests_total{layer="rate",name="api",outcome="rate_limited"} 1
	// limits_http_requests_total{layer="rate",name="api",outcome="table_full"} 0
}

// A middleware with a policy of its own for /login counts the requests
// of each route pattern of its configuration, and of the others under
// "other", whichever layer decided them: the label holds the pattern, so
// the series stay as few as the patterns however many paths clients send.
func ExampleRegister_routes() {
	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{
		Rate: limits.Limit{Events: 100, Period: time.Minute},
		Policies: []admit.Policy{
			{Name: "login", Routes: []string{"POST /login"}, Rate: limits.Limit{Events: 1, Period: time.Minute}},
		},
	}})
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	if err := limitsprom.Register(reg, "api", m); err != nil {
		panic(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, r := range []string{"POST /login", "POST /login", "GET /items/1", "GET /items/2"} {
		method, path, _ := strings.Cut(r, " ")
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(method, path, nil))
	}

	text, err := testutil.GatherAndFormat(reg, expfmt.TypeTextPlain, "limits_http_route_requests_total")
	if err != nil {
		panic(err)
	}
	for line := range strings.Lines(string(text)) {
		if !strings.HasPrefix(line, "#") && !strings.HasSuffix(line, " 0\n") {
			fmt.Print(line)
		}
	}
	// Output:
	// limits_http_route_requests_total{name="api",outcome="allowed",route="POST /login"} 1
	// limits_http_route_requests_total{name="api",outcome="allowed",route="other"} 2
	// limits_http_route_requests_total{name="api",outcome="rate_limited",route="POST /login"} 1
}

// Labels shared by every metric of a service, such as its region, are
// added by the registerer; the collector adds only name.
func ExampleNewCollector() {
	reg := prometheus.NewRegistry()
	perKey := limits.NewGCRA(10, time.Minute, limits.WithMaxKeys(1000))
	regional := prometheus.WrapRegistererWith(prometheus.Labels{"region": "eu"}, reg)
	regional.MustRegister(limitsprom.NewCollector("per_key", perKey))
	for _, k := range []string{"alice", "bob", "carol"} {
		perKey.Allow(k)
	}

	show(reg, "limits_gcra_keys", "limits_gcra_max_keys")
	// Output:
	// # TYPE limits_gcra_keys gauge
	// limits_gcra_keys{name="per_key",region="eu"} 3
	// # TYPE limits_gcra_max_keys gauge
	// limits_gcra_max_keys{name="per_key",region="eu"} 1000
}
