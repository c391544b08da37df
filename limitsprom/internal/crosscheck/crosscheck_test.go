// Package crosscheck tests the exporters of limitsprom and limitsotel
// with every kind of component, those of the modules they do not require
// included (a grpclimit.Interceptor, a redislimit.GCRA): it needs all of
// them, so it is a module that no user requires, and is not released.
package crosscheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/grpclimit"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/limitsprom"
	"github.com/limitsgo/limits/limitsprom/limitsotel"
	"github.com/limitsgo/limits/redislimit"
	"github.com/limitsgo/limits/redislimit/redistest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// quiet drops go-redis's log lines, which the failures the tests cause
// would fill with failed dials.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	goleak.VerifyTestMain(m)
}

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

// point is a series' value, and whether it is a counter.
type point struct {
	v       float64
	counter bool
}

// fromProm returns what reg reports, as "name{attr=value,...}" -> value
// and kind, with the names of OpenTelemetry, the histograms left out.
func fromProm(t *testing.T, reg prometheus.Gatherer) map[string]point {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]point{}
	for _, f := range fams {
		if f.GetType() == dto.MetricType_HISTOGRAM {
			continue
		}
		name := strings.TrimSuffix(strings.TrimSuffix(f.GetName(), "_total"), "_seconds") // the unit is metadata in OpenTelemetry
		name = strings.Replace(strings.Replace(name, "_", ".", 1), "_", ".", 1)           // limits.<subsystem>.<name>
		for _, s := range f.GetMetric() {
			var kv []string
			for _, l := range s.GetLabel() {
				kv = append(kv, l.GetName()+"="+l.GetValue())
			}
			slices.Sort(kv)
			key := name + "{" + strings.Join(kv, ",") + "}"
			if f.GetType() == dto.MetricType_COUNTER {
				got[key] = point{s.GetCounter().GetValue(), true}
			} else {
				got[key] = point{s.GetGauge().GetValue(), false}
			}
		}
	}
	return got
}

// fromOTel returns what reader collects, keyed as fromProm's.
func fromOTel(t *testing.T, reader *sdkmetric.ManualReader) map[string]point {
	t.Helper()
	got := map[string]point{}
	for _, m := range collect(t, reader) {
		add := func(attrs []string, v float64, counter bool) {
			slices.Sort(attrs)
			got[m.Name+"{"+strings.Join(attrs, ",")+"}"] = point{v, counter}
		}
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			if !d.IsMonotonic || d.Temporality != metricdata.CumulativeTemporality {
				t.Errorf("%s: a sum that is not a monotonic cumulative counter", m.Name)
			}
			for _, dp := range d.DataPoints {
				add(attrsOf(dp.Attributes.ToSlice()), float64(dp.Value), true)
			}
		case metricdata.Gauge[int64]:
			for _, dp := range d.DataPoints {
				add(attrsOf(dp.Attributes.ToSlice()), float64(dp.Value), false)
			}
		case metricdata.Sum[float64]:
			for _, dp := range d.DataPoints {
				add(attrsOf(dp.Attributes.ToSlice()), dp.Value, true)
			}
		default:
			t.Errorf("%s: data of type %T", m.Name, m.Data)
		}
	}
	return got
}

// attrsOf returns kvs as "key=value" strings.
func attrsOf(kvs []attribute.KeyValue) []string {
	var s []string
	for _, a := range kvs {
		s = append(s, string(a.Key)+"="+a.Value.AsString())
	}
	return s
}

// register registers c under name with both exporters.
func register(t *testing.T, promReg prometheus.Registerer, meter metric.Meter, name string, c any) {
	t.Helper()
	if err := limitsprom.Register(promReg, name, c); err != nil {
		t.Fatal(err)
	}
	reg, err := limitsotel.Register(meter, name, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Unregister() })
}

// The number of series of a front end with p rate policies, r route
// patterns, and its own gate or not.
func frontSeries(p, r int, gate bool) int {
	n := 11 + 5 + p*(6+4+2) // outcomes, shadow refusals; per policy: outcomes, shadow refusals, keys and max keys
	if r > 0 {
		n += (r + 1) * 11 // the routes and other, by outcome
	}
	if gate {
		n += gateSeries
	}
	return n
}

