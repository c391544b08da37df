package grpclimit

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitsgo/limits"
)

// The test service, test.Echo, is written by hand, with wrapperspb
// messages, so that the tests need no generated code: a unary method, a
// server-streaming one, and a bidirectional one.
const (
	methodSay   = "/test.Echo/Say"
	methodWatch = "/test.Echo/Watch"
	methodChat  = "/test.Echo/Chat"
)

// echo is the test service's implementation; each method runs its
// function if set, and otherwise echoes.
type echo struct {
	say   func(ctx context.Context, in string) (string, error)
	watch func(in string, ss grpc.ServerStream) error
	chat  func(ss grpc.ServerStream) error
}

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
			h := func(ctx context.Context, req any) (any, error) {
				e := srv.(*echo)
				s := req.(*wrapperspb.StringValue).GetValue()
				if e.say != nil {
					out, err := e.say(ctx, s)
					if err != nil {
						return nil, err
					}
					s = out
				}
				return wrapperspb.String(s), nil
			}
			if ic == nil {
				return h(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: methodSay}, h)
		},
	}},
	Streams: []grpc.StreamDesc{
		{
			StreamName:    "Watch",
			ServerStreams: true,
			Handler: func(srv any, ss grpc.ServerStream) error {
				in := new(wrapperspb.StringValue)
				if err := ss.RecvMsg(in); err != nil {
					return err
				}
				if e := srv.(*echo); e.watch != nil {
					return e.watch(in.GetValue(), ss)
				}
				return ss.SendMsg(in)
			},
		},
		{
			StreamName:    "Chat",
			ServerStreams: true,
			ClientStreams: true,
			Handler: func(srv any, ss grpc.ServerStream) error {
				if e := srv.(*echo); e.chat != nil {
					return e.chat(ss)
				}
				for {
					in := new(wrapperspb.StringValue)
					if err := ss.RecvMsg(in); err != nil {
						return err
					}
					if err := ss.SendMsg(in); err != nil {
						return err
					}
				}
			},
		},
	},
}

// unaryService returns the description of a service of the unary methods
// named, each of which echoes a wrapperspb.StringValue.
func unaryService(service string, methods ...string) *grpc.ServiceDesc {
	d := &grpc.ServiceDesc{ServiceName: service, HandlerType: (*any)(nil)}
	for _, m := range methods {
		full := "/" + service + "/" + m
		d.Methods = append(d.Methods, grpc.MethodDesc{
			MethodName: m,
			Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				h := func(_ context.Context, req any) (any, error) { return req, nil }
				if ic == nil {
					return h(ctx, in)
				}
				return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: full}, h)
			},
		})
	}
	return d
}

// testServer is a grpc.Server with the test service and the standard
// health service, reached over in-memory connections, each from an
// address of the test's choosing.
type testServer struct {
	t   *testing.T
	srv *grpc.Server
	// inside counts the calls and streams inside the interceptors: when
	// it is 0, every interceptor call has returned, and so every call's
	// admission has ended, but for unary calls answered request_timeout,
	// whose handler may still run.
	inside atomic.Int64
}

// newServer starts a server with it's interceptors, behind a recovery
// interceptor that turns a handler's panic into codes.Internal, as a real
// service would have, serving e and the services of extra.
func newServer(t *testing.T, it *Interceptor, e *echo, extra ...*grpc.ServiceDesc) *testServer {
	t.Helper()
	s := &testServer{t: t}
	s.srv = grpc.NewServer(
		grpc.ChainUnaryInterceptor(s.recoverUnary, it.Unary),
		grpc.ChainStreamInterceptor(s.recoverStream, it.Stream),
	)
	s.srv.RegisterService(&echoDesc, e)
	for _, d := range extra {
		s.srv.RegisterService(d, struct{}{})
	}
	healthpb.RegisterHealthServer(s.srv, health.NewServer())
	t.Cleanup(s.srv.Stop)
	return s
}

