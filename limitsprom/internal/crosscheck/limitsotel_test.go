package limitsotel_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/grpclimit"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/limitsprom"
	"github.com/limitsgo/limits/limitsprom/grpclimitprom"
	"github.com/limitsgo/limits/limitsprom/limitsotel"
	"github.com/limitsgo/limits/limitsprom/limitsotel/grpclimitotel"
	"github.com/limitsgo/limits/limitsprom/limitsotel/redislimitotel"
	"github.com/limitsgo/limits/limitsprom/redislimitprom"
	"github.com/limitsgo/limits/redislimit"
	"github.com/limitsgo/limits/redislimit/redistest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// quiet drops go-redis's log lines.
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

// TestSameNumbers registers one component of every kind, those of the
// core and of the subpackages, with a Prometheus registry and an
// OpenTelemetry meter, sends traffic, and checks that every Prometheus
// series but the latency histogram is an OpenTelemetry data point of the
// same value, attributes and kind, and that there are no others.
func TestSameNumbers(t *testing.T) {
	meter, reader := newMeter()
	promReg := prometheus.NewPedanticRegistry()
	register := func(name string, c any) {
		t.Helper()
		var err1, err2 error
		switch c := c.(type) {
		case *limits.Gate:
			err1, err2 = limitsprom.Register(promReg, name, c), errOf(limitsotel.Register(meter, name, c))
		case *limits.GCRA:
			err1, err2 = limitsprom.Register(promReg, name, c), errOf(limitsotel.Register(meter, name, c))
		case *httplimit.Middleware:
			err1, err2 = limitsprom.Register(promReg, name, c), errOf(limitsotel.Register(meter, name, c))
		case *redislimit.GCRA:
			err1, err2 = redislimitprom.Register(promReg, name, c), errOf(redislimitotel.Register(meter, name, c))
		case *grpclimit.Interceptor:
			err1, err2 = grpclimitprom.Register(promReg, name, c), errOf(grpclimitotel.Register(meter, name, c))
		default:
			t.Fatalf("%T: not a component", c)
		}
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
	}

	m, err := httplimit.New(httplimit.Config{
		Exempt:      httplimit.ExemptPaths("/healthz"),
		MaxInFlight: 8,
		Rate:        limits.Limit{Events: 2, Period: time.Hour},
		CallerKey:   httplimit.HeaderKey("X-Api-Key"),
	})
	if err != nil {
		t.Fatal(err)
	}
	register("api", m)
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for i := range 20 {
		r := httptest.NewRequest(http.MethodGet, []string{"/healthz", "/api"}[min(i%4, 1)], nil)
		r.RemoteAddr = fmt.Sprintf("192.0.2.%d:1", i%3)
		if i%2 == 0 {
			r.Header.Set("X-Api-Key", fmt.Sprint("key-", i%5))
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	g := limits.NewGCRA(1, time.Hour, limits.WithMaxKeys(2))
	register("tokens", g)
	for _, k := range []string{"a", "b", "c"} {
		g.Allow(k)
	}
	gate, _ := limits.NewGate(1)
	register("jobs", gate)
	p, _ := gate.TryEnter()
	defer p.Release()
	gate.TryEnter()

	it, err := grpclimit.New(grpclimit.Config{
		MaxInFlight: 4,
		Rate:        limits.Limit{Events: 2, Period: time.Hour},
		CallerKey:   grpclimit.MetadataKey("authorization"),
	})
	if err != nil {
		t.Fatal(err)
	}
	register("rpc", it)
	callThrough(t, it, 5)

	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	defer c.Close()
	rg, err := redislimit.New(c, 2, time.Hour, redislimit.WithPrefix("limitsotel:test:"))
	if err != nil {
		t.Fatal(err)
	}
	register("fleet", rg)
	for range 3 {
		rg.Allow(context.Background(), "k")
	}
	srv.Kill()
	rg.Allow(context.Background(), "k")

	// What each reports, as "name{attr=value,...}" -> value and kind.
	type point struct {
		v       float64
		counter bool
	}
	fromProm := map[string]point{}
	fams, err := promReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
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
				fromProm[key] = point{s.GetCounter().GetValue(), true}
			} else {
				fromProm[key] = point{s.GetGauge().GetValue(), false}
			}
		}
	}
	fromOTel := map[string]point{}
	for _, m := range collect(t, reader) {
		add := func(dps []metricdata.DataPoint[int64], counter bool) {
			for _, dp := range dps {
				var kv []string
				for _, a := range dp.Attributes.ToSlice() {
					kv = append(kv, string(a.Key)+"="+a.Value.AsString())
				}
				slices.Sort(kv)
				fromOTel[m.Name+"{"+strings.Join(kv, ",")+"}"] = point{float64(dp.Value), counter}
			}
		}
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			if !d.IsMonotonic || d.Temporality != metricdata.CumulativeTemporality {
				t.Errorf("%s: a sum that is not a monotonic cumulative counter", m.Name)
			}
			add(d.DataPoints, true)
		case metricdata.Gauge[int64]:
			add(d.DataPoints, false)
		case metricdata.Sum[float64]:
			for _, dp := range d.DataPoints {
				var kv []string
				for _, a := range dp.Attributes.ToSlice() {
					kv = append(kv, string(a.Key)+"="+a.Value.AsString())
				}
				slices.Sort(kv)
				fromOTel[m.Name+"{"+strings.Join(kv, ",")+"}"] = point{dp.Value, true}
			}
		default:
			t.Errorf("%s: data of type %T", m.Name, m.Data)
		}
	}
	// The middleware's 11 outcomes, 6 outcomes and 2 table sizes for each
	// of its 3 policies and 20 of its gate (11, and 3 by priority for 3
	// priorities); the same of the Interceptor; 3 of the GCRA; 20 of the
	// gate; 4 calls, 5 kinds of failure and the fallbacks of the Redis
	// GCRA.
	if want := 2*(11+3*(6+2)+20) + 3 + 20 + 4 + 5 + 1; len(fromProm) != want {
		t.Fatalf("%d Prometheus series, want %d", len(fromProm), want)
	}
	for k, p := range fromProm {
		if o, ok := fromOTel[k]; !ok || o != p {
			t.Errorf("%s: Prometheus %+v, OpenTelemetry %+v (found: %v)", k, p, o, ok)
		}
	}
	for k := range fromOTel {
		if _, ok := fromProm[k]; !ok {
			t.Errorf("%s: in OpenTelemetry only", k)
		}
	}
	for _, k := range []string{
		`limits.http.requests{layer=rate,name=api,outcome=rate_limited}`,
		`limits.gcra.table_full{name=tokens}`,
		`limits.gate.shed{name=jobs}`,
		`limits.redis.failures{kind=connection,name=fleet}`,
		`limits.http.policy_keys{name=api,policy=default}`,
		`limits.grpc.requests{layer=all,name=rpc,outcome=allowed}`,
		`limits.grpc.requests{layer=rate,name=rpc,outcome=rate_limited}`,
		`limits.grpc.policy_keys{name=rpc,policy=address}`,
		`limits.grpc.policy_max_keys{name=rpc,policy=address}`,
	} {
		if fromOTel[k].v == 0 {
			t.Errorf("%s: 0; the traffic should have moved it", k)
		}
	}
}

