package grpclimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
)

// TestPanicsGiveBack has handlers panic, unary (with and without a
// deadline) and stream, and checks that each gives back its place in the
// gate and its per-client counts, and that the panic reaches the
// interceptor in front (here one that recovers).
func TestPanicsGiveBack(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Minute} {
		t.Run(fmt.Sprint("Timeout=", timeout), func(t *testing.T) {
			it := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 1, MaxInFlightPerClient: 1, MaxStreamsPerClient: 1, Timeout: timeout}})
			srv := newServer(t, it, &echo{
				say: func(ctx context.Context, in string) (string, error) {
					if in == "panic" {
						panic("handler bug")
					}
					return in, nil
				},
				chat: func(ss grpc.ServerStream) error {
					for {
						in := new(wrapperspb.StringValue)
						if err := ss.RecvMsg(in); err != nil {
							return err
						}
						if in.GetValue() == "panic" {
							panic("stream handler bug")
						}
						if err := ss.SendMsg(in); err != nil {
							return err
						}
					}
				},
			})
			conn := srv.dial("192.0.2.1:1")
			// With one place in the gate and one call per client, each
			// call after a panic finds both given back, or is refused.
			for range 3 {
				if _, _, err := say(conn, "panic"); status.Code(err) != codes.Internal {
					t.Fatalf("a panicking handler: %v, want the recovering interceptor's Internal", err)
				}
				mustSay(t, conn, "after a panic")
			}
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			for range 3 {
				cs, err := openChat(ctx, conn)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := chatOnce(cs, "panic"); status.Code(err) != codes.Internal {
					t.Fatalf("a panicking stream handler: %v", err)
				}
			}
			waitFor(t, "every call out of the interceptors", srv.idle)
			if n := inFlight(it); n != 0 {
				t.Errorf("%d places taken in the gate after panics", n)
			}
			mustSay(t, conn, "after the stream panics")
			cs, err := openChat(ctx, conn)
			if err == nil {
				_, err = chatOnce(cs, "after the stream panics")
			}
			if err != nil {
				t.Errorf("a stream after the stream panics: %v", err)
			}
			if s := it.Stats(); s.Requests[admit.ServerBusy]+s.Requests[admit.ConcurrencyLimited] != 0 {
				t.Errorf("calls refused after panics: %+v", s.Requests)
			}
		})
	}
}

