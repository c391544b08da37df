package httplimit

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
)

// addressMultiplier is the address bucket's scale with a caller key when
// Limits.AddressMultiplier is 0.
const addressMultiplier = 4

// TestSessionRotationFloodKeepsTable has one address send a new session
// cookie with every request, far past its address limit, and checks that
// it cannot fill the caller-key table: a new user elsewhere is still
// served, and the table holds no more keys than the address was allowed.
func TestSessionRotationFloodKeepsTable(t *testing.T) {
	m := mustNew(t, Config{Limits: admit.Config{
		Rate:      limits.Limit{Events: 1, Period: time.Minute},
		CallerKey: "cookie:s",
		MaxKeys:   20,
	}})
	h := m.Handler(ok)
	served := 0
	for i := range 500 {
		if w := serve(h, "203.0.113.9:4000", "/", "Cookie", fmt.Sprintf("s=rot%d", i)); w.Code == 200 {
			served++
		}
	}
	if served != addressMultiplier {
		t.Errorf("rotating address: %d served, want its address allowance %d", served, addressMultiplier)
	}
	keys := map[string]int{}
	for _, p := range m.Stats().Policies {
		keys[p.Name] = p.Keys
	}
	if keys["default"] != addressMultiplier {
		t.Errorf("caller keys held after the flood: %v, want %d for default, the requests the address allowed", keys, addressMultiplier)
	}
	for i := range 5 {
		w := serve(h, fmt.Sprintf("192.0.2.%d:1000", 10+i), "/", "Cookie", fmt.Sprintf("s=new%d", i))
		if w.Code != 200 {
			t.Errorf("new user %d after the flood: %d %s", i, w.Code, w.Body.String())
		}
	}
}

// TestAddressRefusalLeavesSessionWhole exhausts an address with other
// sessions, then sends a session's request from it: refused by the
// address bucket, it must not have spent the session's own bucket.
func TestAddressRefusalLeavesSessionWhole(t *testing.T) {
	m := mustNew(t, Config{Limits: admit.Config{
		Rate:              limits.Limit{Events: 2, Period: time.Hour},
		CallerKey:         "cookie:s",
		AddressMultiplier: 1,
	}})
	h := m.Handler(ok)
	for _, s := range []string{"s=y", "s=z"} {
		if w := serve(h, "198.51.100.1:1", "/", "Cookie", s); w.Code != 200 {
			t.Fatalf("%s: %d", s, w.Code)
		}
	}
	for range 3 {
		if w := serve(h, "198.51.100.1:1", "/", "Cookie", "s=x"); w.Code != 429 {
			t.Fatalf("x from the exhausted address: %d, want 429", w.Code)
		}
	}
	for i := range 2 {
		if w := serve(h, "198.51.100.2:1", "/", "Cookie", "s=x"); w.Code != 200 {
			t.Errorf("x from a fresh address, request %d: %d %s; want its session bucket whole", i, w.Code, w.Body.String())
		}
	}
}

// TestConcurrencyRefusalKeepsRateQuota holds one request of a client in
// progress, has its next requests refused by the per-client cap, and
// checks that they did not spend its rate quota.
func TestConcurrencyRefusalKeepsRateQuota(t *testing.T) {
	release, entered := make(chan struct{}), make(chan struct{})
	m := mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 3, Period: time.Hour}, MaxInFlightPerClient: 1}})
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
	}))
	done := make(chan int)
	go func() { done <- serve(h, "192.0.2.1:1", "/slow").Code }()
	<-entered
	for range 5 {
		if w := serve(h, "192.0.2.1:2", "/"); w.Code != 429 || reasonOf(t, w) != "concurrency_limited" {
			t.Fatalf("while one is in progress: %d %s", w.Code, w.Body.String())
		}
	}
	close(release)
	if code := <-done; code != 200 {
		t.Fatalf("the slow request: %d", code)
	}
	for i, want := range []int{200, 200, 429} {
		if w := serve(h, "192.0.2.1:3", "/"); w.Code != want {
			t.Errorf("request %d after the slow one: %d, want %d (3 a hour, 1 spent)", i, w.Code, want)
		}
	}
}