func errOf(_ metric.Registration, err error) error { return err }

// echoDesc describes test.Echo, a one-method service written without
// generated code, whose Say answers its argument.
var echoDesc = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Say",
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(_ context.Context, req any) (any, error) { return req, nil }
			if ic == nil {
				return h(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/test.Echo/Say"}, h)
		},
	}},
}

// callThrough serves test.Echo behind it on an in-memory network, and
// calls it n times, with a caller key on every other call.
func callThrough(t *testing.T, it *grpclimit.Interceptor, n int) {
	t.Helper()
	lis := bufconn.Listen(1 << 16)
	srv := grpc.NewServer(it.ServerOptions()...)
	srv.RegisterService(&echoDesc, struct{}{})
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i := range n {
		ctx := context.Background()
		if i%2 == 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer alice")
		}
		var out wrapperspb.StringValue
		conn.Invoke(ctx, "/test.Echo/Say", wrapperspb.String("hi"), &out)
	}
}

// TestRegisterErrors checks what Register, and that of each subpackage,
// refuses.
func TestRegisterErrors(t *testing.T) {
	meter, _ := newMeter()
	it, err := grpclimit.New(grpclimit.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	rg, err := redislimit.New(c, 1, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", "\xff"} {
		for pkg, err := range map[string]error{
			"limitsotel":     errOf(limitsotel.Register(meter, name, limits.NewGCRA(1, time.Second))),
			"grpclimitotel":  errOf(grpclimitotel.Register(meter, name, it)),
			"redislimitotel": errOf(redislimitotel.Register(meter, name, rg)),
		} {
			if err == nil || !strings.HasPrefix(err.Error(), pkg+": ") {
				t.Errorf("%s, name %q: error %v, want one of %s", pkg, name, err, pkg)
			}
		}
	}
	for pkg, register := range map[string]func(){
		"limitsotel":     func() { limitsotel.Register(meter, "x", (*limits.GCRA)(nil)) },
		"grpclimitotel":  func() { grpclimitotel.Register(meter, "x", nil) },
		"redislimitotel": func() { redislimitotel.Register(meter, "x", nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: nil component: no panic", pkg)
				}
			}()
			register()
		}()
	}
}
