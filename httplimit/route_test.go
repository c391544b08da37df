package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
)

// routes is a service of three routes behind one Middleware: a login
// limited per address, an API limited per key, and uploads that cost
// their size in megabytes.
func routes(t *testing.T, lim admit.Config) (*Middleware, http.Handler) {
	lim.Policies = []admit.Policy{
		{Name: "login", Routes: []string{"/login"}, Rate: limits.Limit{Events: 2, Period: time.Minute}},
		{Name: "api", Routes: []string{"/api"}, Rate: limits.Limit{Events: 3, Period: time.Minute}, Key: "X-Api-Key"},
		{Name: "upload", Routes: []string{"/upload"}, Rate: limits.Limit{Events: 25, Period: time.Minute}},
	}
	m := mustNew(t, Config{Limits: lim, Cost: func(r *http.Request) int {
		n, _ := strconv.Atoi(r.URL.Query().Get("mb"))
		return n
	}})
	return m, m.Handler(ok)
}

func TestRoutePolicies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, h := routes(t, admit.Config{Rate: limits.Limit{Events: 100, Period: time.Minute}, MaxInFlight: 4})
		const a = "192.0.2.1:1"
		for i, want := range []int{200, 200, 429} {
			w := serve(h, a, "/login")
			if w.Code != want {
				t.Fatalf("login %d: %d", i, w.Code)
			}
			if i == 0 {
				if got := w.Header().Get("RateLimit-Policy"); got != `"default";q=100;w=60, "login";q=2;w=60` {
					t.Errorf("login: RateLimit-Policy %q, want both policies", got)
				}
				if got := w.Header().Get("RateLimit"); got != `"default";r=99;t=1, "login";r=1;t=30` {
					t.Errorf("login: RateLimit %q", got)
				}
			}
			if want == 429 {
				if p := problemOf(t, w); p.Reason != "rate_limited" || len(p.Violated) != 1 || p.Violated[0] != "login" {
					t.Errorf("login refusal: %+v", p)
				}
				if got := w.Header().Get("RateLimit"); got != `"login";r=0;t=30` {
					t.Errorf("login refusal: RateLimit %q, want the refusing policy only", got)
				}
			}
		}
		// The refused login gave its address charge back: 2 of 100 spent.
		if w := serve(h, a, "/"); w.Header().Get("RateLimit") != `"default";r=97;t=2` {
			t.Errorf("after a refused login: RateLimit %q, want r=97 (the refusal charged nothing)", w.Header().Get("RateLimit"))
		}
		// The API is limited per key, not per address.
		for _, key := range []string{"k1", "k2"} {
			for i, want := range []int{200, 200, 200, 429} {
				if w := serve(h, a, "/api", "X-Api-Key", key); w.Code != want {
					t.Errorf("api %s request %d: %d, want %d", key, i, w.Code, want)
				}
			}
		}
		// Uploads cost their size; one above the burst can never pass.
		if w := serve(h, a, "/upload?mb=20"); w.Code != 200 {
			t.Errorf("upload of 20: %d", w.Code)
		}
		if w := serve(h, a, "/upload?mb=10"); w.Code != 429 || w.Header().Get("Retry-After") != "12" {
			t.Errorf("upload of 10 with 5 left: %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
		}
		w := serve(h, a, "/upload?mb=30")
		if p := problemOf(t, w); w.Code != 429 || p.Reason != "cost_above_burst" || w.Header().Get("Retry-After") != "" {
			t.Errorf("upload of 30, above the burst of 25: %d %+v, Retry-After %q", w.Code, p, w.Header().Get("Retry-After"))
		}
		// The address bucket was charged the request's cost, and given back
		// what the refused uploads cost: 2 logins, 1 of /, 6 API calls
		// and an upload of 20.
		if w := serve(h, a, "/"); w.Header().Get("RateLimit") != `"default";r=70;t=18` {
			t.Errorf("after the uploads: RateLimit %q, want r=70", w.Header().Get("RateLimit"))
		}
		s := m.Stats()
		if r := s.Requests; r[admit.Allowed] != 11 || r[limits.ReasonRateLimited] != 4 || r[limits.ReasonCostAboveBurst] != 1 {
			t.Errorf("Stats %v: want 11 allowed, 4 rate limited, 1 above the burst", s.Requests)
		}
		want := map[string][2]uint64{"default": {16, 0}, "login": {2, 1}, "api": {6, 2}, "upload": {1, 2}}
		for _, p := range s.Policies {
			refused := p.Requests[limits.ReasonRateLimited] + p.Requests[limits.ReasonCostAboveBurst]
			if w, ok := want[p.Name]; !ok || p.Requests[admit.Allowed] != w[0] || refused != w[1] {
				t.Errorf("policy %s: %v, want allowed %d, refused %d", p.Name, p.Requests, w[0], w[1])
			}
			delete(want, p.Name)
		}
		if len(want) != 0 {
			t.Errorf("policies missing from Stats: %v", want)
		}
		wantRoutes := map[string][2]uint64{"/login": {2, 1}, "/api": {6, 2}, "/upload": {1, 2}, "other": {2, 0}}
		for _, r := range s.Routes {
			refused := r.Requests[limits.ReasonRateLimited] + r.Requests[limits.ReasonCostAboveBurst]
			if w, ok := wantRoutes[r.Route]; !ok || r.Requests[admit.Allowed] != w[0] || refused != w[1] {
				t.Errorf("route %s: %v, want allowed %d, refused %d", r.Route, r.Requests, w[0], w[1])
			}
			delete(wantRoutes, r.Route)
		}
		if len(wantRoutes) != 0 {
			t.Errorf("routes missing from Stats: %v", wantRoutes)
		}
	})
}