// TestPerClientConcurrencyExact has thousands of clients each hold one
// request at once under a cap of one per client: none may be refused, as
// clients are counted each on its own.
func TestPerClientConcurrencyExact(t *testing.T) {
	const clients = 5000
	var arrived sync.WaitGroup
	arrived.Add(clients)
	release := make(chan struct{})
	m := mustNew(t, Config{Limits: admit.Config{MaxInFlightPerClient: 1}})
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		<-release
	}))
	var refused atomic.Int64
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			w := serve(h, fmt.Sprintf("10.%d.%d.%d:1", i>>16&255, i>>8&255, i&255), "/")
			if w.Code != 200 {
				refused.Add(1)
				arrived.Done()
			}
		})
	}
	arrived.Wait()
	close(release)
	wg.Wait()
	if n := refused.Load(); n != 0 {
		t.Errorf("%d of %d clients refused while each had one request in progress", n, clients)
	}
}

// stuck is a limiter that never answers until released: it ignores its
// context, as a buggy or wedged custom limiter might.
type stuck struct{ release chan struct{} }

func (s stuck) Take(context.Context, string, int) (limits.Decision, error) {
	<-s.release
	return limits.Decision{Allowed: true}, nil
}

func (stuck) Refund(context.Context, string, limits.Decision) error { return nil }

// TestTimeoutBoundsLimiter checks that a limiter that never answers cannot
// hold a request, or its place in the gate, past the deadline.
func TestTimeoutBoundsLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := stuck{make(chan struct{})}
		defer close(l.release)
		m := mustNew(t, Config{Limits: admit.Config{Limiters: named(l), Limiter: "l", MaxInFlight: 1, Timeout: time.Second}})
		h := m.Handler(ok)
		for i := range 3 {
			start := time.Now()
			w := serve(h, "192.0.2.1:1", "/")
			if w.Code != 503 || reasonOf(t, w) != "limiter_error" {
				t.Errorf("request %d: %d %s, want 503 limiter_error", i, w.Code, w.Body.String())
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("request %d took %v, past the 1s deadline", i, d)
			}
		}
		if s := m.Stats(); s.Policies[0].Requests[admit.LimiterError] != 3 || s.Gate.InFlight != 0 {
			t.Errorf("Stats %+v, gate %+v: want 3 limiter errors and the gate empty", s.Policies, s.Gate)
		}
	})
}

// fixed is a limiter that answers every request with the same decision.
type fixed struct{ d limits.Decision }

func (f fixed) Take(context.Context, string, int) (limits.Decision, error) { return f.d, nil }

func (fixed) Refund(context.Context, string, limits.Decision) error { return nil }

// TestRefusalsFromDecisions checks that a refusal's reason, Retry-After
// and RateLimit fields come from the deciding limiter's Decision: a
// request that can never pass gets no Retry-After promising otherwise.
func TestRefusalsFromDecisions(t *testing.T) {
	above := limits.Decision{Reason: limits.ReasonCostAboveBurst, Limit: 5, Period: time.Minute, Burst: 5, Cost: 9, Remaining: 2, ResetAfter: 36 * time.Second, At: time.Now()}
	m := mustNew(t, Config{Limits: admit.Config{Limiters: named(fixed{above}), Limiter: "l"}})
	w := serve(m.Handler(ok), "192.0.2.1:1", "/")
	if w.Code != 429 || reasonOf(t, w) != "cost_above_burst" {
		t.Errorf("cost above the burst: %d, reason %q, want 429 cost_above_burst", w.Code, reasonOf(t, w))
	}
	if got := w.Header().Get("Retry-After"); got != "" {
		t.Errorf("cost above the burst: Retry-After %q, want none", got)
	}
	if got := w.Header().Get("RateLimit"); got != `"default";r=2;t=36` {
		t.Errorf("cost above the burst: RateLimit %q", got)
	}

	limited := limits.Decision{Reason: limits.ReasonRateLimited, Limit: 5, Period: time.Minute, Burst: 5, Cost: 1, RetryAfter: 2500 * time.Millisecond, ResetAfter: time.Minute, At: time.Now()}
	m = mustNew(t, Config{Limits: admit.Config{Limiters: named(fixed{limited}), Limiter: "l"}})
	w = serve(m.Handler(ok), "192.0.2.1:1", "/")
	if w.Code != 429 || w.Header().Get("Retry-After") != "3" || w.Header().Get("RateLimit") != `"default";r=0;t=3` {
		t.Errorf("rate limited: %d, Retry-After %q, RateLimit %q; want 429, 3 and t=3", w.Code, w.Header().Get("Retry-After"), w.Header().Get("RateLimit"))
	}
}

