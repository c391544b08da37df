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
)

// TestPanicsGiveBack has handlers panic, unary (with and without a
// deadline) and stream, and checks that each gives back its place in the
// gate and its per-client counts, and that the panic reaches the
// interceptor in front (here one that recovers).
func TestPanicsGiveBack(t *testing.T) {
	for _, timeout := range []time.Duration{0, 5 * time.Second} {
		t.Run(fmt.Sprint("Timeout=", timeout), func(t *testing.T) {
			it := mustNew(t, Config{MaxInFlight: 1, MaxInFlightPerClient: 1, MaxStreamsPerClient: 1, Timeout: timeout})
			srv := newServer(t, it, &echo{
				say: func(ctx context.Context, in string) (string, error) {
					if in == "panic" {
						panic("handler bug")
					}
					return in, nil
				},
				chat: func(ss grpc.ServerStream) error {
					if err := ss.RecvMsg(new(wrapperspb.StringValue)); err != nil {
						return err
					}
					panic("stream handler bug")
				},
			})
			conn := srv.dial("192.0.2.1:1")
			for range 3 {
				if _, _, err := say(conn, "panic"); status.Code(err) != codes.Internal {
					t.Fatalf("a panicking handler: %v, want the recovering interceptor's Internal", err)
				}
				mustSay(t, conn, "after a panic")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for range 3 {
				cs, err := openChat(ctx, conn)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := chatOnce(cs, "x"); status.Code(err) != codes.Internal {
					t.Fatalf("a panicking stream handler: %v", err)
				}
			}
			waitFor(t, "everything given back", func() bool {
				return it.capacity.Gate.Stats().InFlight == 0 && it.calls.Len() == 0 && it.streams.Len() == 0
			})
			if s := it.Stats(); s.ServerBusy+s.ConcurrencyLimited != 0 {
				t.Errorf("calls refused after panics: %+v", s)
			}
		})
	}
}

// TestTimeout checks that a unary call past Timeout is refused with
// request_timeout, that it keeps its place in the gate and its
// per-client count until its handler returns, and that a client's own
// shorter deadline is not counted as the server's timeout.
func TestTimeout(t *testing.T) {
	release := make(chan struct{})
	returned := make(chan struct{}, 1)
	it := mustNew(t, Config{Timeout: 50 * time.Millisecond, MaxInFlight: 2, MaxInFlightPerClient: 2})
	srv := newServer(t, it, &echo{say: func(ctx context.Context, in string) (string, error) {
		switch in {
		case "stubborn": // ignores its context
			<-release
			returned <- struct{}{}
		case "polite":
			<-ctx.Done()
			return "", ctx.Err()
		}
		return in, nil
	}})
	conn := srv.dial("192.0.2.1:1")
	start := time.Now()
	_, trailer, err := say(conn, "stubborn")
	if got, want := describe(err, trailer), (refusalOf{codes.DeadlineExceeded, ReasonRequestTimeout, -1, "", false, ""}); got != want {
		t.Errorf("past the deadline: %v, want %v", got, want)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the refusal took %v", d)
	}
	if n := it.capacity.Gate.Stats().InFlight; n != 1 || it.calls.Len() != 1 {
		t.Errorf("while the handler still runs: %d in the gate, %d clients counted; want both 1", n, it.calls.Len())
	}
	close(release)
	<-returned
	waitFor(t, "the place given back", func() bool { return it.capacity.Gate.Stats().InFlight == 0 && it.calls.Len() == 0 })

	if _, _, err := say(conn, "polite"); ReasonOf(err) != ReasonRequestTimeout {
		t.Errorf("a handler that heeds its context: %v", err)
	}
	mustSay(t, conn, "quick")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	var out wrapperspb.StringValue
	if err := conn.Invoke(ctx, methodSay, wrapperspb.String("polite"), &out); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("the client's own deadline: %v", err)
	}
	waitFor(t, "the place given back", func() bool { return it.capacity.Gate.Stats().InFlight == 0 })
	if s := it.Stats(); s.RequestTimeout != 2 || s.Allowed != 4 {
		t.Errorf("Stats %+v: want 2 timeouts (the client's own not counted), 4 allowed", s)
	}
}