// TestRoutePatterns checks which policies a request takes: those of the
// patterns its route matches, exact paths, subtrees, wildcards of one
// segment and of the rest, and methods; none for a route no pattern
// matches.
func TestRoutePatterns(t *testing.T) {
	policy := func(name string, routes ...string) admit.Policy {
		return admit.Policy{Name: name, Routes: routes, Rate: limits.Limit{Events: 1, Period: time.Hour}}
	}
	m := mustNew(t, Config{Limits: admit.Config{Policies: []admit.Policy{
		policy("login", "/login"),
		policy("post-login", "POST /login"),
		policy("api", "/api/"),
		policy("user", "/users/{id}"),
		policy("user-login", "/users/{id}/login"),
		policy("files", "/files/{path...}"),
		policy("two", "/a", "/b/"),
	}}})
	h := m.Handler(ok)
	for i, tc := range []struct {
		method, path, policy string
	}{
		{"GET", "/login", "login"},
		{"POST", "/login", "login post-login"}, // both match: the method's is more specific
		{"GET", "/login/x", ""},
		{"GET", "/api/", "api"},
		{"GET", "/api/v1/things", "api"},
		{"GET", "/api", ""},
		{"GET", "/users/7", "user"},
		{"GET", "/users/7/", ""},
		{"GET", "/users/7/login", "user-login"},
		{"GET", "/users/7/login/x", ""},
		{"GET", "/users//login", ""},
		{"GET", "/files/", "files"},
		{"GET", "/files/a/b/c.txt", "files"},
		{"GET", "/files", ""},
		{"GET", "/a", "two"},
		{"GET", "/b/c", "two"},
		{"GET", "/", ""},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		r.RemoteAddr = fmt.Sprintf("192.0.2.%d:1", i+1) // a bucket of its own
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var items []string
		for _, p := range strings.Fields(tc.policy) {
			items = append(items, fmt.Sprintf("%q;q=1;w=3600", p))
		}
		want := strings.Join(items, ", ")
		if got := w.Header().Get("RateLimit-Policy"); w.Code != 200 || got != want {
			t.Errorf("%s %s: %d, RateLimit-Policy %q, want 200 and %q", tc.method, tc.path, w.Code, got, want)
		}
	}
}

