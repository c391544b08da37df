package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/grpclimit"
	"github.com/limitsgo/limits/pace"
)

// pacedService is test.Paced, written without generated code: Call, a
// unary method, and Watch, a server-streaming one, each running its
// function if set and recording when calls arrive.
type pacedService struct {
	mu       sync.Mutex
	arrivals []time.Time
	call     func(ctx context.Context, n int) error
	watch    func(n int) error
}

// arrive records an arrival and returns how many came before it.
func (s *pacedService) arrive() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.arrivals = append(s.arrivals, time.Now())
	return len(s.arrivals) - 1
}

func (s *pacedService) seen() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.arrivals...)
}

var pacedDesc = grpc.ServiceDesc{
	ServiceName: "test.Paced",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Call",
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				s := srv.(*pacedService)
				n := s.arrive()
				if s.call != nil {
					if err := s.call(ctx, n); err != nil {
						return nil, err
					}
				}
				return wrapperspb.String("ok"), nil
			}
			if ic == nil {
				return h(ctx, in)
			}
			return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/test.Paced/Call"}, h)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Watch",
		ServerStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error {
			if err := ss.RecvMsg(new(wrapperspb.StringValue)); err != nil {
				return err
			}
			s := srv.(*pacedService)
			n := s.arrive()
			if s.watch != nil {
				if err := s.watch(n); err != nil {
					return err
				}
			}
			return ss.SendMsg(wrapperspb.String("ok"))
		},
	}},
}

// startPaced serves svc over loopback TCP with the server options sopts,
// and returns a connection to it with the dial options dopts.
func startPaced(t *testing.T, svc *pacedService, sopts []grpc.ServerOption, dopts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(sopts...)
	srv.RegisterService(&pacedDesc, svc)
	go srv.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(),
		append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dopts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		srv.Stop()
	})
	return conn
}

func callPaced(ctx context.Context, conn *grpc.ClientConn) error {
	return conn.Invoke(ctx, "/test.Paced/Call", wrapperspb.String("x"), new(wrapperspb.StringValue))
}