// TestTimeout checks that a unary call past Timeout is refused with
// request_timeout without waiting for its handler, that it keeps its
// place in the gate and its per-client count until its handler returns,
// and that a client's own shorter deadline is not counted as the server's
// timeout.
func TestTimeout(t *testing.T) {
	// The deadline is long enough for a quick call on a loaded machine;
	// the calls that reach it wait for it.
	const timeout = 500 * time.Millisecond
	release := make(chan struct{})
	returned := make(chan struct{}, 1)
	var entered, politeEntered atomic.Int64
	it := mustNew(t, Config{Limits: admit.Config{Timeout: timeout, MaxInFlight: 2, MaxInFlightPerClient: 1}})
	srv := newServer(t, it, &echo{say: func(ctx context.Context, in string) (string, error) {
		entered.Add(1)
		switch in {
		case "stubborn": // ignores its context
			<-release
			returned <- struct{}{}
		case "polite":
			politeEntered.Add(1)
			<-ctx.Done()
			return "", ctx.Err()
		}
		return in, nil
	}})
	conn := srv.dial("192.0.2.1:1")
	_, trailer, err := say(conn, "stubborn")
	if got, want := describe(err, trailer), (refusalOf{codes.DeadlineExceeded, admit.RequestTimeout, -1, "", false, ""}); got != want {
		t.Errorf("past the deadline: %v, want %v", got, want)
	}
	// The refusal came while the handler is still blocked: the deadline,
	// not the handler, bounded the call. The call still holds its place
	// in the gate and its client's count.
	if n := inFlight(it); n != 1 {
		t.Errorf("while the handler still runs: %d places taken in the gate, want 1", n)
	}
	if _, _, err := say(conn, "x"); ReasonOf(err) != admit.ConcurrencyLimited {
		t.Errorf("a second call of the client while the handler still runs: %v, want concurrency_limited", err)
	}
	close(release)
	<-returned
	// A call past the deadline gives its places back when its handler
	// returns, after the client had its answer: until then, the client's
	// next call may find its count still taken.
	probes := 0
	quick := func() {
		t.Helper()
		waitFor(t, "the client's count given back", func() bool {
			_, _, err := say(conn, "quick")
			if ReasonOf(err) == admit.ConcurrencyLimited {
				probes++
				return false
			}
			if err != nil {
				t.Fatalf("a quick call: %v", err)
			}
			return true
		})
	}
	quick()
	if n := inFlight(it); n != 0 {
		t.Errorf("%d places taken in the gate after every handler returned", n)
	}

	if _, _, err := say(conn, "polite"); ReasonOf(err) != admit.RequestTimeout {
		t.Errorf("a handler that heeds its context: %v", err)
	}
	quick()

	// The client's own deadline, shorter than the server's: the client
	// gets DeadlineExceeded, and the server counts no request_timeout.
	before := politeEntered.Load()
	ctx, cancel := context.WithTimeout(context.Background(), timeout/5)
	defer cancel()
	if _, _, err := sayCtx(ctx, conn, "polite"); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("the client's own deadline: %v", err)
	}
	if politeEntered.Load() == before {
		t.Log("the call with the client's own deadline did not reach its handler in time")
	}
	// The call the client gave up on ends when its handler returns, after
	// the interceptor answered.
	waitFor(t, "the place given back", func() bool { return inFlight(it) == 0 })
	s := it.Stats()
	if s.Requests[admit.RequestTimeout] != 2 || s.Requests[admit.Allowed] != uint64(entered.Load()) ||
		s.Requests[admit.ConcurrencyLimited] != uint64(1+probes) {
		t.Errorf("Stats %v: want 2 timeouts (the client's own not counted), %d allowed (each handler run), %d concurrency_limited",
			s.Requests, entered.Load(), 1+probes)
	}
}

// TestClientCancelGivesBack has clients cancel unary calls while their
// handlers run, with and without a deadline, and checks that each call
// gives back its place in the gate and its client's count once its
// handler returns, that the handler's context ends with the client's,
// and that no refusal is counted for it.
func TestClientCancelGivesBack(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Minute} {
		t.Run(fmt.Sprint("Timeout=", timeout), func(t *testing.T) {
			entered, left := make(chan struct{}, 1), make(chan error, 1)
			it := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 1, MaxInFlightPerClient: 1, Timeout: timeout}})
			srv := newServer(t, it, &echo{say: func(ctx context.Context, in string) (string, error) {
				if in == "wait" {
					entered <- struct{}{}
					<-ctx.Done()
					left <- ctx.Err()
					return "", ctx.Err()
				}
				return in, nil
			}})
			conn := srv.dial("192.0.2.1:1")
			for cancelled := 0; cancelled < 3; {
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() {
					_, _, err := sayCtx(ctx, conn, "wait")
					done <- err
				}()
				select {
				case <-entered:
				case err := <-done:
					// With a deadline, the call before gives its count
					// back when its handler returns, after its answer.
					cancel()
					if timeout == 0 || ReasonOf(err) != admit.ConcurrencyLimited {
						t.Fatalf("a call after %d cancelled: %v", cancelled, err)
					}
					continue
				}
				cancelled++
				cancel()
				if err := <-done; status.Code(err) != codes.Canceled {
					t.Errorf("a call its client cancelled: %v", err)
				}
				if err := <-left; err != context.Canceled {
					t.Errorf("the handler's context ended with %v, want the client's cancel", err)
				}
				waitFor(t, "every call out of the interceptors", srv.idle)
				waitFor(t, "the place given back", func() bool { return inFlight(it) == 0 })
			}
			// One place in the gate, one call per client: a call passes
			// only if the cancelled ones gave both back.
			waitFor(t, "the client's count given back", func() bool {
				_, _, err := say(conn, "x")
				if ReasonOf(err) == admit.ConcurrencyLimited {
					return false
				}
				if err != nil {
					t.Fatalf("a call after cancelled ones: %v", err)
				}
				return true
			})
			if s := it.Stats(); s.Requests[admit.ServerBusy] != 0 || s.Requests[admit.RequestTimeout] != 0 || s.Requests[admit.Allowed] != 4 {
				t.Errorf("Stats %v: want 4 allowed, the cancelled calls counted as no refusal", s.Requests)
			}
		})
	}
}