// TestRoutesStack configures patterns that match the same routes and
// checks that a request takes the policies of every route it matches, each
// once, from the least specific to the most: fewer literal segments before
// more, a subtree before an end, none before a method, an exact path last.
func TestRoutesStack(t *testing.T) {
	policy := func(name string, routes ...string) admit.Policy {
		return admit.Policy{Name: name, Routes: routes, Rate: limits.Limit{Events: 1, Period: time.Hour}}
	}
	m := mustNew(t, Config{Limits: admit.Config{Policies: []admit.Policy{
		policy("everything", "/"),
		policy("users", "/users/{id}/"),
		policy("user", "/users/{id}"),
		policy("me", "/users/me"),
		policy("user-login", "/users/{id}/login"),
		policy("any-login", "/{what}/{id}/login"),
		policy("api", "/api/"),
		policy("v1", "/api/v1/"),
		policy("v1-items", "/api/v1/{item}"),
		policy("delete-items", "DELETE /api/v1/{item}"),
	}}})
	h := m.Handler(ok)
	for i, tc := range []struct {
		method, path string
		policies     []string
	}{
		{"GET", "/", []string{"everything"}},
		{"GET", "/nothing/else", []string{"everything"}},
		{"GET", "/users/7", []string{"everything", "user"}},
		{"GET", "/users/me", []string{"everything", "user", "me"}},
		{"GET", "/users/7/posts", []string{"everything", "users"}},
		{"GET", "/users/7/login", []string{"everything", "users", "any-login", "user-login"}},
		{"GET", "/groups/7/login", []string{"everything", "any-login"}},
		{"GET", "/api/v2/x", []string{"everything", "api"}},
		{"GET", "/api/v1/x/y", []string{"everything", "api", "v1"}},
		{"GET", "/api/v1/x", []string{"everything", "api", "v1", "v1-items"}},
		{"DELETE", "/api/v1/x", []string{"everything", "api", "v1", "v1-items", "delete-items"}},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		r.RemoteAddr = fmt.Sprintf("192.0.2.%d:1", i+1)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var want []string
		for _, p := range tc.policies {
			want = append(want, fmt.Sprintf("%q;q=1;w=3600", p))
		}
		if got := w.Header().Get("RateLimit-Policy"); w.Code != 200 || got != strings.Join(want, ", ") {
			t.Errorf("%s %s: %d, RateLimit-Policy %q, want 200 and %s", tc.method, tc.path, w.Code, got, strings.Join(want, ", "))
		}
	}
	// A policy given both a subtree and a route below it applies once.
	m = mustNew(t, Config{Limits: admit.Config{Policies: []admit.Policy{policy("api", "/api/", "/api/x")}}})
	w := serve(m.Handler(ok), "192.0.2.1:1", "/api/x")
	if got := w.Header().Get("RateLimit"); !strings.HasPrefix(got, `"api";r=0;`) || strings.Contains(got, ",") {
		t.Errorf("a policy of two matching routes: RateLimit %q, want it once", got)
	}
}

// TestRouteReleaseCapacity checks that a route's requests take the one
// gate of the Middleware, and that ReleaseCapacity in a route's handler
// frees the request's one place.
func TestRouteReleaseCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 1, Policies: []admit.Policy{
			{Name: "stream", Routes: []string{"/stream"}, Rate: limits.Limit{Events: 10, Period: time.Second}},
		}}})
		release := make(chan struct{})
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/stream" {
				ReleaseCapacity(w)
				<-release
			}
		}))
		done := make(chan int)
		go func() { done <- serve(h, "192.0.2.1:1", "/stream").Code }()
		synctest.Wait()
		if w := serve(h, "192.0.2.2:1", "/"); w.Code != 200 {
			t.Errorf("with the stream's place released: %d, want 200", w.Code)
		}
		if s := m.Stats(); s.Gate.Admitted != 2 || s.Gate.Max != 1 {
			t.Errorf("gate %+v: want one gate of 1 admitting both", s.Gate)
		}
		close(release)
		if code := <-done; code != 200 {
			t.Errorf("the stream: %d", code)
		}
	})
}