// watchPaced opens a Watch stream and reads it to its end.
func watchPaced(ctx context.Context, conn *grpc.ClientConn) error {
	s, err := conn.NewStream(ctx, &pacedDesc.Streams[0], "/test.Paced/Watch")
	if err != nil {
		return err
	}
	if err := s.SendMsg(wrapperspb.String("x")); err != nil {
		return err
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	for {
		if err := s.RecvMsg(new(wrapperspb.StringValue)); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// clientRefusal is a status error with code and a RetryInfo of delay.
func clientRefusal(code codes.Code, delay time.Duration) error {
	st, err := status.New(code, "refused").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(delay)})
	if err != nil {
		panic(err)
	}
	return st.Err()
}

// TestClientInterceptorStaysUnderGrpclimit calls a server protected by
// grpclimit at 100 calls a second (burst 20) from 20 goroutines at once
// over loopback: with the interceptor's pace, it refuses none, while a
// bare client under the same load gets many refusals.
func TestClientInterceptorStaysUnderGrpclimit(t *testing.T) {
	serve := func(dopts ...grpc.DialOption) *grpc.ClientConn {
		it, err := grpclimit.New(grpclimit.Config{Limits: admit.Config{Rate: limits.Limit{Events: 100, Period: time.Second}, Burst: 20}})
		if err != nil {
			t.Fatal(err)
		}
		return startPaced(t, &pacedService{}, it.ServerOptions(), dopts...)
	}
	run := func(conn *grpc.ClientConn) (refused int64) {
		var n atomic.Int64
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				for range 5 {
					err := callPaced(context.Background(), conn)
					switch status.Code(err) {
					case codes.OK:
					case codes.ResourceExhausted:
						n.Add(1)
					default:
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		return n.Load()
	}
	if n := run(serve()); n == 0 {
		t.Fatal("a bare client got no refusal: the load does not test the limit")
	}
	ci := &grpclimit.ClientInterceptor{Pace: pace.Config{Rate: limits.Limit{Events: 100, Period: time.Second}, MaxRetries: -1}}
	if n := run(serve(ci.DialOptions()...)); n != 0 {
		t.Errorf("%d calls refused through the interceptor, want none", n)
	}
	if s := ci.Stats(); s.Sent != 100 || s.Waited == 0 {
		t.Errorf("Stats = %+v, want 100 sent, some waiting", s)
	}
}

// TestClientInterceptorRetriesAfterTheDelay: a refusal with a RetryInfo
// or a pushback trailer is retried no sooner than the delay it gives; a
// negative pushback, or none at all, is not retried.
func TestClientInterceptorRetriesAfterTheDelay(t *testing.T) {
	for _, tc := range []struct {
		name  string
		err   func(ctx context.Context) error
		sent  int
		delay time.Duration // between the arrivals, at least
	}{
		{"RetryInfo", func(context.Context) error { return clientRefusal(codes.ResourceExhausted, time.Second) }, 2, time.Second},
		{"pushback", func(ctx context.Context) error {
			grpc.SetTrailer(ctx, metadata.Pairs(grpclimit.PushbackTrailer, "1200"))
			return status.Error(codes.Unavailable, "busy")
		}, 2, 1200 * time.Millisecond},
		{"negative pushback", func(ctx context.Context) error {
			grpc.SetTrailer(ctx, metadata.Pairs(grpclimit.PushbackTrailer, "-1"))
			return clientRefusal(codes.ResourceExhausted, 0)
		}, 1, 0},
		{"no delay given", func(context.Context) error { return status.Error(codes.Unavailable, "busy") }, 1, 0},
		{"not a refusal", func(context.Context) error { return clientRefusal(codes.Aborted, 0) }, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := &pacedService{call: func(ctx context.Context, n int) error {
				if n == 0 {
					return tc.err(ctx)
				}
				return nil
			}}
			ci := &grpclimit.ClientInterceptor{}
			conn := startPaced(t, svc, nil, ci.DialOptions()...)
			err := callPaced(context.Background(), conn)
			a := svc.seen()
			if len(a) != tc.sent || (tc.sent == 2) != (err == nil) {
				t.Fatalf("%d sent, err %v; want %d", len(a), err, tc.sent)
			}
			// The retry left after the refusal came back, which was after
			// the server made it: the server's clock sees at least the delay.
			if len(a) == 2 && a[1].Sub(a[0]) < tc.delay {
				t.Errorf("retried %v after the refusal, want at least %v", a[1].Sub(a[0]), tc.delay)
			}
		})
	}
}

// TestClientInterceptorDeadline: a call whose context ends before its
// key's pause, or its turn at the pace, fails at once, unsent, with
// DeadlineExceeded; a refusal whose retry would come after the deadline
// is returned as it came.
func TestClientInterceptorDeadline(t *testing.T) {
	svc := &pacedService{call: func(ctx context.Context, n int) error {
		if n == 0 {
			return clientRefusal(codes.ResourceExhausted, time.Hour)
		}
		return nil
	}}
	ci := &grpclimit.ClientInterceptor{}
	conn := startPaced(t, svc, nil, ci.DialOptions()...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := callPaced(ctx, conn); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("err = %v, want the refusal itself", err)
	}
	err := callPaced(ctx, conn)
	if status.Code(err) != codes.DeadlineExceeded || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "pause") {
		t.Fatalf("err = %v, want DeadlineExceeded naming the pause", err)
	}
	if n := len(svc.seen()); n != 1 {
		t.Errorf("%d calls sent, want 1", n)
	}

	// The pace: one call an hour.
	paced := &grpclimit.ClientInterceptor{Pace: pace.Config{Rate: limits.Limit{Events: 1, Period: time.Hour}}}
	conn = startPaced(t, &pacedService{}, nil, paced.DialOptions()...)
	if err := callPaced(ctx, conn); err != nil {
		t.Fatal(err)
	}
	err = callPaced(ctx, conn)
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "pace") {
		t.Fatalf("err = %v, want DeadlineExceeded naming the pace", err)
	}
	if s := paced.Stats(); s.DeadlineExceeded != 1 || s.Sent != 1 {
		t.Errorf("Stats = %+v", s)
	}
}

// TestClientInterceptorLeavesRetriesToServiceConfig: on a ClientConn
// whose service config gives the method a retry policy, gRPC retries and
// the interceptor does not, so a call is not retried twice over.
func TestClientInterceptorLeavesRetriesToServiceConfig(t *testing.T) {
	const config = `{"methodConfig": [{
		"name": [{"service": "test.Paced"}],
		"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.01s",
			"backoffMultiplier": 1, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}
	}]}`
	for _, tc := range []struct {
		name   string
		config bool
		sent   int
	}{
		{"interceptor's retries", false, 2}, // 1 + MaxRetries
		{"gRPC's retries", true, 3},         // maxAttempts, not 3 x 2
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := &pacedService{call: func(ctx context.Context, n int) error {
				grpc.SetTrailer(ctx, metadata.Pairs(grpclimit.PushbackTrailer, "0"))
				return clientRefusal(codes.ResourceExhausted, 0)
			}}
			ci := &grpclimit.ClientInterceptor{Pace: pace.Config{MaxRetries: 1}}
			dopts := ci.DialOptions()
			if tc.config {
				dopts = append(dopts, grpc.WithDefaultServiceConfig(config))
			}
			conn := startPaced(t, svc, nil, dopts...)
			if err := callPaced(context.Background(), conn); status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("err = %v, want ResourceExhausted", err)
			}
			if n := len(svc.seen()); n != tc.sent {
				t.Errorf("%d attempts, want %d", n, tc.sent)
			}
		})
	}
}