// TestStress runs many clients' unary calls and streams at once through
// every layer, some cancelled, some panicking, under the race detector,
// and checks that every place taken is given back, that handlers run only
// for allowed calls, and that the gate never admits more than its cap.
func TestStress(t *testing.T) {
	const clients, workers, ops = 6, 12, 40
	var handled atomic.Int64
	it := mustNew(t, Config{
		MaxInFlight:          3,
		QueueWait:            time.Millisecond,
		Rate:                 limits.Limit{Events: 200, Period: time.Second},
		Burst:                60,
		CallerKey:            MetadataKey("authorization"),
		MaxInFlightPerClient: 2,
		MaxStreamsPerClient:  2,
		LimitMessages:        true,
		Timeout:              time.Second,
	})
	srv := newServer(t, it, &echo{
		say: func(ctx context.Context, in string) (string, error) {
			handled.Add(1)
			switch in {
			case "panic":
				panic("bug")
			case "slow":
				time.Sleep(3 * time.Millisecond)
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
	var refused, bad atomic.Int64
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
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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
				if err != nil {
					switch ReasonOf(err) {
					case ReasonServerBusy, ReasonRateLimited, ReasonConcurrencyLimited:
						refused.Add(1)
					case "":
						if c := status.Code(err); c != codes.Internal && c != codes.Canceled {
							bad.Add(1)
							t.Errorf("unexpected error: %v", err)
						}
					default:
						bad.Add(1)
						t.Errorf("unexpected refusal: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
	waitFor(t, "everything given back", func() bool {
		return it.capacity.Gate.Stats().InFlight == 0 && it.calls.Len() == 0 && it.streams.Len() == 0
	})
	s := it.Stats()
	if s.Gate.Peak > 3 {
		t.Errorf("gate peak %d, over its cap of 3", s.Gate.Peak)
	}
	if uint64(handled.Load()) != s.Allowed {
		t.Errorf("%d handlers ran, %d calls allowed", handled.Load(), s.Allowed)
	}
	if refused.Load() == 0 {
		t.Error("no refusals: the stress does not reach the limits")
	}
	t.Logf("%d calls allowed, %d refusals seen by clients; Stats %+v", s.Allowed, refused.Load(), s)
}

// TestRefusalCostsNothing checks, call by call, that a refusal by a later
// layer leaves the buckets of the earlier ones as they were: a stream
// refused by the per-client cap does not spend the client's rate.
func TestRefusalCostsNothing(t *testing.T) {
	it := mustNew(t, Config{Rate: limits.Limit{Events: 3, Period: time.Hour}, MaxStreamsPerClient: 1})
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
		if ReasonOf(err) != ReasonConcurrencyLimited {
			t.Fatalf("a second stream: %v", err)
		}
	}
	mustSay(t, conn, "2 of 3")
	mustSay(t, conn, "3 of 3")
	if _, _, err := say(conn, "4 of 3"); ReasonOf(err) != ReasonRateLimited {
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
		it := mustNew(t, Config{Timeout: 100 * time.Millisecond, MaxInFlight: 2, Limiter: never,
			CallerKey: MetadataKey("x-key"), CallerLimiter: never, OnLimiterError: FailOpen})
		start := time.Now()
		_, err := it.Unary(ctx, nil, benchInfo, func(context.Context, any) (any, error) { started.Add(1); return nil, nil })
		if ReasonOf(err) != ReasonRequestTimeout || time.Since(start) != 100*time.Millisecond {
			t.Errorf("hanging limiters: %v after %v, want request_timeout after 100ms", err, time.Since(start))
		}
		synctest.Wait()
		if n := started.Load(); n != 0 {
			t.Errorf("the handler started %d times past the deadline", n)
		}
		if s := it.Stats(); s.RequestTimeout != 1 || s.Allowed != 0 || s.Gate.InFlight != 0 {
			t.Errorf("Stats %+v, gate %+v: want 1 timeout, none allowed, the gate empty", s, s.Gate)
		}

		it = mustNew(t, Config{Timeout: 100 * time.Millisecond, Limiter: slowLimiter{30 * time.Millisecond},
			CallerKey: MetadataKey("x-key"), CallerLimiter: slowLimiter{30 * time.Millisecond}})
		deadlines := make(chan time.Time, 1)
		start = time.Now()
		_, err = it.Unary(ctx, nil, benchInfo, func(ctx context.Context, _ any) (any, error) {
			d, _ := ctx.Deadline()
			deadlines <- d
			<-ctx.Done()
			return nil, ctx.Err()
		})
		deadline := <-deadlines
		if ReasonOf(err) != ReasonRequestTimeout || time.Since(start) != 100*time.Millisecond || !deadline.Equal(start.Add(100*time.Millisecond)) {
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
		it := mustNew(t, Config{Timeout: 100 * time.Millisecond, MaxInFlight: 1, Limiter: slowLimiter{60 * time.Millisecond}})
		ss := &sendStream{ctx: peers(1)[0]}
		info := &grpc.StreamServerInfo{FullMethod: methodSay}
		start := time.Now()
		err := it.Stream(nil, ss, info, func(any, grpc.ServerStream) error {
			time.Sleep(time.Until(start.Add(100 * time.Millisecond)))
			synctest.Wait()
			if n := it.Stats().Gate.InFlight; n != 0 {
				t.Errorf("in flight %v after admission, not established: %d, want 0", time.Since(start), n)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
