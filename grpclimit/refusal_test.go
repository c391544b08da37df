package grpclimit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
)

// TestRefusals checks the code, reason and details of every refusal a
// limiter decides, and that the handler is never called for one.
func TestRefusals(t *testing.T) {
	at := time.Now()
	dec := func(r limits.Reason, retry time.Duration) limits.Decision {
		return limits.Decision{Reason: r, Limit: 5, Period: time.Minute, Burst: 5, Cost: 1, RetryAfter: retry, ResetAfter: time.Minute, At: at}
	}
	const busy = 2 * time.Second
	rate := limits.Limit{Events: 5, Period: time.Minute}
	for _, tt := range []struct {
		name string
		cfg  Config
		want refusalOf
	}{
		{
			name: "rate_limited, exact to the nanosecond",
			cfg:  Config{Limits: admit.Config{Limiters: named(fixed{d: dec(limits.ReasonRateLimited, 2500*time.Millisecond+1)}), Limiter: "l"}},
			want: refusalOf{codes.ResourceExhausted, limits.ReasonRateLimited, 2500*time.Millisecond + 1, "default", true, "2501"},
		},
		{
			name: "cost_above_burst: no retry",
			cfg:  Config{Limits: admit.Config{Limiters: named(fixed{d: dec(limits.ReasonCostAboveBurst, 0)}), Limiter: "l"}},
			want: refusalOf{codes.ResourceExhausted, limits.ReasonCostAboveBurst, -1, "default", true, "-1"},
		},
		{
			name: "table_full",
			cfg:  Config{Limits: admit.Config{Limiters: named(fixed{d: dec(limits.ReasonTableFull, 0)}), Limiter: "l", BusyRetryAfter: busy}},
			want: refusalOf{codes.Unavailable, limits.ReasonTableFull, busy, "default", false, "2000"},
		},
		{
			name: "limiter_error",
			cfg:  Config{Limits: admit.Config{Limiters: named(fixed{err: errors.New("store down")}), Limiter: "l", BusyRetryAfter: busy, PolicyName: "shared"}},
			want: refusalOf{codes.Unavailable, admit.LimiterError, busy, "shared", false, "2000"},
		},
		{
			name: "invalid_cost",
			cfg:  Config{Limits: admit.Config{Rate: rate}, Cost: func(context.Context, string) int { return -1 }},
			want: refusalOf{codes.Internal, limits.ReasonInvalidCost, -1, "default", false, "-1"},
		},
		{
			name: "cost above a local burst",
			cfg:  Config{Limits: admit.Config{Rate: rate}, Cost: func(context.Context, string) int { return 6 }},
			want: refusalOf{codes.ResourceExhausted, limits.ReasonCostAboveBurst, -1, "default", true, "-1"},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int64
			it := mustNew(t, tt.cfg)
			srv := newServer(t, it, &echo{say: func(ctx context.Context, in string) (string, error) {
				calls.Add(1)
				return in, nil
			}})
			_, trailer, err := say(srv.dial("192.0.2.1:1"), "hi")
			if got := describe(err, trailer); got != tt.want {
				t.Errorf("got  %v\nwant %v\n(%v)", got, tt.want, err)
			}
			if n := calls.Load(); n != 0 {
				t.Errorf("the handler was called %d times for a refused call", n)
			}
			if s := it.Stats(); s.Requests[tt.want.reason] != 1 || s.Requests[admit.Allowed] != 0 {
				t.Errorf("Stats %v: want the refusal counted once, nothing allowed", s.Requests)
			}
		})
	}
}

// TestEveryReasonAnswered checks that every reason the engine refuses
// with has its code, and that ReasonOf reads each back from the status
// error its client sees, as the table of the package documentation says.
func TestEveryReasonAnswered(t *testing.T) {
	want := map[limits.Reason]codes.Code{
		limits.ReasonRateLimited:    codes.ResourceExhausted,
		admit.ConcurrencyLimited:    codes.ResourceExhausted,
		limits.ReasonCostAboveBurst: codes.ResourceExhausted,
		admit.ServerBusy:            codes.Unavailable,
		limits.ReasonTableFull:      codes.Unavailable,
		admit.LimiterError:          codes.Unavailable,
		admit.ConcurrencyTableFull:  codes.Unavailable,
		admit.RequestTimeout:        codes.DeadlineExceeded,
		limits.ReasonInvalidCost:    codes.Internal,
	}
	for r := limits.ReasonRateLimited; r <= admit.ConcurrencyTableFull; r++ {
		if r == admit.Exempt {
			continue
		}
		code, ok := want[r]
		if !ok {
			t.Errorf("reason %v: no code in the documented table", r)
			continue
		}
		err := newRefusal(&admit.Refusal{Reason: r, RetryAfter: time.Second}).err
		if got := status.Code(err); got != code || ReasonOf(err) != r || !strings.HasPrefix(status.Convert(err).Message(), r.String()+": ") {
			t.Errorf("reason %v: %v, ReasonOf %v; want code %v and the reason back", r, err, ReasonOf(err), code)
		}
	}
	for _, err := range []error{nil, errors.New("plain"), status.Error(codes.ResourceExhausted, "a refusal of another library")} {
		if r := ReasonOf(err); r != admit.Allowed {
			t.Errorf("ReasonOf(%v) = %v, want allowed", err, r)
		}
	}
}