// recoverUnary and recoverStream turn a handler's panic into an error,
// and count the calls inside.
func (s *testServer) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	s.inside.Add(1)
	defer s.inside.Add(-1)
	defer func() {
		if p := recover(); p != nil {
			err = status.Errorf(codes.Internal, "panic: %v", p)
		}
	}()
	return handler(ctx, req)
}

func (s *testServer) recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	s.inside.Add(1)
	defer s.inside.Add(-1)
	defer func() {
		if p := recover(); p != nil {
			err = status.Errorf(codes.Internal, "panic: %v", p)
		}
	}()
	return handler(srv, ss)
}

// idle reports whether no call or stream is inside the interceptors.
func (s *testServer) idle() bool { return s.inside.Load() == 0 }

// addrListener is an in-memory listener whose connections come from addr.
type addrListener struct {
	*bufconn.Listener
	addr net.Addr
}

func (l addrListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return addrConn{c, l.addr}, nil
}

// addrConn is a connection claiming to come from addr.
type addrConn struct {
	net.Conn
	addr net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.addr }

// dial returns a client connection that reaches the server as if from
// remote, an "ip:port".
func (s *testServer) dial(remote string, opts ...grpc.DialOption) *grpc.ClientConn {
	s.t.Helper()
	addr, err := net.ResolveTCPAddr("tcp", remote)
	if err != nil {
		s.t.Fatal(err)
	}
	l := addrListener{bufconn.Listen(1 << 16), addr}
	go s.srv.Serve(l)
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return l.DialContext(ctx) }),
	}, opts...)
	conn, err := grpc.NewClient("passthrough:///bufnet", opts...)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { conn.Close() })
	return conn
}

// callTimeout bounds each call a test makes, so that a hang fails the
// test instead of stalling it; it is no measure of speed.
const callTimeout = time.Minute

// say calls test.Echo/Say with in and metadata pairs, and returns the
// answer, the trailer and the error.
func say(conn *grpc.ClientConn, in string, md ...string) (string, metadata.MD, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	return sayCtx(ctx, conn, in, md...)
}

// sayCtx is say under ctx.
func sayCtx(ctx context.Context, conn *grpc.ClientConn, in string, md ...string) (string, metadata.MD, error) {
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	var out wrapperspb.StringValue
	var trailer metadata.MD
	err := conn.Invoke(ctx, methodSay, wrapperspb.String(in), &out, grpc.Trailer(&trailer))
	return out.GetValue(), trailer, err
}

// mustSay is say for calls that must succeed.
func mustSay(t *testing.T, conn *grpc.ClientConn, in string, md ...string) {
	t.Helper()
	if _, _, err := say(conn, in, md...); err != nil {
		t.Fatalf("Say(%q): %v", in, err)
	}
}

// openChat opens a test.Echo/Chat stream under ctx.
func openChat(ctx context.Context, conn *grpc.ClientConn, md ...string) (grpc.ClientStream, error) {
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	return conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, methodChat)
}

// chatOnce sends in on cs and returns the message that comes back. A
// stream the server has ended (refused, say) fails SendMsg with io.EOF:
// its status is then RecvMsg's error, returned instead.
func chatOnce(cs grpc.ClientStream, in string) (string, error) {
	if err := cs.SendMsg(wrapperspb.String(in)); err != nil {
		if err == io.EOF {
			err = cs.RecvMsg(new(wrapperspb.StringValue))
		}
		return "", err
	}
	var out wrapperspb.StringValue
	err := cs.RecvMsg(&out)
	return out.GetValue(), err
}

// refusalOf describes a refusal as the client sees it.
type refusalOf struct {
	code     codes.Code
	reason   limits.Reason
	retry    time.Duration // RetryInfo's delay, or -1 without one
	policy   string        // ErrorInfo's policy
	quota    bool          // a QuotaFailure detail
	pushback string        // the trailer, or ""
}