// TestRouteByAddressUnderGateOnly puts a policy keyed by address under a
// Middleware with a gate and no rate of its own: each client gets its own
// bucket, rather than all of them one.
func TestRouteByAddressUnderGateOnly(t *testing.T) {
	for _, routes := range [][]string{nil, {"/"}} {
		m := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 8, Policies: []admit.Policy{
			{Name: "route", Routes: routes, Rate: limits.Limit{Events: 1, Period: time.Hour}},
		}}})
		h := m.Handler(ok)
		for _, addr := range []string{"192.0.2.1:1", "192.0.2.2:1", "[2001:db8::1]:1"} {
			if w := serve(h, addr, "/"); w.Code != http.StatusOK {
				t.Errorf("routes %q: first request from %s: %d, want 200", routes, addr, w.Code)
			}
			if w := serve(h, addr, "/"); w.Code != http.StatusTooManyRequests {
				t.Errorf("routes %q: second request from %s: %d, want 429", routes, addr, w.Code)
			}
		}
	}
}

// TestRouteLimiterErrorDropsRateHeaders has a route's limiter fail after
// the address bucket charged: the 503 carries no RateLimit fields of the
// charge given back.
func TestRouteLimiterErrorDropsRateHeaders(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Minute} {
		m := mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 10, Period: time.Minute}, Timeout: timeout,
			Limiters: named(failing{}), Policies: []admit.Policy{{Name: "shared", Routes: []string{"/"}, Limiter: "l"}}}})
		w := serve(m.Handler(ok), "192.0.2.1:1", "/")
		if w.Code != http.StatusServiceUnavailable || reasonOf(t, w) != "limiter_error" {
			t.Fatalf("Timeout %v: %d %s, want 503 limiter_error", timeout, w.Code, w.Body.String())
		}
		for _, k := range []string{"Ratelimit", "Ratelimit-Policy"} {
			if v := w.Header().Values(k); len(v) > 0 {
				t.Errorf("Timeout %v: %s: %q on a limiter_error refusal", timeout, k, v)
			}
		}
	}
}

// TestRouteRefusalGivesBackEverything refuses in a route after the address
// and caller key buckets were charged, and checks that all of it comes
// back, with no per-client count left behind.
func TestRouteRefusalGivesBackEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mustNew(t, Config{Limits: admit.Config{
			Rate:                 limits.Limit{Events: 5, Period: time.Hour},
			CallerKey:            "X-Key",
			MaxInFlightPerClient: 1,
			Timeout:              time.Second,
			Policies:             []admit.Policy{{Name: "strict", Routes: []string{"/strict"}, Rate: limits.Limit{Events: 1, Period: time.Hour}}},
		}})
		h := m.Handler(ok)
		serve(h, "192.0.2.1:1", "/strict", "X-Key", "k")
		for range 3 {
			if w := serve(h, "192.0.2.1:1", "/strict", "X-Key", "k"); w.Code != 429 || problemOf(t, w).Violated[0] != "strict" {
				t.Fatalf("strict route: %d %s", w.Code, w.Body.String())
			}
		}
		// The address bucket (4 x 5 an hour) and the caller key's (5 an
		// hour) lost only the one served: the key's fields show the key
		// with 3 left, and a request without a key from the address, the
		// address with 17 left.
		w := serve(h, "192.0.2.1:1", "/", "X-Key", "k")
		if got := w.Header().Get("RateLimit"); w.Code != 200 || !strings.HasPrefix(got, `"default";r=3;`) {
			t.Errorf("after 3 refusals by the route: %d, RateLimit %q, want the key with 3 left", w.Code, got)
		}
		w = serve(h, "192.0.2.1:1", "/")
		if got := w.Header().Get("RateLimit"); w.Code != 200 || !strings.HasPrefix(got, `"address";r=17;`) {
			t.Errorf("after 3 refusals by the route: %d, RateLimit %q, want the address with 17 left", w.Code, got)
		}
		if s := m.Stats(); s.Requests[admit.Allowed] != 3 || s.Requests[limits.ReasonRateLimited] != 3 {
			t.Errorf("Stats %v", s.Requests)
		}
		if free := freeFor(t, m, "192.0.2.1:1", 1); free != 1 {
			t.Error("the client's count was not given back")
		}
	})
}