// TestStress runs many clients' unary calls and streams at once through
// every layer, some cancelled, some panicking, under the race detector,
// and checks that every place taken is given back, that handlers run only
// for allowed calls, and that the gate never admits more than its cap.
func TestStress(t *testing.T) {
	const clients, workers, ops = 6, 12, 40
	var handled atomic.Int64
	block, entered := make(chan struct{}), make(chan struct{}, 2)
	it := mustNew(t, Config{
		Limits: admit.Config{
			MaxInFlight:          3,
			QueueWait:            time.Millisecond,
			Rate:                 limits.Limit{Events: 200, Period: time.Second},
			Burst:                60,
			CallerKey:            "authorization",
			MaxInFlightPerClient: 2,
			MaxStreamsPerClient:  2,
			Timeout:              time.Second,
		},
		LimitMessages: true,
	})
	srv := newServer(t, it, &echo{
		say: func(ctx context.Context, in string) (string, error) {
			handled.Add(1)
			switch in {
			case "panic":
				panic("bug")
			case "slow":
				time.Sleep(3 * time.Millisecond)
			case "block":
				entered <- struct{}{}
				<-block
			}
			return in, nil
		},
		chat: func(ss grpc.ServerStream) error {
			handled.Add(1)
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
	})
	conns := make([]*grpc.ClientConn, clients)
	for i := range conns {
		conns[i] = srv.dial(fmt.Sprintf("192.0.2.%d:1", i+1))
	}
	var wg sync.WaitGroup
	var refused atomic.Int64
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range ops {
				conn := conns[r.IntN(clients)]
				md := []string{"authorization", fmt.Sprint("token", r.IntN(4))}
				var err error
				switch r.IntN(4) {
				case 0, 1:
					_, _, err = say(conn, []string{"x", "slow", "panic"}[r.IntN(3)], md...)
				default:
					ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
					var cs grpc.ClientStream
					if cs, err = openChat(ctx, conn, md...); err == nil {
						for range r.IntN(4) {
							if _, err = chatOnce(cs, "m"); err != nil {
								break
							}
						}
						if r.IntN(2) == 0 {
							cs.CloseSend()
							cs.RecvMsg(new(wrapperspb.StringValue))
						}
					}
					cancel() // some streams end by the client cancelling
				}
				if err == nil {
					continue
				}
				switch ReasonOf(err) {
				case admit.ServerBusy, limits.ReasonRateLimited, admit.ConcurrencyLimited, admit.RequestTimeout:
					refused.Add(1)
				case admit.Allowed:
					if c := status.Code(err); c != codes.Internal && c != codes.Canceled {
						t.Errorf("unexpected error: %v", err)
					}
				default:
					t.Errorf("unexpected refusal: %v", err)
				}
			}
		})
	}
	wg.Wait()
	waitFor(t, "every call out of the interceptors", srv.idle)
	s := it.Stats()
	if s.Gate.InFlight != 0 {
		t.Errorf("%d places taken in the gate after the stress", s.Gate.InFlight)
	}
	if s.Gate.Peak > 3 {
		t.Errorf("gate peak %d, over its cap of 3", s.Gate.Peak)
	}
	if uint64(handled.Load()) != s.Requests[admit.Allowed] {
		t.Errorf("%d handlers ran, %d calls allowed", handled.Load(), s.Requests[admit.Allowed])
	}
	if refused.Load() == 0 {
		t.Error("no refusals: the stress does not reach the limits")
	}
	t.Logf("%d calls allowed, %d refusals seen by clients; Stats %v", s.Requests[admit.Allowed], refused.Load(), s.Requests)

	// Every client's counts are back to 0: each may have its two calls
	// and its two streams in progress at once. A call answered
	// request_timeout gives its places back when its handler returns,
	// after its answer, so the probe is tried until it passes: a count
	// leaked would fail it for good.
	for i, conn := range conns {
		attempt := 0
		waitFor(t, fmt.Sprintf("client %d's counts back to 0", i+1), func() bool {
			attempt++
			return probeClient(t, it, conn, i+1, attempt, block, entered)
		})
	}
}