func (r refusalOf) String() string {
	return fmt.Sprintf("%v %v retry=%v policy=%q quota=%v pushback=%q", r.code, r.reason, r.retry, r.policy, r.quota, r.pushback)
}

// describe reads a call's error and trailer.
func describe(err error, trailer metadata.MD) refusalOf {
	st := status.Convert(err)
	r := refusalOf{code: st.Code(), reason: ReasonOf(err), retry: -1}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			r.retry = d.GetRetryDelay().AsDuration()
		case *errdetails.ErrorInfo:
			r.policy = d.GetMetadata()["policy"]
		case *errdetails.QuotaFailure:
			r.quota = len(d.GetViolations()) == 1
		}
	}
	if v := trailer.Get(PushbackTrailer); len(v) == 1 {
		r.pushback = v[0]
	}
	return r
}

// pushbackOf returns the pushback trailer a delay gives.
func pushbackOf(d time.Duration) string { return strconv.FormatInt(millis(d), 10) }

// mustNew is New for configurations that must be valid.
func mustNew(t testing.TB, cfg Config) *Interceptor {
	t.Helper()
	it, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return it
}

// named returns the Limiters of a Config holding l alone, named "l".
func named(l limits.Limiter) map[string]limits.Limiter {
	return map[string]limits.Limiter{"l": l}
}

// inFlight returns the places taken in it's gate.
func inFlight(it *Interceptor) int { return it.Engine().Gate().InFlight() }

// fixed is a limiter that answers every call with the same decision, or
// error.
type fixed struct {
	d   limits.Decision
	err error
}

func (f fixed) Take(context.Context, string, int) (limits.Decision, error) { return f.d, f.err }

func (fixed) Refund(context.Context, string, limits.Decision) error { return nil }

// recorder is a limiter that allows everything and records the keys it is
// asked about.
type recorder struct {
	mu   sync.Mutex
	keys []string
}

func (r *recorder) Take(_ context.Context, key string, n int) (limits.Decision, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, key)
	return limits.Decision{Allowed: true, Cost: n, Limit: 1 << 30, Period: time.Second, Burst: 1 << 30, At: time.Now()}, nil
}

func (*recorder) Refund(context.Context, string, limits.Decision) error { return nil }

func (r *recorder) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.keys) == 0 {
		return ""
	}
	return r.keys[len(r.keys)-1]
}

// stuck is a limiter that never answers until released, ignoring its
// context.
type stuck struct{ release chan struct{} }

func (s stuck) Take(context.Context, string, int) (limits.Decision, error) {
	<-s.release
	return limits.Decision{Allowed: true}, nil
}

func (stuck) Refund(context.Context, string, limits.Decision) error { return nil }

// waitFor polls cond until it holds: for state that another goroutine
// changes after the client has its answer, such as a stream's place given
// back after its handler returned. It fails the test only shortly before
// the test binary's own deadline, so that a slow machine is never taken
// for a bug.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if end, ok := d.Deadline(); ok {
			deadline = end.Add(-time.Until(end) / 10)
		}
	}
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s when the test's time ran out", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// peers returns n contexts of calls from n client addresses, as the
// server hands them to interceptors.
func peers(n int) []context.Context {
	ctxs := make([]context.Context, n)
	for i := range ctxs {
		addr := &net.TCPAddr{IP: net.IPv4(10, byte(i>>16), byte(i>>8), byte(i)), Port: 40000}
		ctxs[i] = peer.NewContext(context.Background(), &peer.Peer{Addr: addr})
	}
	return ctxs
}

var benchInfo = &grpc.UnaryServerInfo{FullMethod: methodSay}

func noop(ctx context.Context, req any) (any, error) { return req, nil }

// sendStream is a server stream that accepts what is sent.
type sendStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *sendStream) Context() context.Context     { return s.ctx }
func (s *sendStream) SendMsg(any) error            { return nil }
func (s *sendStream) SetTrailer(metadata.MD)       {}
func (s *sendStream) SendHeader(metadata.MD) error { return nil }