// slowRefuser is a limiter that refuses every request once released,
// telling entered when a call begins.
type slowRefuser struct{ entered, release chan struct{} }

func (s slowRefuser) Take(ctx context.Context, key string, n int) (limits.Decision, error) {
	s.entered <- struct{}{}
	<-s.release
	return limits.Decision{Reason: limits.ReasonRateLimited, Limit: 1, Period: time.Minute, Burst: 1, Cost: n, RetryAfter: time.Minute, At: time.Now()}, nil
}

func (slowRefuser) Refund(context.Context, string, limits.Decision) error { return nil }

// TestRoutePolicyBeforeConcurrency checks that a route's policies decide
// before per-client concurrency counts the request: while a login is
// being decided, by a limiter that takes its time and then refuses, the
// same client's other requests are served, not refused as
// concurrency_limited.
func TestRoutePolicyBeforeConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sr := slowRefuser{make(chan struct{}), make(chan struct{})}
		m := mustNew(t, Config{Limits: admit.Config{
			Rate:                 limits.Limit{Events: 100, Period: time.Minute},
			MaxInFlightPerClient: 1,
			Limiters:             map[string]limits.Limiter{"login": sr},
			Policies:             []admit.Policy{{Name: "login", Routes: []string{"/login"}, Limiter: "login"}},
		}})
		h := m.Handler(ok)
		done := make(chan *httptest.ResponseRecorder)
		go func() { done <- serve(h, "192.0.2.1:1000", "/login") }()
		<-sr.entered
		if w := serve(h, "192.0.2.1:1001", "/"); w.Code != 200 {
			t.Errorf("/ while /login is being decided: %d %s, want 200", w.Code, w.Body.String())
		}
		close(sr.release)
		w := <-done
		if w.Code != 429 || reasonOf(t, w) != "rate_limited" || problemOf(t, w).Violated[0] != "login" {
			t.Errorf("/login: %d %s, want 429 rate_limited by login", w.Code, w.Body.String())
		}
	})
}

// TestLocalBeforeShared puts a local limiter in front of a shared one:
// requests over the limit in this process never reach the shared one, and
// a refusal by the shared one gives the local charge back.
func TestLocalBeforeShared(t *testing.T) {
	shared := &callCounter{g: limits.NewGCRA(3, time.Hour)}
	m := mustNew(t, Config{Limits: admit.Config{Limiters: named(shared), Limiter: "l", Rate: limits.Limit{Events: 3, Period: time.Hour}}})
	h := m.Handler(ok)
	for i, want := range []int{200, 200, 200, 429, 429, 429} {
		if w := serve(h, "192.0.2.1:1", "/"); w.Code != want {
			t.Errorf("request %d: %d, want %d", i, w.Code, want)
		}
	}
	if n := shared.calls(); n != 3 {
		t.Errorf("the shared limiter was asked %d times, want 3", n)
	}
	// Refused by the shared limiter (other processes spent the key): the
	// local charge is given back, so that once the shared bucket is whole
	// again the local one allows its 3.
	shared.g.AllowN("a:192.0.2.2/32", 3)
	if w := serve(h, "192.0.2.2:1", "/"); w.Code != 429 {
		t.Fatalf("key spent elsewhere: %d", w.Code)
	}
	shared.g.Reset("a:192.0.2.2/32")
	for i, want := range []int{200, 200, 200, 429} {
		if w := serve(h, "192.0.2.2:1", "/"); w.Code != want {
			t.Errorf("after a shared refusal, request %d: %d, want %d", i, w.Code, want)
		}
	}
}