// probeClient reports whether the client of conn, 192.0.2.n, can have two
// calls (blocking in the handler, until sent on block) and two streams in
// progress at once: false if a layer refuses one for a reason that may
// pass (concurrency_limited, server_busy). Its address's rate is reset,
// and its calls carry a new caller key, so that no rate refuses them.
func probeClient(t *testing.T, it *Interceptor, conn *grpc.ClientConn, n, attempt int, block, entered chan struct{}) bool {
	t.Helper()
	if err := it.Reset(context.Background(), fmt.Sprintf("a:192.0.2.%d/32", n)); err != nil {
		t.Fatal(err)
	}
	md := []string{"authorization", fmt.Sprintf("probe %d %d", n, attempt)}
	passes := func(err error) bool {
		switch r := ReasonOf(err); {
		case err == nil, r == admit.RequestTimeout: // a blocked call may pass the deadline: it held its count all the same
			return true
		case r == admit.ConcurrencyLimited, r == admit.ServerBusy:
			return false
		}
		t.Fatalf("client %d: %v", n, err)
		return false
	}
	calls := make(chan error, 2)
	for range 2 {
		go func() {
			_, _, err := say(conn, "block", md...)
			calls <- err
		}()
	}
	ok, in, out := true, 0, 0
	for range 2 {
		select {
		case <-entered:
			in++
		case err := <-calls:
			out++
			ok = passes(err) && ok
		}
	}
	if ok {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel() // the streams end with the probe
		for range 2 {
			cs, err := openChat(ctx, conn, md...)
			if err == nil {
				_, err = chatOnce(cs, "probe")
			}
			if ok = passes(err); !ok {
				break
			}
		}
	}
	for range in {
		block <- struct{}{}
	}
	for range 2 - out {
		passes(<-calls)
	}
	return ok
}

// TestRefusalCostsNothing checks, call by call, that a refusal by a later
// layer leaves the buckets of the earlier ones as they were: a stream
// refused by the per-client cap does not spend the client's rate.
func TestRefusalCostsNothing(t *testing.T) {
	it := mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 3, Period: time.Hour}, MaxStreamsPerClient: 1}})
	srv := newServer(t, it, &echo{})
	conn := srv.dial("192.0.2.1:1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, err := openChat(ctx, conn) // 1 of 3
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chatOnce(cs, "open"); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		refused, err := openChat(ctx, conn)
		if err == nil {
			_, err = chatOnce(refused, "x")
		}
		if ReasonOf(err) != admit.ConcurrencyLimited {
			t.Fatalf("a second stream: %v", err)
		}
	}
	mustSay(t, conn, "2 of 3")
	mustSay(t, conn, "3 of 3")
	if _, _, err := say(conn, "4 of 3"); ReasonOf(err) != limits.ReasonRateLimited {
		t.Errorf("the fourth call: %v, want rate_limited", err)
	}
}

// slowLimiter is a limiter that answers after a delay, allowing, or gives
// up when its context ends.
type slowLimiter struct{ d time.Duration }