// TestRateLimitedRetryDelay exhausts a client's bucket and checks that the
// refusal's delay is the limiter's: a call after it passes.
func TestRateLimitedRetryDelay(t *testing.T) {
	it := mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 2, Period: time.Minute}}})
	srv := newServer(t, it, &echo{})
	conn := srv.dial("192.0.2.1:1")
	start := time.Now()
	mustSay(t, conn, "1")
	mustSay(t, conn, "2")
	_, trailer, err := say(conn, "3")
	elapsed := time.Since(start)
	got := describe(err, trailer)
	if got.code != codes.ResourceExhausted || got.reason != limits.ReasonRateLimited || !got.quota {
		t.Fatalf("third call of 2 a minute: %v", got)
	}
	// Two calls leave the bucket 30s from its next call, less the time
	// that passed since the first.
	if got.retry <= 30*time.Second-elapsed || got.retry > 30*time.Second || got.pushback != pushbackOf(got.retry) {
		t.Errorf("retry %v, pushback %q, %v after the first call: want 30s less at most that, and the same in ms rounded up",
			got.retry, got.pushback, elapsed)
	}
	if s := it.Stats(); s.Requests[admit.Allowed] != 2 || s.Requests[limits.ReasonRateLimited] != 1 ||
		len(s.Policies) != 1 || s.Policies[0].Requests[limits.ReasonRateLimited] != 1 {
		t.Errorf("Stats %+v", s)
	}
}

// TestBusyRetryAfterNeverEarly checks the delay of refusals that no
// limiter times: at least BusyRetryAfter, and the pushback the same.
func TestBusyRetryAfterNeverEarly(t *testing.T) {
	const busy = 1500 * time.Millisecond
	it := mustNew(t, Config{Limits: admit.Config{Limiters: named(fixed{d: limits.Decision{Reason: limits.ReasonTableFull}}), Limiter: "l", BusyRetryAfter: busy}})
	_, trailer, err := say(newServer(t, it, &echo{}).dial("192.0.2.1:1"), "x")
	got := describe(err, trailer)
	if got.reason != limits.ReasonTableFull || got.retry < busy || got.pushback != pushbackOf(got.retry) {
		t.Errorf("table_full with BusyRetryAfter %v: %v, want a retry of at least that, and the pushback the same", busy, got)
	}
}

// blocker is a handler that holds its call until released, and counts
// the calls it was given.
type blocker struct {
	entered chan struct{}
	release chan struct{}
	calls   atomic.Int64
}

func newBlocker() *blocker {
	return &blocker{entered: make(chan struct{}, 100), release: make(chan struct{})}
}

func (b *blocker) say(ctx context.Context, in string) (string, error) {
	b.calls.Add(1)
	if in == "block" {
		b.entered <- struct{}{}
		<-b.release
	}
	return in, nil
}

// holdCall starts a call that blocks in b until released, and returns its
// error when it ends.
func holdCall(t *testing.T, srv *testServer, b *blocker, remote string) <-chan error {
	done := make(chan error, 1)
	conn := srv.dial(remote)
	go func() {
		_, _, err := say(conn, "block")
		done <- err
	}()
	select {
	case <-b.entered:
	case err := <-done:
		t.Fatalf("the blocking call: %v", err)
	}
	return done
}