// callCounter is a Limiter that counts the calls of Take.
type callCounter struct {
	g  *limits.GCRA
	mu sync.Mutex
	n  int
}

func (c *callCounter) Take(ctx context.Context, key string, n int) (limits.Decision, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.g.Take(ctx, key, n)
}

func (c *callCounter) Refund(ctx context.Context, key string, d limits.Decision) error {
	return c.g.Refund(ctx, key, d)
}

func (c *callCounter) calls() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// TestPolicyErrors checks that New refuses a policy that cannot be
// honoured, with an error naming the policy and what is wrong with it.
func TestPolicyErrors(t *testing.T) {
	rate := limits.Limit{Events: 1, Period: time.Second}
	for _, tt := range []struct {
		cfg          admit.Config
		prefix, want string
	}{
		{admit.Config{Policies: []admit.Policy{{Rate: rate}}}, `Policies[0] ("")`, "needs a Name"},
		{admit.Config{Policies: []admit.Policy{{Name: "x"}}}, `Policies[0] ("x")`, "needs Rate, Quota or Limiter"},
		{admit.Config{Policies: []admit.Policy{{Name: "x", Rate: limits.Limit{Events: 0, Period: time.Second}}}}, `Policies[0] ("x")`, "Rate: limits: invalid limit: events must be >= 1, got 0"},
		{admit.Config{Policies: []admit.Policy{{Name: "x", Rate: rate, Burst: -1}}}, `Policies[0] ("x")`, "must not be negative"},
		{admit.Config{Policies: []admit.Policy{{Name: "x", Rate: rate, Key: "K"}}}, `Policies[0] ("x")`, "a policy with a Key needs an address bucket in front of it (Config.Rate or Config.Limiter), or TrustedKeys"},
		{admit.Config{MaxInFlight: 8, Policies: []admit.Policy{{Name: "x", Routes: []string{"/api/"}, Rate: rate, Key: "cookie:s"}}}, `Policies[0] ("x")`, "a policy with a Key needs an address bucket in front of it (Config.Rate or Config.Limiter), or TrustedKeys"},
		{admit.Config{Rate: rate, Policies: []admit.Policy{{Name: "default", Rate: rate}}}, `Policies[0] ("default")`, "there already is a policy of that name"},
		{admit.Config{Policies: []admit.Policy{{Name: "café", Rate: rate}}}, `Policies[0] ("café")`, "must be printable ASCII"},
		{admit.Config{Policies: []admit.Policy{{Name: "x", Rate: rate, Routes: []string{"login"}}}}, `Policies[0] ("x").Routes[0]`, `route "login": want a path starting with /`},
		{admit.Config{Policies: []admit.Policy{{Name: "x", Limiter: "shared"}}}, `Policies[0] ("x")`, `no limiter named "shared" in Limiters`},
	} {
		_, err := New(Config{Limits: tt.cfg})
		if prefix := "httplimit: Limits: " + tt.prefix + ": "; err == nil || !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want %q ... %q", tt.cfg, err, prefix, tt.want)
		}
	}
	// With an address bucket in front, a policy keyed by a field is
	// accepted.
	if _, err := New(Config{Limits: admit.Config{Rate: rate, Policies: []admit.Policy{{Name: "x", Rate: rate, Key: "K"}}}}); err != nil {
		t.Errorf("a keyed policy behind an address bucket: %v", err)
	}
}

// failCounter is a Limiter that fails while failing is set, and counts
// its calls; otherwise it decides with g.
type failCounter struct {
	n       atomic.Int64
	failing atomic.Bool
	g       *limits.GCRA
}

func newFailCounter() *failCounter {
	f := &failCounter{g: limits.NewGCRA(100, time.Hour)}
	f.failing.Store(true)
	return f
}

func (f *failCounter) Take(ctx context.Context, key string, n int) (limits.Decision, error) {
	f.n.Add(1)
	if f.failing.Load() {
		return limits.Decision{}, errors.New("store unreachable")
	}
	return f.g.Take(ctx, key, n)
}