// TestRetryAfterNeverWraps has a limiter refuse with a retry delay near
// the largest Duration: Retry-After must still be a count of seconds no
// earlier than the delay, and agree with the RateLimit field's t.
func TestRetryAfterNeverWraps(t *testing.T) {
	for _, retry := range []time.Duration{math.MaxInt64, math.MaxInt64 - time.Second/2} {
		d := limits.Decision{Reason: limits.ReasonRateLimited, Limit: 5, Period: time.Minute, Burst: 5, Cost: 1, RetryAfter: retry, ResetAfter: time.Minute, At: time.Now()}
		m := mustNew(t, Config{Limits: admit.Config{Limiters: named(fixed{d}), Limiter: "l"}})
		w := serve(m.Handler(ok), "192.0.2.1:1", "/")
		want := fmt.Sprint(int64(math.MaxInt64) / int64(time.Second))
		if got := w.Header().Get("Retry-After"); got != want {
			t.Errorf("RetryAfter %d: Retry-After %q, want %s", retry, got, want)
		}
		if got := w.Header().Get("RateLimit"); got != `"default";r=0;t=`+want {
			t.Errorf("RetryAfter %d: RateLimit %q, want t=%s", retry, got, want)
		}
	}
}

// TestKeylessRefusalNamesItsPolicy checks that a request without a caller
// key, refused by the bucket keyless requests share per address, is not
// reported under the caller key's policy, which it never used.
func TestKeylessRefusalNamesItsPolicy(t *testing.T) {
	m := mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 1, Period: time.Hour}, CallerKey: "X-Api-Key", PolicyName: "apikey"}})
	h := m.Handler(ok)
	serve(h, "192.0.2.1:1", "/")
	w := serve(h, "192.0.2.1:1", "/")
	if w.Code != 429 {
		t.Fatalf("second keyless request: %d", w.Code)
	}
	p := problemOf(t, w)
	if len(p.Violated) != 1 || p.Violated[0] == "apikey" {
		t.Fatalf("keyless refusal names %q, want its own policy", p.Violated)
	}
	if !strings.HasPrefix(w.Header().Get("RateLimit"), fmt.Sprintf("%q;", p.Violated[0])) {
		t.Errorf("RateLimit %q does not name the violated policy %q", w.Header().Get("RateLimit"), p.Violated)
	}
}

// TestResetWithinWindow checks that a key within its quota is never told
// to wait longer than the policy's window: 3 requests of 3 per 10s are
// back in exactly 10s.
func TestResetWithinWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 3, Period: 10 * time.Second}}})
		h := m.Handler(ok)
		var w *httptest.ResponseRecorder
		for range 3 {
			w = serve(h, "192.0.2.1:1", "/")
		}
		if got := w.Header().Get("RateLimit"); got != `"default";r=0;t=10` {
			t.Errorf("after 3 of 3/10s at one instant: RateLimit %q, want t=10 (w=10)", got)
		}
	})
}

// TestNewErrorsDeterministic checks that a config with several bad fields
// always gets the same error.
func TestNewErrorsDeterministic(t *testing.T) {
	cfg := Config{Limits: admit.Config{MaxInFlight: -1, QueueWait: -1, Timeout: -1, Burst: -1, MaxKeys: -1}}
	_, first := New(cfg)
	if first == nil {
		t.Fatal("New accepted negative counts")
	}
	for range 50 {
		if _, err := New(cfg); err == nil || err.Error() != first.Error() {
			t.Fatalf("New gave %v, then %v", first, err)
		}
	}
}

// slow is a limiter that answers after a delay, allowing, or gives up
// when its context ends.
type slow struct{ d time.Duration }

func (s slow) Take(ctx context.Context, _ string, n int) (limits.Decision, error) {
	select {
	case <-time.After(s.d):
		return limits.Decision{Allowed: true, Cost: n, Limit: 100, Period: time.Minute, Burst: 100, Remaining: 99, At: time.Now()}, nil
	case <-ctx.Done():
		return limits.Decision{}, ctx.Err()
	}
}