func TestServerBusy(t *testing.T) {
	b := newBlocker()
	it := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 1, BusyRetryAfter: 2 * time.Second}})
	srv := newServer(t, it, &echo{say: b.say})
	done := holdCall(t, srv, b, "192.0.2.1:1")
	_, trailer, err := say(srv.dial("192.0.2.2:1"), "x")
	if got, want := describe(err, trailer), (refusalOf{codes.Unavailable, admit.ServerBusy, 2 * time.Second, "", false, "2000"}); got != want {
		t.Errorf("gate full: %v, want %v", got, want)
	}
	if n := b.calls.Load(); n != 1 {
		t.Errorf("handler called %d times, want once (the call holding the gate)", n)
	}
	close(b.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mustSay(t, srv.dial("192.0.2.2:1"), "x")
	s := it.Stats()
	if s.Requests[admit.ServerBusy] != 1 || s.Requests[admit.Allowed] != 2 || s.Gate == nil || s.Gate.InFlight != 0 || s.Gate.Shed != 1 {
		t.Errorf("Stats %v, gate %+v", s.Requests, s.Gate)
	}
}

func TestQueueWait(t *testing.T) {
	b := newBlocker()
	it := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 1, QueueWait: time.Minute}})
	srv := newServer(t, it, &echo{say: b.say})
	done := holdCall(t, srv, b, "192.0.2.1:1")
	conn := srv.dial("192.0.2.2:1")
	waited := make(chan error, 1)
	go func() {
		_, _, err := say(conn, "x")
		waited <- err
	}()
	waitFor(t, "waiting in the gate", func() bool { return it.Stats().Gate.Waiting == 1 })
	close(b.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Errorf("a call waiting for a place freed within QueueWait: %v", err)
	}
}

func TestConcurrencyLimited(t *testing.T) {
	b := newBlocker()
	it := mustNew(t, Config{Limits: admit.Config{MaxInFlightPerClient: 1, Rate: limits.Limit{Events: 3, Period: time.Hour}}})
	srv := newServer(t, it, &echo{say: b.say})
	done := holdCall(t, srv, b, "192.0.2.1:1")
	conn := srv.dial("192.0.2.1:2") // the same client, another connection
	for range 5 {
		_, trailer, err := say(conn, "x")
		if got, want := describe(err, trailer), (refusalOf{codes.ResourceExhausted, admit.ConcurrencyLimited, time.Second, "", false, "1000"}); got != want {
			t.Fatalf("while one call is in progress: %v, want %v", got, want)
		}
	}
	mustSay(t, srv.dial("192.0.2.2:1"), "another client") // counted on its own
	close(b.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The refusals spent none of the 3 an hour: 1 is spent, 2 are left;
	// and the slow call's count is given back.
	for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
		if _, _, err := say(conn, "x"); status.Code(err) != want {
			t.Errorf("call %d after the slow one: %v, want %v", i, err, want)
		}
	}
	if s := it.Stats(); s.Requests[admit.ConcurrencyLimited] != 5 {
		t.Errorf("Stats %v", s.Requests)
	}
}

