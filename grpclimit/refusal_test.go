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

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/limitsgo/limits"
)

// TestRefusals checks the code, reason and details of every refusal a
// limiter decides, and that the handler is never called for one.
func TestRefusals(t *testing.T) {
	at := time.Now()
	dec := func(r limits.Reason, retry time.Duration) limits.Decision {
		return limits.Decision{Reason: r, Limit: 5, Period: time.Minute, Burst: 5, Cost: 1, RetryAfter: retry, ResetAfter: time.Minute, At: at}
	}
	const busy = 1500 * time.Millisecond
	for _, tt := range []struct {
		name string
		cfg  Config
		want refusalOf
	}{
		{
			name: "rate_limited, exact to the nanosecond",
			cfg:  Config{Limiter: fixed{d: dec(limits.ReasonRateLimited, 2500*time.Millisecond+1)}},
			want: refusalOf{codes.ResourceExhausted, ReasonRateLimited, 2500*time.Millisecond + 1, "default", true, "2501"},
		},
		{
			name: "cost_above_burst: no retry",
			cfg:  Config{Limiter: fixed{d: dec(limits.ReasonCostAboveBurst, 0)}},
			want: refusalOf{codes.ResourceExhausted, ReasonCostAboveBurst, -1, "default", true, "-1"},
		},
		{
			name: "table_full",
			cfg:  Config{Limiter: fixed{d: dec(limits.ReasonTableFull, 0)}, BusyRetryAfter: busy},
			want: refusalOf{codes.Unavailable, ReasonTableFull, busy, "default", false, "1500"},
		},
		{
			name: "limiter_error",
			cfg:  Config{Limiter: fixed{err: errors.New("store down")}, BusyRetryAfter: busy, PolicyName: "shared"},
			want: refusalOf{codes.Unavailable, ReasonLimiterError, busy, "shared", false, "1500"},
		},
		{
			name: "invalid_cost",
			cfg:  Config{Rate: limits.Limit{Events: 5, Period: time.Minute}, Cost: func(context.Context, string) int { return -1 }},
			want: refusalOf{codes.Internal, ReasonInvalidCost, -1, "default", false, "-1"},
		},
		{
			name: "cost above a local burst",
			cfg:  Config{Rate: limits.Limit{Events: 5, Period: time.Minute}, Cost: func(context.Context, string) int { return 6 }},
			want: refusalOf{codes.ResourceExhausted, ReasonCostAboveBurst, -1, "default", true, "-1"},
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
		})
	}
}

