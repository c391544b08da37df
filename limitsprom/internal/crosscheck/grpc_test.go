package crosscheck

import (
	"context"
	"net"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/grpclimit"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/limitsprom"
	"github.com/limitsgo/limits/limitsprom/internal/promtest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// rpcSite is a gRPC service behind an Interceptor on loopback TCP, and
// its metrics on a loopback HTTP server.
type rpcSite struct {
	it      *grpclimit.Interceptor
	conn    *grpc.ClientConn
	reg     *prometheus.Registry
	metrics string        // the URL of the metrics
	entered chan struct{} // a call "slow" has entered its handler
	release chan struct{} // lets the calls "slow" return
}

// newRPCSite serves an Interceptor that admits one call at a time, allows
// each caller key ("authorization" metadata) 2 calls an hour in a table
// of 1,000 ("default"), each address without a key as many ("keyless"),
// and each address 8 ("address", AddressMultiplier 4), and exempts the
// health service. Clients are told apart by x-forwarded-for, trusted
// from loopback.
func newRPCSite(t *testing.T) *rpcSite {
	t.Helper()
	it, err := grpclimit.New(grpclimit.Config{Limits: admit.Config{
		MaxInFlight:    1,
		Rate:           limits.Limit{Events: 2, Period: time.Hour},
		MaxKeys:        1000,
		CallerKey:      "authorization",
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s := &rpcSite{it: it, reg: prometheus.NewRegistry(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	srv := grpc.NewServer(it.ServerOptions()...)
	srv.RegisterService(echoDesc(func(in string) {
		if in == "slow" {
			s.entered <- struct{}{}
			<-s.release
		}
	}), struct{}{})
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	s.conn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.conn.Close() })

	if err := limitsprom.Register(s.reg, "rpc", it); err != nil {
		t.Fatal(err)
	}
	ms := httptest.NewServer(promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	t.Cleanup(ms.Close)
	s.metrics = ms.URL
	return s
}

// say calls test.Echo/Say with in, from the client address addr, with the
// caller key token if not empty, and returns the code of the answer.
func (s *rpcSite) say(t *testing.T, addr, token, in string) codes.Code {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md := []string{"x-forwarded-for", addr}
	if token != "" {
		md = append(md, "authorization", token)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, md...)
	var out wrapperspb.StringValue
	return status.Code(s.conn.Invoke(ctx, "/test.Echo/Say", wrapperspb.String(in), &out))
}

// traffic sends the known traffic that wantGRPC counts.
func (s *rpcSite) traffic(t *testing.T) {
	t.Helper()
	want := func(got, want codes.Code, what string) {
		t.Helper()
		if got != want {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
	}
	// Two probes, exempt.
	hc := healthpb.NewHealthClient(s.conn)
	for range 2 {
		if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatal("probe:", err)
		}
	}
	// A caller with a key, 3 calls: the third is refused by its key's
	// bucket ("default").
	want(s.say(t, "192.0.2.10", "Bearer alice", "hi"), codes.OK, "A 1")
	want(s.say(t, "192.0.2.10", "Bearer alice", "hi"), codes.OK, "A 2")
	want(s.say(t, "192.0.2.10", "Bearer alice", "hi"), codes.ResourceExhausted, "A 3")
	// A caller without a key, 3 calls: the third is refused by the
	// bucket of its address's keyless calls ("keyless").
	want(s.say(t, "192.0.2.20", "", "hi"), codes.OK, "B 1")
	want(s.say(t, "192.0.2.20", "", "hi"), codes.OK, "B 2")
	want(s.say(t, "192.0.2.20", "", "hi"), codes.ResourceExhausted, "B 3")
	// A slow call holds the gate's only place: the next is shed.
	done := make(chan codes.Code)
	go func() { done <- s.say(t, "192.0.2.30", "Bearer carol", "slow") }()
	<-s.entered
	want(s.say(t, "192.0.2.40", "Bearer dave", "hi"), codes.Unavailable, "D while the gate is full")
	close(s.release)
	want(<-done, codes.OK, "C's slow call")
}

// The expected exposition of the Interceptor after traffic. The address
// policy holds the 3 addresses whose calls passed the gate; the caller
// keys' policy and the keyless one share a table, of 2 caller keys and 1
// address without a key, which the caller keys' policy reports alone.
const wantGRPC = `
# HELP limits_grpc_requests_total gRPC calls, and stream messages when they are limited, by outcome, with the layer that decided it: allowed (layer all), exempt, or the reason of a refusal. request_timeout also counts requests allowed and cut short, and limiter_error every failed limiter call, including those the failure policy let through.
# TYPE limits_grpc_requests_total counter
limits_grpc_requests_total{layer="all",name="rpc",outcome="allowed"} 5
limits_grpc_requests_total{layer="capacity",name="rpc",outcome="request_timeout"} 0
limits_grpc_requests_total{layer="capacity",name="rpc",outcome="server_busy"} 1
limits_grpc_requests_total{layer="concurrency",name="rpc",outcome="concurrency_limited"} 0
limits_grpc_requests_total{layer="concurrency",name="rpc",outcome="concurrency_table_full"} 0
limits_grpc_requests_total{layer="exempt",name="rpc",outcome="exempt"} 2
limits_grpc_requests_total{layer="rate",name="rpc",outcome="cost_above_burst"} 0
limits_grpc_requests_total{layer="rate",name="rpc",outcome="invalid_cost"} 0
limits_grpc_requests_total{layer="rate",name="rpc",outcome="limiter_error"} 0
limits_grpc_requests_total{layer="rate",name="rpc",outcome="rate_limited"} 2
limits_grpc_requests_total{layer="rate",name="rpc",outcome="table_full"} 0
# HELP limits_grpc_policy_requests_total gRPC calls, and stream messages when they are limited, by rate policy and outcome: allowed, or the reason the policy refused them.
# TYPE limits_grpc_policy_requests_total counter
limits_grpc_policy_requests_total{name="rpc",outcome="allowed",policy="address"} 7
limits_grpc_policy_requests_total{name="rpc",outcome="allowed",policy="default"} 3
limits_grpc_policy_requests_total{name="rpc",outcome="allowed",policy="keyless"} 2
limits_grpc_policy_requests_total{name="rpc",outcome="cost_above_burst",policy="address"} 0
limits_grpc_policy_requests_total{name="rpc",outcome="cost_above_burst",policy="default"} 0
limits_grpc_policy_requests_total{name="rpc",outcome="cost_above_burst",policy="keyless"} 0
limits_grpc_policy_requests_total{name="rpc",outcome="invalid_cost",policy="address"} 0
limits_grpc_policy_requests_total{name="rpc",outcome="invalid_cost",policy="default"} 0
limits_grpc_policy_requests_total{name="rpc",outcome="invalid_cost",policy="keyless"} 0
limits_grpc_policy_requests_total{name="rpc",outcome="limiter_error",policy="address"} 0
limits_grpc_policy_requests_total{name="rpc",outcome="limiter_error",policy="default"} 0
limits_grpc_policy_requests_total{name="rpc",outcome="limiter_error",policy="keyless"} 0
limits_grpc_policy_requests_total{name="rpc",outcome="rate_limited",policy="address"} 0
limits_grpc_policy_requests_total{name="rpc",outcome="rate_limited",policy="default"} 1
limits_grpc_policy_requests_total{name="rpc",outcome="rate_limited",policy="keyless"} 1
limits_grpc_policy_requests_total{name="rpc",outcome="table_full",policy="address"} 0
limits_grpc_policy_requests_total{name="rpc",outcome="table_full",policy="default"} 0
limits_grpc_policy_requests_total{name="rpc",outcome="table_full",policy="keyless"} 0
# HELP limits_grpc_policy_keys Keys the local GCRA of the rate policy holds, including expired keys whose place has not been reused yet; 0 for a policy decided by another limiter alone, or that shares the table of a policy before it (keyless), so that a sum counts each table once.
# TYPE limits_grpc_policy_keys gauge
limits_grpc_policy_keys{name="rpc",policy="address"} 3
limits_grpc_policy_keys{name="rpc",policy="default"} 3
limits_grpc_policy_keys{name="rpc",policy="keyless"} 0
# HELP limits_grpc_policy_max_keys Most keys the local GCRA of the rate policy holds; 0 for a policy decided by another limiter alone, or that shares the table of a policy before it.
# TYPE limits_grpc_policy_max_keys gauge
limits_grpc_policy_max_keys{name="rpc",policy="address"} 1000
limits_grpc_policy_max_keys{name="rpc",policy="default"} 1000
limits_grpc_policy_max_keys{name="rpc",policy="keyless"} 0
# HELP limits_gate_admitted_total Requests the gate let in.
# TYPE limits_gate_admitted_total counter
limits_gate_admitted_total{name="rpc"} 7
# HELP limits_gate_shed_total Requests the gate refused at once, being full with no room to wait.
# TYPE limits_gate_shed_total counter
limits_gate_shed_total{name="rpc"} 1
# HELP limits_gate_capacity Most requests the gate admits at once.
# TYPE limits_gate_capacity gauge
limits_gate_capacity{name="rpc"} 1
`

// TestGRPCScrape sends known calls through an Interceptor, allowed,
// exempt and refused by a rate and by the gate, and scrapes its metrics
// over loopback.
func TestGRPCScrape(t *testing.T) {
	s := newRPCSite(t)
	before := promtest.Scrape(t, s.metrics)
	s.traffic(t)
	if err := testutil.ScrapeAndCompare(s.metrics, strings.NewReader(wantGRPC),
		"limits_grpc_requests_total", "limits_grpc_policy_requests_total", "limits_grpc_policy_keys", "limits_grpc_policy_max_keys",
		"limits_gate_admitted_total", "limits_gate_shed_total", "limits_gate_capacity"); err != nil {
		t.Error(err)
	}
	// Every series was there before the first call, at 0 but for the
	// gate's capacity and the tables' sizes.
	after := promtest.Scrape(t, s.metrics)
	for name, f := range after {
		if n, m := len(before[name].GetMetric()), len(f.GetMetric()); n != m {
			t.Errorf("%s: %d series before any call, %d after", name, n, m)
		}
	}
	for _, name := range []string{"limits_grpc_requests_total", "limits_grpc_policy_requests_total", "limits_grpc_policy_keys"} {
		for _, m := range before[name].GetMetric() {
			if v := m.GetCounter().GetValue() + m.GetGauge().GetValue(); v != 0 {
				t.Errorf("%s %v: %v before any call", name, m.GetLabel(), v)
			}
		}
	}
	promtest.CheckConventions(t, after)
	promtest.Lint(t, s.reg)
}

// TestSharedSeries registers an Interceptor and a Middleware, each with a
// gate, under different names in one registry: their gates share the
// limits_gate_* metrics, and their own metrics differ only in subsystem.
func TestSharedSeries(t *testing.T) {
	it, err := grpclimit.New(grpclimit.Config{Limits: admit.Config{MaxInFlight: 2, Rate: limits.Limit{Events: 1, Period: time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{MaxInFlight: 3, Rate: limits.Limit{Events: 1, Period: time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := limitsprom.Register(reg, "rpc", it); err != nil {
		t.Fatal(err)
	}
	if err := limitsprom.Register(reg, "api", m); err != nil {
		t.Fatal(err)
	}
	if err := limitsprom.Register(reg, "rpc", m); err == nil {
		t.Error("a middleware with a gate under the name of an Interceptor with a gate: no error")
	}
	if n, err := testutil.GatherAndCount(reg, "limits_gate_capacity"); err != nil || n != 2 {
		t.Errorf("%d gates, %v; want 2", n, err)
	}
	for _, sub := range []string{"http", "grpc"} {
		for metric, want := range map[string]int{"requests_total": 11, "shadow_refusals_total": 5, "policy_requests_total": 6,
			"policy_shadow_refusals_total": 4, "policy_keys": 1, "policy_max_keys": 1} {
			if n, err := testutil.GatherAndCount(reg, "limits_"+sub+"_"+metric); err != nil || n != want {
				t.Errorf("limits_%s_%s: %d series, %v; want %d", sub, metric, n, err, want)
			}
		}
	}
	promtest.Lint(t, reg)
}

// TestSharedGateOnce registers a gate shared by an Interceptor and a
// Middleware, and both front ends: the gate's series are exported once,
// under the gate's own name, so that a sum over them counts its requests
// once; each front end still exports its own outcomes.
func TestSharedGateOnce(t *testing.T) {
	g, err := limits.NewGate(5)
	if err != nil {
		t.Fatal(err)
	}
	it, err := grpclimit.New(grpclimit.Config{Limits: admit.Config{Gate: g}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{Gate: g}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	for name, c := range map[string]any{"process": g, "rpc": it, "api": m} {
		if err := limitsprom.Register(reg, name, c); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "limits_gate_capacity"); err != nil || n != 1 {
		t.Errorf("%d series of the shared gate's capacity, %v; want 1", n, err)
	}
	for _, sub := range []string{"http", "grpc"} {
		if n, err := testutil.GatherAndCount(reg, "limits_"+sub+"_requests_total"); err != nil || n != 11 {
			t.Errorf("limits_%s_requests_total: %d series, %v; want 11", sub, n, err)
		}
	}
	promtest.Lint(t, reg)
}

// TestMethodRequests checks limits_grpc_method_requests_total: series
// for the method of a policy's route and one for the others, however
// many methods the clients call, with the refusals of the method's
// policy under its name.
func TestMethodRequests(t *testing.T) {
	it, err := grpclimit.New(grpclimit.Config{Limits: admit.Config{
		Rate:     limits.Limit{Events: 100, Period: time.Hour},
		Policies: []admit.Policy{{Name: "say", Routes: []string{"/test.Echo/Say"}, Rate: limits.Limit{Events: 1, Period: time.Hour}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := limitsprom.Register(reg, "rpc", it); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "limits_grpc_method_requests_total"); err != nil || n != 2*11 {
		t.Errorf("%d series, %v; want 11 outcomes of the method and of the others", n, err)
	}
	srv := grpc.NewServer(it.ServerOptions()...)
	srv.RegisterService(echoDesc(nil), struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for range 3 {
		var out wrapperspb.StringValue
		conn.Invoke(context.Background(), "/test.Echo/Say", wrapperspb.String("x"), &out)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != "limits_grpc_method_requests_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			got[labels["method"]+" "+labels["outcome"]] = m.GetCounter().GetValue()
		}
	}
	for key, want := range map[string]float64{
		"/test.Echo/Say allowed": 1, "/test.Echo/Say rate_limited": 2, "other allowed": 0, "other rate_limited": 0,
	} {
		if got[key] != want {
			t.Errorf("%s: %v, want %v", key, got[key], want)
		}
	}
	if len(got) != 2*11 {
		t.Errorf("%d series after calls, want %d", len(got), 2*11)
	}
	promtest.Lint(t, reg)
}