func (f *failCounter) Refund(ctx context.Context, key string, d limits.Decision) error {
	return f.g.Refund(ctx, key, d)
}

// TestLocalBeforeSharedDuringOutage checks that a failure policy speaks for
// the failing limiter only: under FailOpen the local limiter in front of
// it keeps counting and refusing, and the shared one is not asked about a
// request the local one refuses; under FailClosed the refusal gives the
// local charge back.
func TestLocalBeforeSharedDuringOutage(t *testing.T) {
	for _, tt := range []struct {
		failOpen bool
		want     []int
		calls    int64
		after    []int // once the shared limiter is back
	}{
		{true, []int{200, 200, 429, 429, 429}, 2, []int{429}},
		{false, []int{503, 503, 503, 503, 503}, 5, []int{200, 200, 429}},
	} {
		shared := newFailCounter()
		m := mustNew(t, Config{Limits: admit.Config{Limiters: named(shared), Limiter: "l", Rate: limits.Limit{Events: 2, Period: time.Hour}, FailOpen: tt.failOpen}})
		h := m.Handler(ok)
		for i, want := range tt.want {
			if w := serve(h, "192.0.2.1:1", "/"); w.Code != want {
				t.Errorf("FailOpen %v: request %d: %d, want %d", tt.failOpen, i, w.Code, want)
			}
		}
		if n := shared.n.Load(); n != tt.calls {
			t.Errorf("FailOpen %v: the shared limiter was asked %d times, want %d", tt.failOpen, n, tt.calls)
		}
		// What the local bucket has left shows once the shared one is back.
		shared.failing.Store(false)
		for i, want := range tt.after {
			if w := serve(h, "192.0.2.1:1", "/"); w.Code != want {
				t.Errorf("FailOpen %v: after the outage, request %d: %d, want %d", tt.failOpen, i, w.Code, want)
			}
		}
	}

	// Served under FailOpen, then refused by a later layer: the local charge
	// is given back, as any other.
	synctest.Test(t, func(t *testing.T) {
		block := make(chan struct{})
		shared := newFailCounter()
		m := mustNew(t, Config{Limits: admit.Config{Limiters: named(shared), Limiter: "l", Rate: limits.Limit{Events: 2, Period: time.Hour},
			FailOpen: true, MaxInFlightPerClient: 1}})
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				<-block
			}
		}))
		go serve(h, "192.0.2.1:1", "/slow")
		synctest.Wait()
		if w := serve(h, "192.0.2.1:1", "/"); w.Code != 429 || reasonOf(t, w) != "concurrency_limited" {
			t.Errorf("second request: %d %s, want 429 concurrency_limited", w.Code, w.Body.String())
		}
		close(block)
		synctest.Wait()
		// The local bucket spent 1 of its 2, on /slow.
		for i, want := range []int{200, 429} {
			if w := serve(h, "192.0.2.1:1", "/"); w.Code != want {
				t.Errorf("after a concurrency refusal, request %d: %d, want %d", i, w.Code, want)
			}
		}
	})
}

