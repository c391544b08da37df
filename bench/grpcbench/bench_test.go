package grpcbench

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/grpclimit"
)

// perClient is the usual way to give go-grpc-middleware's ratelimit
// interceptor a limit per client: an x/time/rate limiter per peer host,
// made on first sight.
type perClient struct {
	limiters sync.Map // host -> *rate.Limiter
	limit    rate.Limit
	burst    int
}

// Limit refuses the call of ctx if its client's limiter has no token.
func (p *perClient) Limit(ctx context.Context) error {
	host := ""
	if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
		host, _, _ = net.SplitHostPort(pr.Addr.String())
	}
	l, ok := p.limiters.Load(host)
	if !ok {
		l, _ = p.limiters.LoadOrStore(host, rate.NewLimiter(p.limit, p.burst))
	}
	if !l.(*rate.Limiter).Allow() {
		return status.Error(codes.ResourceExhausted, "rate limited")
	}
	return nil
}

// high is a limit no benchmark reaches.
const high = 1 << 30

// interceptors are the contenders: none, grpclimit with its rate layer
// alone and with every layer of a unary call, and go-grpc-middleware's
// ratelimit with x/time/rate per client.
func interceptors(b *testing.B) []struct {
	name string
	ic   grpc.UnaryServerInterceptor
} {
	rateOnly, err := grpclimit.New(grpclimit.Config{Limits: admit.Config{Rate: limits.Limit{Events: high, Period: time.Second}}})
	if err != nil {
		b.Fatal(err)
	}
	all, err := grpclimit.New(grpclimit.Config{Limits: admit.Config{
		MaxInFlight:          high,
		Rate:                 limits.Limit{Events: high, Period: time.Second},
		MaxInFlightPerClient: high,
	}})
	if err != nil {
		b.Fatal(err)
	}
	return []struct {
		name string
		ic   grpc.UnaryServerInterceptor
	}{
		{"baseline", nil},
		{"grpclimit", rateOnly.Unary},
		{"grpclimit-all", all.Unary}, // with the gate and the per-client cap too
		{"middleware", ratelimit.UnaryServerInterceptor(&perClient{limit: high, burst: high})},
	}
}

// peers returns the contexts of calls from n client addresses.
func peers(n int) []context.Context {
	ctxs := make([]context.Context, n)
	for i := range ctxs {
		addr := &net.TCPAddr{IP: net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)), Port: 40000 + i%1000}
		ctxs[i] = peer.NewContext(context.Background(), &peer.Peer{Addr: addr})
	}
	return ctxs
}

var info = &grpc.UnaryServerInfo{FullMethod: "/bench.Echo/Say"}

func handler(ctx context.Context, req any) (any, error) { return req, nil }

// call calls handler through ic, or directly if ic is nil.
func call(ic grpc.UnaryServerInterceptor, ctx context.Context) {
	if ic == nil {
		handler(ctx, nil)
		return
	}
	ic(ctx, nil, info, handler)
}

// BenchmarkDirect measures each interceptor alone, for 1,024 clients.
func BenchmarkDirect(b *testing.B) {
	ctxs := peers(1024)
	for _, c := range interceptors(b) {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				call(c.ic, ctxs[i&1023])
				i++
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					call(c.ic, ctxs[i&1023])
					i++
				}
			})
		})
	}
}

// echoDesc is a one-method service, bench.Echo/Say, written without
// generated code.
var echoDesc = grpc.ServiceDesc{
	ServiceName: "bench.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Say",
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			if ic == nil {
				return handler(ctx, in)
			}
			return ic(ctx, in, info, handler)
		},
	}},
}

// tcpListener is an in-memory listener whose connections come from a
// loopback TCP address, so that the interceptors find the peer they would
// on a real network.
type tcpListener struct{ *bufconn.Listener }

func (l tcpListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return tcpConn{c}, nil
}

type tcpConn struct{ net.Conn }

func (tcpConn) RemoteAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000} }

// BenchmarkBufconn measures whole unary calls to a grpc.Server over an
// in-memory connection, with each interceptor installed.
func BenchmarkBufconn(b *testing.B) {
	for _, c := range interceptors(b) {
		var opts []grpc.ServerOption
		if c.ic != nil {
			opts = append(opts, grpc.UnaryInterceptor(c.ic))
		}
		srv := grpc.NewServer(opts...)
		srv.RegisterService(&echoDesc, struct{}{})
		lis := tcpListener{bufconn.Listen(1 << 20)}
		go srv.Serve(lis)
		conn, err := grpc.NewClient("passthrough:///bench",
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
		if err != nil {
			b.Fatal(err)
		}
		in := wrapperspb.String("hello")
		say := func(b *testing.B) {
			var out wrapperspb.StringValue
			if err := conn.Invoke(context.Background(), "/bench.Echo/Say", in, &out); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				say(b)
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					say(b)
				}
			})
		})
		conn.Close()
		srv.Stop()
	}
}