// TestRateLimitedRetryDelay exhausts a client's bucket and checks that the
// refusal's delay is the limiter's: a call after it passes.
func TestRateLimitedRetryDelay(t *testing.T) {
	it := mustNew(t, Config{Rate: limits.Limit{Events: 2, Period: time.Minute}})
	srv := newServer(t, it, &echo{})
	conn := srv.dial("192.0.2.1:1")
	mustSay(t, conn, "1")
	mustSay(t, conn, "2")
	_, trailer, err := say(conn, "3")
	got := describe(err, trailer)
	if got.code != codes.ResourceExhausted || got.reason != ReasonRateLimited || !got.quota {
		t.Fatalf("third call of 2 a minute: %v", got)
	}
	// Two calls at once leave the bucket 30s from its next call; some
	// time has passed since.
	if got.retry <= 29*time.Second || got.retry > 30*time.Second || got.pushback != pushbackOf(got.retry) {
		t.Errorf("retry %v, pushback %q: want just under 30s, and the same in ms rounded up", got.retry, got.pushback)
	}
	if s := it.Stats(); s.Allowed != 2 || s.RateLimited != 1 || len(s.Policies) != 1 || s.Policies[0].RateLimited != 1 {
		t.Errorf("Stats %+v", s)
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
	<-b.entered
	return done
}

func TestServerBusy(t *testing.T) {
	b := newBlocker()
	it := mustNew(t, Config{MaxInFlight: 1, BusyRetryAfter: 2 * time.Second})
	srv := newServer(t, it, &echo{say: b.say})
	done := holdCall(t, srv, b, "192.0.2.1:1")
	_, trailer, err := say(srv.dial("192.0.2.2:1"), "x")
	if got, want := describe(err, trailer), (refusalOf{codes.Unavailable, ReasonServerBusy, 2 * time.Second, "", false, "2000"}); got != want {
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
	if s.ServerBusy != 1 || s.Allowed != 2 || s.Gate == nil || s.Gate.InFlight != 0 || s.Gate.Shed != 1 {
		t.Errorf("Stats %+v, gate %+v", s, s.Gate)
	}
}

func TestQueueWait(t *testing.T) {
	b := newBlocker()
	it := mustNew(t, Config{MaxInFlight: 1, QueueWait: 5 * time.Second})
	srv := newServer(t, it, &echo{say: b.say})
	done := holdCall(t, srv, b, "192.0.2.1:1")
	conn := srv.dial("192.0.2.2:1")
	waited := make(chan error, 1)
	go func() {
		_, _, err := say(conn, "x")
		waited <- err
	}()
	waitFor(t, "waiting in the gate", func() bool { return it.capacity.Gate.Stats().Waiting == 1 })
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
	it := mustNew(t, Config{MaxInFlightPerClient: 1, Rate: limits.Limit{Events: 3, Period: time.Hour}})
	srv := newServer(t, it, &echo{say: b.say})
	done := holdCall(t, srv, b, "192.0.2.1:1")
	conn := srv.dial("192.0.2.1:2") // the same client, another connection
	for range 5 {
		_, trailer, err := say(conn, "x")
		if got, want := describe(err, trailer), (refusalOf{codes.ResourceExhausted, ReasonConcurrencyLimited, time.Second, "", false, "1000"}); got != want {
			t.Fatalf("while one call is in progress: %v, want %v", got, want)
		}
	}
	mustSay(t, srv.dial("192.0.2.2:1"), "another client") // counted on its own
	close(b.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The refusals spent none of the 3 an hour: 1 is spent, 2 are left.
	for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
		if _, _, err := say(conn, "x"); status.Code(err) != want {
			t.Errorf("call %d after the slow one: %v, want %v", i, err, want)
		}
	}
	if s := it.Stats(); s.ConcurrencyLimited != 5 || it.calls.Len() != 0 {
		t.Errorf("Stats %+v, %d clients counted in", s, it.calls.Len())
	}
}

func TestConcurrencyTableFull(t *testing.T) {
	b := newBlocker()
	it := mustNew(t, Config{MaxInFlightPerClient: 1, MaxKeys: 1})
	srv := newServer(t, it, &echo{say: b.say})
	done := holdCall(t, srv, b, "192.0.2.1:1")
	_, trailer, err := say(srv.dial("192.0.2.2:1"), "x")
	if got, want := describe(err, trailer), (refusalOf{codes.Unavailable, ReasonConcurrencyTableFull, time.Second, "", false, "1000"}); got != want {
		t.Errorf("table full: %v, want %v", got, want)
	}
	close(b.release)
	<-done
	if s := it.Stats(); s.ConcurrencyTableFull != 1 {
		t.Errorf("Stats %+v", s)
	}
}

// TestExemptions checks that the health service passes a full gate and an
// empty bucket by default, and that Exempt replaces the default.
func TestExemptions(t *testing.T) {
	b := newBlocker()
	it := mustNew(t, Config{MaxInFlight: 1, Rate: limits.Limit{Events: 1, Period: time.Hour}})
	srv := newServer(t, it, &echo{say: b.say})
	done := holdCall(t, srv, b, "192.0.2.1:1") // the gate is full, the bucket empty
	conn := srv.dial("192.0.2.1:2")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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
	if s := it.Stats(); s.Exempt != 4 || s.Allowed != 1 {
		t.Errorf("Stats %+v: want 4 exempt, 1 allowed", s)
	}

	// Exempting nothing: the probe is limited like any call.
	it = mustNew(t, Config{Rate: limits.Limit{Events: 1, Period: time.Hour}, Exempt: ExemptServices()})
	srv = newServer(t, it, &echo{})
	hc = healthpb.NewHealthClient(srv.dial("192.0.2.1:1"))
	hc.Check(ctx, &healthpb.HealthCheckRequest{})
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); ReasonOf(err) != ReasonRateLimited {
		t.Errorf("second probe with nothing exempt: %v, want rate_limited", err)
	}

	for _, tt := range []struct {
		f      func(string) bool
		method string
		want   bool
	}{
		{DefaultExempt, "/grpc.health.v1.Health/Check", true},
		{DefaultExempt, "/grpc.health.v1.HealthX/Check", false},
		{DefaultExempt, methodSay, false},
		{ExemptServices(HealthService, ReflectionService), "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", true},
		{ExemptServices(HealthService, ReflectionService), "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", false},
		{ExemptServices("/test.Echo/"), methodChat, true},
		{ExemptMethods(methodSay), methodSay, true},
		{ExemptMethods(methodSay), methodChat, false},
	} {
		if got := tt.f(tt.method); got != tt.want {
			t.Errorf("exempt %s: %v, want %v", tt.method, got, tt.want)
		}
	}
}

// TestLimiterBounded checks that a limiter that never answers cannot hold
// a call past LimiterTimeout, and that FailOpen serves the call.
func TestLimiterBounded(t *testing.T) {
	never := stuck{make(chan struct{})}
	defer close(never.release)
	for _, policy := range []ErrorPolicy{FailClosed, FailOpen} {
		it := mustNew(t, Config{Limiter: never, LimiterTimeout: 50 * time.Millisecond, MaxInFlight: 1, OnLimiterError: policy})
		srv := newServer(t, it, &echo{})
		start := time.Now()
		_, _, err := say(srv.dial("192.0.2.1:1"), "x")
		if policy == FailClosed && ReasonOf(err) != ReasonLimiterError {
			t.Errorf("FailClosed: %v, want limiter_error", err)
		}
		if policy == FailOpen && err != nil {
			t.Errorf("FailOpen: %v, want the call served", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("the call took %v", d)
		}
		if s := it.Stats(); s.LimiterError != 1 || s.Gate.InFlight != 0 {
			t.Errorf("policy %d: Stats %+v, gate %+v", policy, s, s.Gate)
		}
	}
}

// stuck is a limiter that never answers until released, ignoring its
// context.
type stuck struct{ release chan struct{} }

func (s stuck) Take(context.Context, string, int) (limits.Decision, error) {
	<-s.release
	return limits.Decision{Allowed: true}, nil
}

func (stuck) Refund(context.Context, string, limits.Decision) error { return nil }

// TestLocalBeforeSharedDuringOutage checks that a failure policy speaks for
// the failing limiter only: under FailOpen the local limiter in front of
// it keeps counting and refusing, and the shared one is not asked about a
// call the local one refuses; under FailClosed the refusal gives the
// local charge back.
func TestLocalBeforeSharedDuringOutage(t *testing.T) {
	ctx := peers(1)[0]
	for _, tt := range []struct {
		policy ErrorPolicy
		want   []string
		calls  int64
		left   int // the local bucket's Remaining afterwards
	}{
		{FailOpen, []string{"", "", ReasonRateLimited, ReasonRateLimited, ReasonRateLimited}, 2, 0},
		{FailClosed, []string{ReasonLimiterError, ReasonLimiterError, ReasonLimiterError, ReasonLimiterError, ReasonLimiterError}, 5, 2},
	} {
		var calls atomic.Int64
		shared := countingFail{&calls}
		it := mustNew(t, Config{Limiter: shared, Rate: limits.Limit{Events: 2, Period: time.Hour}, OnLimiterError: tt.policy})
		for i, want := range tt.want {
			if _, err := it.Unary(ctx, nil, benchInfo, noop); ReasonOf(err) != want {
				t.Errorf("policy %d: call %d: %v, want %q", tt.policy, i, err, want)
			}
		}
		if n := calls.Load(); n != tt.calls {
			t.Errorf("policy %d: the shared limiter was asked %d times, want %d", tt.policy, n, tt.calls)
		}
		if p := it.rates[0].Pre.Peek(it.clientKey(ctx)); p.Remaining != tt.left {
			t.Errorf("policy %d: local bucket afterwards: %+v, want Remaining %d", tt.policy, p, tt.left)
		}
	}
}

// countingFail is a Limiter that always fails, and counts its calls.
type countingFail struct{ n *atomic.Int64 }

func (f countingFail) Take(context.Context, string, int) (limits.Decision, error) {
	f.n.Add(1)
	return limits.Decision{}, errors.New("store unreachable")
}

func (countingFail) Refund(context.Context, string, limits.Decision) error { return nil }

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
		for _, policy := range []ErrorPolicy{FailClosed, FailOpen} {
			var logs bytes.Buffer
			it := mustNew(t, Config{Limiter: refusedAtDeadline{100 * time.Millisecond}, LimiterTimeout: 100 * time.Millisecond,
				OnLimiterError: policy, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			const n = 20
			for range n {
				_, err := it.Unary(ctx, nil, benchInfo, noop)
				if want := map[ErrorPolicy]string{FailClosed: ReasonLimiterError, FailOpen: ""}[policy]; ReasonOf(err) != want {
					t.Errorf("policy %d: %v, want %q", policy, err, want)
				}
			}
			if s := it.Stats(); s.LimiterError != n {
				t.Errorf("policy %d: %d limiter errors counted, want %d", policy, s.LimiterError, n)
			}
			var got int
			for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				var entry map[string]any
				if err := json.Unmarshal([]byte(line), &entry); err != nil {
					t.Fatal(err)
				}
				e, _ := entry["error"].(string)
				if e == "" {
					continue // the refusal's own entry
				}
				got++
				if !strings.Contains(e, "connection refused") {
					t.Errorf("policy %d: logged %q, want the limiter's cause", policy, e)
				}
			}
			if got < n {
				t.Errorf("policy %d: %d errors logged, want %d", policy, got, n)
			}
		}
	})
}