// TestRouteOrder checks that a route's policies run after the address
// bucket and before per-client concurrency: a login refused by its policy
// while the client has a request in progress is refused as rate_limited,
// an API call its policy allows is then refused as concurrency_limited,
// with its charges given back.
func TestRouteOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mustNew(t, Config{Limits: admit.Config{
			Rate:                 limits.Limit{Events: 10, Period: time.Hour},
			MaxInFlightPerClient: 1,
			Policies: []admit.Policy{
				{Name: "login", Routes: []string{"/login"}, Rate: limits.Limit{Events: 1, Period: time.Hour}},
				{Name: "api", Routes: []string{"/api"}, Rate: limits.Limit{Events: 10, Period: time.Hour}},
			},
		}})
		block := make(chan struct{})
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				<-block
			}
		}))
		type outcome struct {
			code                      int
			reason, retry, rateFields string
		}
		var got []outcome
		const a = "192.0.2.1:1"
		record := func(w *httptest.ResponseRecorder) {
			got = append(got, outcome{w.Code, reasonOf(t, w), w.Header().Get("Retry-After"), w.Header().Get("RateLimit")})
		}
		record(serve(h, a, "/login"))
		go serve(h, a, "/slow")
		synctest.Wait()
		record(serve(h, a, "/login"))
		record(serve(h, a, "/api")) // allowed by its policy, then refused: its charge given back
		close(block)
		synctest.Wait()
		record(serve(h, a, "/api"))
		want := []outcome{
			{200, "", "", `"default";r=9;t=360, "login";r=0;t=3600`},
			{429, "rate_limited", "3600", `"login";r=0;t=3600`},
			{429, "concurrency_limited", "1", ""},
			{200, "", "", `"default";r=7;t=1080, "api";r=9;t=360`},
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("request %d: %+v, want %+v", i, got[i], want[i])
			}
		}
		wantPolicies := map[string][2]uint64{"default": {5, 0}, "login": {1, 1}, "api": {2, 0}}
		for _, p := range m.Stats().Policies {
			if w := wantPolicies[p.Name]; p.Requests[admit.Allowed] != w[0] || p.Requests[limits.ReasonRateLimited] != w[1] {
				t.Errorf("policy %s: %v, want allowed %d, refused %d", p.Name, p.Requests, w[0], w[1])
			}
		}
	})
}

// TestRoutesAsServeMux serves requests through net/http's ServeMux with
// the same patterns as the policies' routes, and checks that the policy of
// the most specific route is that of the pattern the mux chose, for every
// request the mux served: HEAD takes GET's patterns, escaped segments are
// matched unescaped, and "{$}" ends a path.
func TestRoutesAsServeMux(t *testing.T) {
	patterns := []string{"/", "/{$}", "GET /search", "/api/", "/api/{id}", "/api/export", "POST /login",
		"/files/{path...}", "/users/{id}/posts", "/a/{$}"}
	var policies []admit.Policy
	for i, p := range patterns {
		policies = append(policies, admit.Policy{Name: fmt.Sprint("p", i), Routes: []string{p}, Rate: limits.Limit{Events: 100, Period: time.Hour}})
	}
	m := mustNew(t, Config{Limits: admit.Config{Policies: policies}})
	mux := http.NewServeMux()
	for _, p := range patterns {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) { w.Header().Set("X-Pattern", r.Pattern) })
	}
	h := m.Handler(mux)
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, tc := range []struct{ method, path string }{
		{"GET", "/"}, {"GET", "/x"}, {"HEAD", "/search"}, {"GET", "/search"}, {"POST", "/search"},
		{"GET", "/api/"}, {"GET", "/api/7"}, {"GET", "/api/x%2Fy"}, {"GET", "/api/export"}, {"HEAD", "/api/export"},
		{"GET", "/%61pi/export"}, {"GET", "/api%2Fexport"}, {"GET", "/api/ex%70ort"}, {"POST", "/login"}, {"GET", "/login"},
		{"GET", "/files/a/b"}, {"GET", "/files/a%2Fb"}, {"GET", "/users/7/posts"}, {"GET", "/users/a%2Fb/posts"},
		{"GET", "/a/"}, {"GET", "/a/b"},
	} {
		req, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		pattern := res.Header.Get("X-Pattern")
		if res.StatusCode != http.StatusOK || pattern == "" {
			t.Fatalf("%s %s: %d, pattern %q", tc.method, tc.path, res.StatusCode, pattern)
		}
		items := strings.Split(res.Header.Get("RateLimit-Policy"), ", ")
		last := strings.SplitN(items[len(items)-1], ";", 2)[0]
		if want := fmt.Sprintf("%q", policies[slices.Index(patterns, pattern)].Name); last != want {
			t.Errorf("%s %s: the mux chose %q (policy %s), the most specific route's policy is %s (RateLimit-Policy %q)",
				tc.method, tc.path, pattern, want, last, res.Header.Get("RateLimit-Policy"))
		}
	}
}