func (slow) Refund(context.Context, string, limits.Decision) error { return nil }

// TestTimeoutFromAdmission checks that Timeout bounds the whole request
// from the moment the gate lets it in, the rate layers' limiter calls
// included, not the handler alone: limiters that hang past their bound
// under FailOpen leave no time to the handler, which never starts, and
// slow limiters leave the handler only what remains of the deadline.
func TestTimeoutFromAdmission(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		never := stuck{make(chan struct{})}
		defer close(never.release)
		var started atomic.Int32
		m := mustNew(t, Config{Limits: admit.Config{Timeout: 100 * time.Millisecond, MaxInFlight: 2,
			Limiters: named(never), Limiter: "l", CallerKey: "X-Key", CallerLimiter: "l", FailOpen: true}})
		h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { started.Add(1) }))
		start := time.Now()
		w := serve(h, "192.0.2.1:1", "/", "X-Key", "k")
		if w.Code != 503 || reasonOf(t, w) != "request_timeout" || time.Since(start) != 100*time.Millisecond {
			t.Errorf("hanging limiters: %d %s after %v, want 503 request_timeout after 100ms", w.Code, w.Body.String(), time.Since(start))
		}
		synctest.Wait()
		if n := started.Load(); n != 0 {
			t.Errorf("the handler started %d times past the deadline", n)
		}
		if s := m.Stats(); s.Requests[admit.RequestTimeout] != 1 || s.Requests[admit.Allowed] != 0 || s.Gate.InFlight != 0 {
			t.Errorf("Stats %+v, gate %+v: want 1 timeout, none allowed, the gate empty", s.Requests, s.Gate)
		}

		deadlines := make(chan time.Time, 1)
		sl := slow{30 * time.Millisecond}
		m = mustNew(t, Config{Limits: admit.Config{Timeout: 100 * time.Millisecond,
			Limiters: named(sl), Limiter: "l", CallerKey: "X-Key", CallerLimiter: "l"}})
		h = m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d, _ := r.Context().Deadline()
			deadlines <- d
			<-r.Context().Done()
		}))
		start = time.Now()
		w = serve(h, "192.0.2.1:1", "/", "X-Key", "k")
		deadline := <-deadlines
		if w.Code != 503 || time.Since(start) != 100*time.Millisecond || !deadline.Equal(start.Add(100*time.Millisecond)) {
			t.Errorf("slow limiters: %d after %v, the handler's deadline %v after the start; want 503 after 100ms, deadline at 100ms",
				w.Code, time.Since(start), deadline.Sub(start))
		}
	})
}

// TestClientGoneWhileLimiterDecides has the client leave while a remote
// limiter decides its request: nobody is answered, the handler never
// runs, the local charge in front is given back and the place in the gate
// too, and no limiter failure is counted, as none failed.
func TestClientGoneWhileLimiterDecides(t *testing.T) {
	t.Skip("engine: a client leaving while a remote limiter decides is counted and logged as limiter_error (and answered 503 limiter_error when failing closed), where Admit's doc says it returns ctx's error")
	for _, failOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("FailOpen=%v", failOpen), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 1, Rate: limits.Limit{Events: 2, Period: time.Hour},
					Limiters: named(slow{100 * time.Millisecond}), Limiter: "l", FailOpen: failOpen}})
				called := false
				h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true }))
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(10*time.Millisecond, cancel) // the client leaves
				r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/", nil)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if called || w.Body.Len() != 0 || len(w.Header()) != 0 {
					t.Errorf("the handler called %v, answered %d %q %v; want nothing", called, w.Code, w.Body.String(), w.Header())
				}
				if s := m.Stats(); s.Gate.InFlight != 0 || s.Requests[admit.LimiterError] != 0 || s.Policies[0].Requests[admit.LimiterError] != 0 {
					t.Errorf("Stats %v, policy %v, gate %+v; want no limiter error and the gate empty", s.Requests, s.Policies[0].Requests, s.Gate)
				}
				// The local bucket of 2 an hour lost nothing.
				for i, want := range []int{200, 200, 429} {
					if w := serve(h, "192.0.2.1:1234", "/"); w.Code != want {
						t.Errorf("request %d after the client left: %d, want %d", i, w.Code, want)
					}
				}
			})
		})
	}
}