// TestClientInterceptorThrottles: against a server that refuses every
// call without a delay, client-side throttling refuses most calls
// locally, with the reason client_throttled.
func TestClientInterceptorThrottles(t *testing.T) {
	svc := &pacedService{call: func(context.Context, int) error { return status.Error(codes.Unavailable, "down") }}
	ci := &grpclimit.ClientInterceptor{Pace: pace.Config{Throttle: 2}}
	conn := startPaced(t, svc, nil, ci.DialOptions()...)
	local := 0
	for range 200 {
		err := callPaced(context.Background(), conn)
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("err = %v, want Unavailable", err)
		}
		if errors.Is(err, pace.ErrThrottled) && status.Code(err) == codes.Unavailable {
			local++
		}
	}
	// Each call reaches the server with probability 1/(n+1) after n
	// refusals: about 6 do; 50 would take odds below 1e-15.
	if n := len(svc.seen()); n > 50 || n+local != 200 {
		t.Errorf("%d sent and %d refused locally of 200", n, local)
	}
	if s := ci.Stats(); s.Throttled != uint64(local) {
		t.Errorf("Throttled = %d, want %d", s.Throttled, local)
	}
}

// TestClientInterceptorStreams: streams open at the key's pace, and a
// stream refused with a RetryInfo pauses its key for the calls after it.
func TestClientInterceptorStreams(t *testing.T) {
	svc := &pacedService{watch: func(n int) error {
		if n == 1 {
			return clientRefusal(codes.ResourceExhausted, time.Hour)
		}
		return nil
	}}
	ci := &grpclimit.ClientInterceptor{}
	conn := startPaced(t, svc, nil, ci.DialOptions()...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := watchPaced(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if err := watchPaced(ctx, conn); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("err = %v, want the refusal", err)
	}
	if err := callPaced(ctx, conn); status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "pause") {
		t.Fatalf("a call after the stream's refusal: %v, want DeadlineExceeded naming the pause", err)
	}

	paced := &grpclimit.ClientInterceptor{Pace: pace.Config{Rate: limits.Limit{Events: 1, Period: time.Hour}}}
	conn = startPaced(t, &pacedService{}, nil, paced.DialOptions()...)
	if err := watchPaced(ctx, conn); err != nil {
		t.Fatal(err)
	}
	if err := watchPaced(ctx, conn); status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "pace") {
		t.Fatalf("a second stream: %v, want DeadlineExceeded naming the pace", err)
	}
}

// TestClientInterceptorTableFull: a call for a new key when every key is
// held fails at once with ResourceExhausted.
func TestClientInterceptorTableFull(t *testing.T) {
	ci := &grpclimit.ClientInterceptor{
		Key: func(ctx context.Context, _ string) string {
			md, _ := metadata.FromOutgoingContext(ctx)
			return strings.Join(md.Get("user"), ",")
		},
		Pace: pace.Config{Rate: limits.Limit{Events: 1, Period: time.Hour}, MaxKeys: 1},
	}
	svc := &pacedService{}
	conn := startPaced(t, svc, nil, ci.DialOptions()...)
	if err := callPaced(metadata.AppendToOutgoingContext(context.Background(), "user", "a"), conn); err != nil {
		t.Fatal(err)
	}
	err := callPaced(metadata.AppendToOutgoingContext(context.Background(), "user", "b"), conn)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "table full") {
		t.Fatalf("err = %v, want ResourceExhausted, table full", err)
	}
	if n := len(svc.seen()); n != 1 {
		t.Errorf("%d calls sent, want 1", n)
	}
}

func TestClientInterceptorRejectsBadConfig(t *testing.T) {
	ci := &grpclimit.ClientInterceptor{Pace: pace.Config{MaxKeys: -1}}
	conn := startPaced(t, &pacedService{}, nil, ci.DialOptions()...)
	if err := callPaced(context.Background(), conn); status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "MaxKeys") {
		t.Errorf("err = %v, want Internal naming MaxKeys", err)
	}
}

// TestClientInterceptorPushbackOutOfRange: a pushback too large for any
// integer pauses the key as the longest pause does, as a RetryInfo of
// the same delay would; it is not ignored.
func TestClientInterceptorPushbackOutOfRange(t *testing.T) {
	svc := &pacedService{call: func(ctx context.Context, n int) error {
		grpc.SetTrailer(ctx, metadata.Pairs(grpclimit.PushbackTrailer, "99999999999999999999"))
		return status.Error(codes.Unavailable, "busy")
	}}
	ci := &grpclimit.ClientInterceptor{}
	conn := startPaced(t, svc, nil, ci.DialOptions()...)
	if err := callPaced(context.Background(), conn); status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v, want the refusal", err)
	}
	if s := ci.Stats(); s.Paused != 1 || s.Sent != 1 {
		t.Errorf("Stats = %+v, want the key paused, the call not retried", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := callPaced(ctx, conn); status.Code(err) != codes.DeadlineExceeded || len(svc.seen()) != 1 {
		t.Errorf("a call during the pause: %v, %d sent; want DeadlineExceeded, unsent", err, len(svc.seen()))
	}
}