func (s slowLimiter) Take(ctx context.Context, _ string, n int) (limits.Decision, error) {
	select {
	case <-time.After(s.d):
		return limits.Decision{Allowed: true, Cost: n, Limit: 100, Period: time.Minute, Burst: 100, Remaining: 99, At: time.Now()}, nil
	case <-ctx.Done():
		return limits.Decision{}, ctx.Err()
	}
}

func (slowLimiter) Refund(context.Context, string, limits.Decision) error { return nil }

// TestTimeoutFromAdmission checks that Timeout bounds a unary call from
// the moment the gate lets it in, the rate layers' limiter calls
// included, not the handler alone: limiters that hang past their bound
// under FailOpen leave no time to the handler, which never starts, and
// slow limiters leave the handler only what remains of the deadline.
func TestTimeoutFromAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		never := stuck{make(chan struct{})}
		defer close(never.release)
		ctx := peers(1)[0]
		var started atomic.Int32
		it := mustNew(t, Config{Limits: admit.Config{Timeout: 100 * time.Millisecond, MaxInFlight: 2,
			Limiters: map[string]limits.Limiter{"never": never}, Limiter: "never",
			CallerKey: "x-key", CallerLimiter: "never", FailOpen: true}})
		start := time.Now()
		_, err := it.Unary(ctx, nil, benchInfo, func(context.Context, any) (any, error) { started.Add(1); return nil, nil })
		if ReasonOf(err) != admit.RequestTimeout || time.Since(start) != 100*time.Millisecond {
			t.Errorf("hanging limiters: %v after %v, want request_timeout after 100ms", err, time.Since(start))
		}
		synctest.Wait()
		if n := started.Load(); n != 0 {
			t.Errorf("the handler started %d times past the deadline", n)
		}
		if s := it.Stats(); s.Requests[admit.RequestTimeout] != 1 || s.Requests[admit.Allowed] != 0 || s.Gate.InFlight != 0 {
			t.Errorf("Stats %v, gate %+v: want 1 timeout, none allowed, the gate empty", s.Requests, s.Gate)
		}

		slow := slowLimiter{30 * time.Millisecond}
		it = mustNew(t, Config{Limits: admit.Config{Timeout: 100 * time.Millisecond,
			Limiters: map[string]limits.Limiter{"slow": slow}, Limiter: "slow",
			CallerKey: "x-key", CallerLimiter: "slow"}})
		deadlines := make(chan time.Time, 1)
		start = time.Now()
		_, err = it.Unary(ctx, nil, benchInfo, func(ctx context.Context, _ any) (any, error) {
			d, _ := ctx.Deadline()
			deadlines <- d
			<-ctx.Done()
			return nil, ctx.Err()
		})
		deadline := <-deadlines
		if ReasonOf(err) != admit.RequestTimeout || time.Since(start) != 100*time.Millisecond || !deadline.Equal(start.Add(100*time.Millisecond)) {
			t.Errorf("slow limiters: %v after %v, the handler's deadline %v after the start; want request_timeout after 100ms, deadline at 100ms",
				err, time.Since(start), deadline.Sub(start))
		}
	})
}

// TestStreamTimeoutFromAdmission checks that a stream not established
// within Timeout of its admission gives its place in the gate back then,
// however long its limiters took.
func TestStreamTimeoutFromAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := slowLimiter{60 * time.Millisecond}
		it := mustNew(t, Config{Limits: admit.Config{Timeout: 100 * time.Millisecond, MaxInFlight: 1,
			Limiters: named(slow), Limiter: "l"}})
		ss := &sendStream{ctx: peers(1)[0]}
		info := &grpc.StreamServerInfo{FullMethod: methodChat}
		start := time.Now()
		err := it.Stream(nil, ss, info, func(any, grpc.ServerStream) error {
			if n := inFlight(it); n != 1 {
				t.Errorf("in flight %v after admission, while set up: %d, want 1", time.Since(start), n)
			}
			time.Sleep(time.Until(start.Add(100 * time.Millisecond)))
			synctest.Wait()
			if n := inFlight(it); n != 0 {
				t.Errorf("in flight %v after admission, not established: %d, want 0", time.Since(start), n)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
