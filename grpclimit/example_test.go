package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/grpclimit"
)

// greeter is a one-method service, demo.Greeter/Hello, written without
// generated code.
var greeter = grpc.ServiceDesc{
	ServiceName: "demo.Greeter",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Hello",
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return wrapperspb.String("hello, " + req.(*wrapperspb.StringValue).GetValue()), nil
			}
			if ic == nil {
				return h(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/demo.Greeter/Hello"}, h)
		},
	}},
}

// serve starts a server with the options given, the greeter, the health
// service and the services of extra, on an in-memory network, and returns
// a client connection to it and a function that stops both.
func serve(opts []grpc.ServerOption, extra ...*grpc.ServiceDesc) (*grpc.ClientConn, func()) {
	lis := bufconn.Listen(1 << 16)
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&greeter, struct{}{})
	for _, d := range extra {
		srv.RegisterService(d, struct{}{})
	}
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///demo",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		panic(err)
	}
	return conn, func() { conn.Close(); srv.Stop() }
}

// hello calls demo.Greeter/Hello with metadata pairs and prints the
// answer, or the refusal: its code, reason and retry delay.
func hello(conn *grpc.ClientConn, md ...string) {
	ctx := metadata.AppendToOutgoingContext(context.Background(), md...)
	var out wrapperspb.StringValue
	err := conn.Invoke(ctx, "/demo.Greeter/Hello", wrapperspb.String("gopher"), &out)
	if err == nil {
		fmt.Println(out.GetValue())
		return
	}
	st := status.Convert(err)
	retry := "none"
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri.GetRetryDelay().AsDuration().Round(time.Second).String()
		}
	}
	fmt.Println(st.Code(), grpclimit.ReasonOf(err), "retry", retry)
}

func Example() {
	l, err := grpclimit.New(grpclimit.Config{Limits: admit.Config{
		MaxInFlight: 512,                                          // Unavailable server_busy beyond
		Rate:        limits.Limit{Events: 2, Period: time.Minute}, // ResourceExhausted rate_limited, per client address
	}})
	if err != nil {
		panic(err)
	}
	conn, stop := serve(l.ServerOptions())
	defer stop()
	for range 3 {
		hello(conn)
	}
	// The health service is exempt by default.
	resp, _ := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	fmt.Println("health:", resp.GetStatus())
	s := l.Stats()
	fmt.Println("allowed", s.Requests[admit.Allowed], "rate limited", s.Requests[limits.ReasonRateLimited], "exempt", s.Requests[admit.Exempt])
	// Output:
	// hello, gopher
	// hello, gopher
	// ResourceExhausted rate_limited retry 30s
	// health: SERVING
	// allowed 2 rate limited 1 exempt 1
}

// A caller key, here the authorization metadata, gives each token its
// own bucket, while the client address keeps one of its own that tokens
// cannot escape: four times the rate by default.
func ExampleConfig_callerKey() {
	l, err := grpclimit.New(grpclimit.Config{Limits: admit.Config{
		Rate:      limits.Limit{Events: 1, Period: time.Hour},
		CallerKey: "authorization",
	}})
	if err != nil {
		panic(err)
	}
	conn, stop := serve(l.ServerOptions())
	defer stop()
	hello(conn, "authorization", "Bearer alice")
	hello(conn, "authorization", "Bearer alice") // alice's bucket is empty
	hello(conn, "authorization", "Bearer bob")
	for _, p := range l.Stats().Policies {
		fmt.Printf("%s: allowed %d, rate limited %d\n", p.Name, p.Requests[admit.Allowed], p.Requests[limits.ReasonRateLimited])
	}
	// Output:
	// hello, gopher
	// ResourceExhausted rate_limited retry 1h0m0s
	// hello, gopher
	// address: allowed 3, rate limited 0
	// default: allowed 2, rate limited 1
	// keyless: allowed 0, rate limited 0
}

// A stream holds its place in the gate while it is set up, until it first
// sends; a handler that is done with the costly part before that can give
// the place back at once, and wait for events for hours.
func ExampleReleaseCapacity() {
	l, err := grpclimit.New(grpclimit.Config{Limits: admit.Config{MaxInFlight: 1}})
	if err != nil {
		panic(err)
	}
	released := make(chan struct{})
	watch := grpc.ServiceDesc{
		ServiceName: "demo.Events",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName:    "Watch",
			ServerStreams: true,
			Handler: func(srv any, ss grpc.ServerStream) error {
				// ... authenticate, load the subscription: in the gate.
				grpclimit.ReleaseCapacity(ss.Context())
				close(released)
				<-ss.Context().Done() // ... send events as they come
				return nil
			},
		}},
	}
	conn, stop := serve(l.ServerOptions(), &watch)
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, err := conn.NewStream(ctx, &watch.Streams[0], "/demo.Events/Watch")
	if err != nil {
		panic(err)
	}
	cs.SendMsg(wrapperspb.String("all events"))
	<-released
	hello(conn) // the one place in the gate is free while the stream is open
	// Output:
	// hello, gopher
}

// A policy of one method, here a login limited to 2 calls a minute per
// client under a service-wide 10: the logins it refuses are given back to
// the service-wide bucket, and Stats counts them under the method's
// route. A route names a method ("/package.Service/Method") or a service
// ("/package.Service/"); New refuses anything else.
func ExampleConfig_policies() {
	cfg := grpclimit.Config{Limits: admit.Config{
		Rate: limits.Limit{Events: 10, Period: time.Minute},
		Policies: []admit.Policy{{
			Name:   "login",
			Routes: []string{"/demo.Greeter/Hello"},
			Rate:   limits.Limit{Events: 2, Period: time.Minute},
		}},
	}}
	l, err := grpclimit.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	conn, stop := serve(l.ServerOptions())
	defer stop()
	for range 3 {
		hello(conn)
	}
	for _, r := range l.Stats().Routes {
		fmt.Printf("%s: allowed %d, rate limited %d\n", r.Route, r.Requests[admit.Allowed], r.Requests[limits.ReasonRateLimited])
	}
	cfg.Limits.Policies[0].Routes = []string{"demo.Greeter/Hello"}
	_, err = grpclimit.New(cfg)
	fmt.Println(err)
	// Output:
	// hello, gopher
	// hello, gopher
	// ResourceExhausted rate_limited retry 30s
	// /demo.Greeter/Hello: allowed 2, rate limited 1
	// other: allowed 0, rate limited 0
	// grpclimit: Limits: Policies[0] ("login").Routes[0]: "demo.Greeter/Hello" is neither a method (/package.Service/Method) nor a service (/package.Service/)
}