// gateSeries is the number of series of a gate: 11, and 3 by priority
// for 3 priorities.
const gateSeries = 11 + 3*3

// TestSameNumbers registers one component of every kind with a Prometheus
// registry and an OpenTelemetry meter, sends traffic through each, and
// checks that every Prometheus series but the Redis latency histogram is
// an OpenTelemetry data point of the same value, attributes and kind, and
// that there are no others.
func TestSameNumbers(t *testing.T) {
	meter, reader := newMeter()
	promReg := prometheus.NewPedanticRegistry()

	// An httplimit.Middleware with a gate, a caller key (policies
	// address, default, keyless) and a route policy.
	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{
		Exempt:      []string{"/healthz"},
		MaxInFlight: 8,
		Rate:        limits.Limit{Events: 2, Period: time.Hour},
		CallerKey:   "X-Api-Key",
		Policies:    []admit.Policy{{Name: "items", Routes: []string{"/api/items/"}, Rate: limits.Limit{Events: 1, Period: time.Hour}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	register(t, promReg, meter, "api", m)
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for i := range 20 {
		r := httptest.NewRequest(http.MethodGet, []string{"/healthz", "/api", "/api/items/1"}[min(i%4, 2)], nil)
		r.RemoteAddr = fmt.Sprintf("192.0.2.%d:1", i%3)
		if i%2 == 0 {
			r.Header.Set("X-Api-Key", fmt.Sprint("key-", i%5))
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
	}

	// A GCRA of 2 keys, asked for 3; a gate of 1, asked twice.
	g := limits.NewGCRA(1, time.Hour, limits.WithMaxKeys(2))
	register(t, promReg, meter, "tokens", g)
	for _, k := range []string{"a", "b", "c"} {
		g.Allow(k)
	}
	gate, _ := limits.NewGate(1)
	register(t, promReg, meter, "jobs", gate)
	p, _ := gate.TryEnter()
	defer p.Release()
	gate.TryEnter()

	// A grpclimit.Interceptor with a gate, a caller key and a method
	// policy, serving 5 calls, some refused.
	it, err := grpclimit.New(grpclimit.Config{Limits: admit.Config{
		MaxInFlight: 4,
		Rate:        limits.Limit{Events: 2, Period: time.Hour},
		CallerKey:   "authorization",
		Policies:    []admit.Policy{{Name: "say", Routes: []string{"/test.Echo/Say"}, Rate: limits.Limit{Events: 3, Period: time.Hour}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	register(t, promReg, meter, "rpc", it)
	codes := callThrough(t, it, 6)
	if !slices.Contains(codes, "OK") || !slices.Contains(codes, "ResourceExhausted") {
		t.Errorf("calls: %v, want some allowed and some refused", codes)
	}

	// An admit.Engine used directly, with a gate and a route policy.
	e, err := admit.New(admit.Config{
		MaxInFlight: 2,
		Rate:        limits.Limit{Events: 10, Period: time.Hour},
		Policies:    []admit.Policy{{Name: "resize", Routes: []string{"/jobs/resize"}, Rate: limits.Limit{Events: 1, Period: time.Hour}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	register(t, promReg, meter, "queue", e)
	for i := range 4 {
		var tk admit.Ticket
		err := e.Admit(context.Background(), &admit.Request{Peer: "192.0.2.9", Route: []string{"/jobs/resize", "/jobs/crop"}[i%2]}, &tk)
		if err == nil {
			tk.Done(adaptive.Success)
		} else if ref := (*admit.Refusal)(nil); !errors.As(err, &ref) {
			t.Fatal(err)
		}
	}

	// A redislimit.GCRA on a real redis-server, with a failure after the
	// server is gone.
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	rg, err := redislimit.New(c, 2, time.Hour, redislimit.WithPrefix("crosscheck:test:"))
	if err != nil {
		t.Fatal(err)
	}
	register(t, promReg, meter, "fleet", rg)
	for range 3 {
		rg.Allow(context.Background(), "k")
	}
	srv.Kill()
	rg.Allow(context.Background(), "k")

	prom, otel := fromProm(t, promReg), fromOTel(t, reader)
	want := frontSeries(4, 2, true) + // the Middleware: policies address, default, keyless, items; routes /healthz and /api/items/
		frontSeries(4, 1, true) + // the Interceptor: address, default, keyless, say; one method
		frontSeries(2, 1, true) + // the Engine: default, resize; one route
		3 + gateSeries + // the GCRA and the gate
		4 + 5 + 1 // the Redis GCRA's calls, 5 kinds of failure, fallbacks
	if len(prom) != want {
		t.Errorf("%d Prometheus series, want %d", len(prom), want)
	}
	for k, p := range prom {
		if o, ok := otel[k]; !ok || o != p {
			t.Errorf("%s: Prometheus %+v, OpenTelemetry %+v (found: %v)", k, p, o, ok)
		}
	}
	for k := range otel {
		if _, ok := prom[k]; !ok {
			t.Errorf("%s: in OpenTelemetry only", k)
		}
	}
	// The traffic moved these: the comparison is not of zeros alone.
	for _, k := range []string{
		`limits.http.requests{layer=rate,name=api,outcome=rate_limited}`,
		`limits.http.requests{layer=exempt,name=api,outcome=exempt}`,
		`limits.http.policy_keys{name=api,policy=default}`,
		`limits.http.route_requests{name=api,outcome=rate_limited,route=/api/items/}`,
		`limits.http.route_requests{name=api,outcome=exempt,route=/healthz}`,
		`limits.gcra.table_full{name=tokens}`,
		`limits.gate.shed{name=jobs}`,
		`limits.gate.admitted{name=api}`,
		`limits.grpc.requests{layer=all,name=rpc,outcome=allowed}`,
		`limits.grpc.requests{layer=rate,name=rpc,outcome=rate_limited}`,
		`limits.grpc.policy_keys{name=rpc,policy=address}`,
		`limits.grpc.policy_max_keys{name=rpc,policy=address}`,
		`limits.grpc.method_requests{method=/test.Echo/Say,name=rpc,outcome=allowed}`,
		`limits.gate.admitted{name=rpc}`,
		`limits.admit.requests{layer=all,name=queue,outcome=allowed}`,
		`limits.admit.route_requests{name=queue,outcome=rate_limited,route=/jobs/resize}`,
		`limits.admit.policy_requests{name=queue,outcome=rate_limited,policy=resize}`,
		`limits.gate.admitted{name=queue}`,
		`limits.redis.calls{name=fleet,op=decide,result=ok}`,
		`limits.redis.failures{kind=connection,name=fleet}`,
	} {
		if otel[k].v == 0 {
			t.Errorf("%s: 0; the traffic should have moved it", k)
		}
	}
}

// echoDesc describes test.Echo, a one-method service written without
// generated code: Say answers its argument, after handler, if set, has
// run.
func echoDesc(handler func(in string)) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "test.Echo",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Say",
			Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				h := func(ctx context.Context, req any) (any, error) {
					s := req.(*wrapperspb.StringValue).GetValue()
					if handler != nil {
						handler(s)
					}
					return wrapperspb.String(s), nil
				}
				if ic == nil {
					return h(ctx, in)
				}
				return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/test.Echo/Say"}, h)
			},
		}},
	}
}

// callThrough serves test.Echo behind it on an in-memory network, calls
// it n times, with a caller key on every other call, and returns the
// codes of the answers.
func callThrough(t *testing.T, it *grpclimit.Interceptor, n int) []string {
	t.Helper()
	lis := bufconn.Listen(1 << 16)
	srv := grpc.NewServer(it.ServerOptions()...)
	srv.RegisterService(echoDesc(nil), struct{}{})
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var got []string
	for i := range n {
		ctx := context.Background()
		if i%2 == 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer alice")
		}
		var out wrapperspb.StringValue
		got = append(got, status.Code(conn.Invoke(ctx, "/test.Echo/Say", wrapperspb.String("hi"), &out)).String())
	}
	return got
}