func TestConcurrencyTableFull(t *testing.T) {
	b := newBlocker()
	it := mustNew(t, Config{Limits: admit.Config{MaxInFlightPerClient: 1, MaxKeys: 1}})
	srv := newServer(t, it, &echo{say: b.say})
	done := holdCall(t, srv, b, "192.0.2.1:1")
	_, trailer, err := say(srv.dial("192.0.2.2:1"), "x")
	if got, want := describe(err, trailer), (refusalOf{codes.Unavailable, admit.ConcurrencyTableFull, time.Second, "", false, "1000"}); got != want {
		t.Errorf("table full: %v, want %v", got, want)
	}
	close(b.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The first client's entry is gone with its call: the second fits.
	mustSay(t, srv.dial("192.0.2.2:1"), "x")
	if s := it.Stats(); s.Requests[admit.ConcurrencyTableFull] != 1 {
		t.Errorf("Stats %v", s.Requests)
	}
}

// TestExemptions checks that the health service passes a full gate and an
// empty bucket by default, that Exempt replaces the default, and that the
// routes of Limits.Exempt exempt a service or a method.
func TestExemptions(t *testing.T) {
	b := newBlocker()
	it := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 1, Rate: limits.Limit{Events: 1, Period: time.Hour}}})
	srv := newServer(t, it, &echo{say: b.say})
	done := holdCall(t, srv, b, "192.0.2.1:1") // the gate is full, the bucket empty
	conn := srv.dial("192.0.2.1:2")
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	hc := healthpb.NewHealthClient(conn)
	for range 3 {
		if resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health check under load: %v, %v", resp, err)
		}
	}
	w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	if err != nil {
		t.Errorf("health watch under load: %v", err)
	}
	close(b.release)
	<-done
	if s := it.Stats(); s.Requests[admit.Exempt] != 4 || s.Requests[admit.Allowed] != 1 {
		t.Errorf("Stats %v: want 4 exempt, 1 allowed", s.Requests)
	}

	// Exempting nothing: the probe is limited like any call.
	it = mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 1, Period: time.Hour}}, Exempt: func(string) bool { return false }})
	srv = newServer(t, it, &echo{})
	hc = healthpb.NewHealthClient(srv.dial("192.0.2.1:1"))
	hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); ReasonOf(err) != limits.ReasonRateLimited {
		t.Errorf("second probe with nothing exempt: %v, want rate_limited", err)
	}

	// Which methods are exempt, with a rate of 1 an hour: an exempt
	// method's calls all pass, another's second is refused.
	for _, tt := range []struct {
		name   string
		cfg    Config
		method string
		want   bool
	}{
		{"default, health", Config{}, "/grpc.health.v1.Health/Check", true},
		{"default, a service named alike", Config{}, "/grpc.health.v1.HealthX/Check", false},
		{"default, another service", Config{}, methodSay, false},
		{"a service", Config{Limits: admit.Config{Exempt: []string{"/grpc.reflection.v1.ServerReflection/"}}}, "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", true},
		{"a service, another version", Config{Limits: admit.Config{Exempt: []string{"/grpc.reflection.v1.ServerReflection/"}}}, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", false},
		{"a service, its stream", Config{Limits: admit.Config{Exempt: []string{"/test.Echo/"}}}, methodChat, true},
		{"a method", Config{Limits: admit.Config{Exempt: []string{methodSay}}}, methodSay, true},
		{"a method, another of its service", Config{Limits: admit.Config{Exempt: []string{methodSay}}}, methodChat, false},
		{"routes and the function", Config{Limits: admit.Config{Exempt: []string{methodSay}}, Exempt: func(m string) bool { return m == methodChat }}, methodChat, true},
		{"the function alone drops the default", Config{Exempt: func(m string) bool { return m == methodChat }}, "/grpc.health.v1.Health/Check", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Limits.Rate = limits.Limit{Events: 1, Period: time.Hour}
			it := mustNew(t, tt.cfg)
			ctx := peers(1)[0]
			var err error
			for range 3 {
				if _, err = it.Unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: tt.method}, noop); err != nil {
					break
				}
			}
			if got := err == nil; got != tt.want {
				t.Errorf("%s exempt: %v (%v), want %v", tt.method, got, err, tt.want)
			}
		})
	}
}

// TestLimiterBounded checks that a limiter that never answers cannot hold
// a call past LimiterTimeout, and that FailOpen serves the call.
func TestLimiterBounded(t *testing.T) {
	never := stuck{make(chan struct{})}
	defer close(never.release)
	for _, failOpen := range []bool{false, true} {
		it := mustNew(t, Config{Limits: admit.Config{Limiters: named(never), Limiter: "l", LimiterTimeout: 50 * time.Millisecond, MaxInFlight: 1, FailOpen: failOpen}})
		srv := newServer(t, it, &echo{})
		// The limiter never answers: the call returning at all is the
		// bound at work.
		_, _, err := say(srv.dial("192.0.2.1:1"), "x")
		if !failOpen && ReasonOf(err) != admit.LimiterError {
			t.Errorf("FailOpen false: %v, want limiter_error", err)
		}
		if failOpen && err != nil {
			t.Errorf("FailOpen: %v, want the call served", err)
		}
		if s := it.Stats(); s.Requests[admit.LimiterError] != 1 || s.Gate.InFlight != 0 {
			t.Errorf("FailOpen %v: Stats %v, gate %+v", failOpen, s.Requests, s.Gate)
		}
	}
}

// outage is a Limiter that fails while down, and allows otherwise; it
// counts its calls.
type outage struct {
	down  atomic.Bool
	calls atomic.Int64
}

func (o *outage) Take(_ context.Context, _ string, n int) (limits.Decision, error) {
	o.calls.Add(1)
	if o.down.Load() {
		return limits.Decision{}, errors.New("store unreachable")
	}
	return limits.Decision{Allowed: true, Cost: n, Limit: 100, Period: time.Hour, Burst: 100, Remaining: 99, At: time.Now()}, nil
}

func (*outage) Refund(context.Context, string, limits.Decision) error { return nil }

// TestLocalBeforeSharedDuringOutage checks that a failure policy speaks for
// the failing limiter only: under FailOpen the local limiter in front of
// it keeps counting and refusing, and the shared one is not asked about a
// call the local one refuses; failing closed, the refusal gives the local
// charge back, as the calls after the outage show.
func TestLocalBeforeSharedDuringOutage(t *testing.T) {
	ctx := peers(1)[0]
	rl, le := limits.ReasonRateLimited, admit.LimiterError
	for _, tt := range []struct {
		failOpen bool
		want     []limits.Reason
		calls    int64
		after    []limits.Reason // once the shared limiter is back
	}{
		{true, []limits.Reason{0, 0, rl, rl, rl}, 2, []limits.Reason{rl}},
		{false, []limits.Reason{le, le, le, le, le}, 5, []limits.Reason{0, 0, rl}},
	} {
		shared := &outage{}
		shared.down.Store(true)
		it := mustNew(t, Config{Limits: admit.Config{Limiters: named(shared), Limiter: "l", Rate: limits.Limit{Events: 2, Period: time.Hour}, FailOpen: tt.failOpen}})
		for i, want := range tt.want {
			if _, err := it.Unary(ctx, nil, benchInfo, noop); ReasonOf(err) != want {
				t.Errorf("FailOpen %v: call %d: %v, want %v", tt.failOpen, i, err, want)
			}
		}
		if n := shared.calls.Load(); n != tt.calls {
			t.Errorf("FailOpen %v: the shared limiter was asked %d times, want %d", tt.failOpen, n, tt.calls)
		}
		// What the local bucket has left.
		shared.down.Store(false)
		for i, want := range tt.after {
			if _, err := it.Unary(ctx, nil, benchInfo, noop); ReasonOf(err) != want {
				t.Errorf("FailOpen %v: call %d after the outage: %v, want %v", tt.failOpen, i, err, want)
			}
		}
	}
}

// refusedAtDeadline is a limiter with a timeout of its own, as a remote
// one has, whose store refuses connections: it keeps trying until its
// deadline, then returns the cause.
type refusedAtDeadline struct{ timeout time.Duration }

func (l refusedAtDeadline) Take(ctx context.Context, _ string, _ int) (limits.Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	<-ctx.Done()
	return limits.Decision{}, fmt.Errorf("store unavailable: %w, connecting failed: dial tcp 127.0.0.1:6379: %w", ctx.Err(), syscall.ECONNREFUSED)
}

func (refusedAtDeadline) Refund(context.Context, string, limits.Decision) error { return nil }

// TestLimiterErrorKeepsCause checks that when LimiterTimeout and the
// limiter's own timeout end together, the error logged is the limiter's,
// with its cause, under either policy.
func TestLimiterErrorKeepsCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := peers(1)[0]
		for _, failOpen := range []bool{false, true} {
			var logs bytes.Buffer
			it := mustNew(t, Config{Limits: admit.Config{Limiters: named(refusedAtDeadline{100 * time.Millisecond}), Limiter: "l",
				LimiterTimeout: 100 * time.Millisecond, FailOpen: failOpen, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}})
			const n = 20
			want := admit.LimiterError
			if failOpen {
				want = admit.Allowed
			}
			for range n {
				if _, err := it.Unary(ctx, nil, benchInfo, noop); ReasonOf(err) != want {
					t.Errorf("FailOpen %v: %v, want %v", failOpen, err, want)
				}
			}
			if s := it.Stats(); s.Requests[admit.LimiterError] != n {
				t.Errorf("FailOpen %v: %d limiter errors counted, want %d", failOpen, s.Requests[admit.LimiterError], n)
			}
			var got int
			for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				var entry map[string]any
				if err := json.Unmarshal([]byte(line), &entry); err != nil {
					t.Fatal(err)
				}
				e, _ := entry["error"].(string)
				if e == "" {
					continue // a refusal's own entry
				}
				got++
				if !strings.Contains(e, "connection refused") {
					t.Errorf("FailOpen %v: logged %q, want the limiter's cause", failOpen, e)
				}
			}
			if got < n {
				t.Errorf("FailOpen %v: %d errors logged, want %d", failOpen, got, n)
			}
		}
	})
}

// TestRefusalOnStreamTrailer checks that a stream refused when it opens
// carries its details and the pushback trailer, as a unary call does.
func TestRefusalOnStreamTrailer(t *testing.T) {
	it := mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 1, Period: time.Minute}}})
	conn := newServer(t, it, &echo{}).dial("192.0.2.1:1")
	mustSay(t, conn, "the one call of the minute")
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	cs, err := openChat(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	_, err = chatOnce(cs, "x")
	got := describe(err, cs.Trailer())
	if got.code != codes.ResourceExhausted || got.reason != limits.ReasonRateLimited || got.policy != "default" || !got.quota ||
		got.retry <= 0 || got.retry > time.Minute || got.pushback != pushbackOf(got.retry) {
		t.Errorf("a stream over the rate: %v", got)
	}
}
