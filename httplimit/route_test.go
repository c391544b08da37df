package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitsgo/limits"
)

// mustWith returns m.With(policies...), failing the test on an error.
func mustWith(t testing.TB, m *Middleware, policies ...Policy) *Middleware {
	t.Helper()
	r, err := m.With(policies...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// routes is a service of three routes behind one Middleware: a login
// limited per address, an API limited per key, and uploads that cost 10.
func routes(t *testing.T, cfg Config) (*Middleware, http.Handler) {
	m := mustNew(t, cfg)
	login := mustWith(t, m, Policy{Name: "login", Rate: limits.Limit{Events: 2, Period: time.Minute}})
	api := mustWith(t, m, Policy{Name: "api", Rate: limits.Limit{Events: 3, Period: time.Minute}, Key: HeaderKey("X-Api-Key")})
	upload := mustWith(t, m, Policy{
		Name: "upload", Rate: limits.Limit{Events: 25, Period: time.Minute},
		Cost: func(r *http.Request) int { n, _ := strconv.Atoi(r.URL.Query().Get("mb")); return n },
	})
	mux := http.NewServeMux()
	mux.Handle("/login", login.Handler(ok))
	mux.Handle("/api", api.Handler(ok))
	mux.Handle("/upload", upload.Handler(ok))
	mux.Handle("/", ok)
	return m, m.Handler(mux)
}

func TestRoutePolicies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, h := routes(t, Config{Rate: limits.Limit{Events: 100, Period: time.Minute}, MaxInFlight: 4})
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
				if p := problemOf(t, w); p.Reason != ReasonRateLimited || len(p.Violated) != 1 || p.Violated[0] != "login" {
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
		if p := problemOf(t, w); w.Code != 429 || p.Reason != ReasonCostAboveBurst || w.Header().Get("Retry-After") != "" {
			t.Errorf("upload of 30, above the burst of 25: %d %+v, Retry-After %q", w.Code, p, w.Header().Get("Retry-After"))
		}
		s := m.Stats()
		if s.Allowed != 10 || s.RateLimited != 4 || s.CostAboveBurst != 1 {
			t.Errorf("Stats %+v: want 10 allowed, 4 rate limited, 1 above the burst", s)
		}
		want := map[string][2]uint64{"default": {15, 0}, "login": {2, 1}, "api": {6, 2}, "upload": {1, 2}}
		for _, p := range s.Policies {
			if w, ok := want[p.Name]; !ok || p.Allowed != w[0] || p.RateLimited+p.CostAboveBurst != w[1] {
				t.Errorf("policy %+v, want allowed %d, refused %d", p, w[0], w[1])
			}
			delete(want, p.Name)
		}
		if len(want) != 0 {
			t.Errorf("policies missing from Stats: %v", want)
		}
	})
}

// TestRoutesShareOneGate checks that route Middlewares use the one gate of
// the Middleware they were made from, and that ReleaseCapacity frees the
// request's one place.
func TestRoutesShareOneGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mustNew(t, Config{MaxInFlight: 1})
		route := mustWith(t, m, Policy{Name: "stream", Rate: limits.Limit{Events: 10, Period: time.Second}})
		release := make(chan struct{})
		stream := route.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ReleaseCapacity(r)
			<-release
		}))
		mux := http.NewServeMux()
		mux.Handle("/stream", stream)
		mux.Handle("/", ok)
		h := m.Handler(mux)
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
		<-done
		// A route served without m around it applies every layer itself.
		if w := serve(stream, "192.0.2.3:1", "/stream"); w.Code != 200 || m.Stats().Gate.Admitted != 3 {
			t.Errorf("route alone: %d, gate %+v", w.Code, m.Stats().Gate)
		}
	})
}

// TestRouteByAddressUnderGateOnly puts a route policy keyed by address
// under a Middleware with a gate and no rate of its own: each client gets
// its own bucket, rather than all of them one.
func TestRouteByAddressUnderGateOnly(t *testing.T) {
	m := mustNew(t, Config{MaxInFlight: 8})
	route := mustWith(t, m, Policy{Name: "route", Rate: limits.Limit{Events: 1, Period: time.Hour}})
	h := m.Handler(route.Handler(ok))
	for _, addr := range []string{"192.0.2.1:1", "192.0.2.2:1", "[2001:db8::1]:1"} {
		if w := serve(h, addr, "/"); w.Code != http.StatusOK {
			t.Errorf("first request from %s: %d, want 200", addr, w.Code)
		}
		if w := serve(h, addr, "/"); w.Code != http.StatusTooManyRequests {
			t.Errorf("second request from %s: %d, want 429", addr, w.Code)
		}
	}
}

// TestRouteLimiterErrorDropsRateHeaders has a route's limiter fail after
// the address bucket charged: the 503 carries no RateLimit fields of the
// charge given back.
func TestRouteLimiterErrorDropsRateHeaders(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Minute} {
		m := mustNew(t, Config{Rate: limits.Limit{Events: 10, Period: time.Minute}, Timeout: timeout})
		route := mustWith(t, m, Policy{Name: "shared", Limiter: failing{}})
		w := serve(m.Handler(route.Handler(ok)), "192.0.2.1:1", "/")
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("Timeout %v: status %d, want 503", timeout, w.Code)
		}
		for _, k := range []string{"Ratelimit", "Ratelimit-Policy"} {
			if v := w.Header().Values(k); len(v) > 0 {
				t.Errorf("Timeout %v: %s: %q on a limiter_error refusal", timeout, k, v)
			}
		}
	}
}

// TestRouteRefusalGivesBackEverything refuses in a route after the address
// and caller key buckets and the per-client count were taken, and checks
// that all of it comes back.
func TestRouteRefusalGivesBackEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mustNew(t, Config{
			Rate:                 limits.Limit{Events: 5, Period: time.Hour},
			CallerKey:            HeaderKey("X-Key"),
			MaxInFlightPerClient: 1,
			Timeout:              time.Second,
		})
		strict := mustWith(t, m, Policy{Name: "strict", Rate: limits.Limit{Events: 1, Period: time.Hour}})
		mux := http.NewServeMux()
		mux.Handle("/strict", strict.Handler(ok))
		mux.Handle("/", ok)
		h := m.Handler(mux)
		serve(h, "192.0.2.1:1", "/strict", "X-Key", "k")
		for range 3 {
			if w := serve(h, "192.0.2.1:1", "/strict", "X-Key", "k"); w.Code != 429 {
				t.Fatalf("strict route: %d", w.Code)
			}
		}
		// The caller key's bucket (5 an hour) lost only the one served.
		w := serve(h, "192.0.2.1:1", "/", "X-Key", "k")
		if got := w.Header().Get("RateLimit"); !strings.Contains(got, `"default";r=3;`) {
			t.Errorf("after 3 refusals by the route: RateLimit %q, want the key with 3 left", got)
		}
		if s := m.Stats(); s.Allowed != 2 || s.RateLimited != 3 || m.c.slots.Len() != 0 {
			t.Errorf("Stats %+v, %d clients counted in progress", s, m.c.slots.Len())
		}
	})
}

// TestLocalBeforeShared puts a local limiter in front of a shared one:
// requests over the limit in this process never reach the shared one.
func TestLocalBeforeShared(t *testing.T) {
	shared := &callCounter{g: limits.NewGCRA(3, time.Hour)}
	m := mustNew(t, Config{Limiter: shared, Rate: limits.Limit{Events: 3, Period: time.Hour}})
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
	// local charge is given back.
	shared.g.AllowN("a:192.0.2.2/32", 3)
	if w := serve(h, "192.0.2.2:1", "/"); w.Code != 429 {
		t.Fatalf("key spent elsewhere: %d", w.Code)
	}
	if p := m.rates[0].Pre.Peek("a:192.0.2.2/32"); p.Remaining != 3 {
		t.Errorf("local bucket after a shared refusal: %+v", p)
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

func TestWithErrors(t *testing.T) {
	m := mustNew(t, Config{})
	rated := mustNew(t, Config{Rate: limits.Limit{Events: 1, Period: time.Second}})
	for _, tt := range []struct {
		m    *Middleware
		p    Policy
		want string
	}{
		{m, Policy{Rate: limits.Limit{Events: 1, Period: time.Second}}, "httplimit: a Policy needs a Name"},
		{m, Policy{Name: "x"}, `httplimit: policy "x": needs Rate or Limiter`},
		{m, Policy{Name: "x", Rate: limits.Limit{Events: 0, Period: time.Second}}, `httplimit: policy "x": limits: invalid limit: events must be >= 1, got 0`},
		{m, Policy{Name: "x", Rate: limits.Limit{Events: 1, Period: time.Second}, Burst: -1}, `httplimit: policy "x": Burst and MaxKeys must not be negative`},
		{m, Policy{Name: "x", Rate: limits.Limit{Events: 1, Period: time.Second}, Key: HeaderKey("K")}, `httplimit: policy "x" is keyed by the caller and needs an address bucket in front of it (Config.Rate or Config.Limiter)`},
		{rated, Policy{Name: "default", Rate: limits.Limit{Events: 1, Period: time.Second}}, `httplimit: policy "default": there already is a policy of that name`},
		{m, Policy{Name: "café", Rate: limits.Limit{Events: 1, Period: time.Second}}, `httplimit: policy "café": policy name "café" must be printable ASCII`},
	} {
		if _, err := tt.m.With(tt.p); err == nil || err.Error() != tt.want {
			t.Errorf("With(%+v) = %v, want %q", tt.p, err, tt.want)
		}
	}
}

func TestClientKeyAndReset(t *testing.T) {
	m := mustNew(t, Config{Rate: limits.Limit{Events: 1, Period: time.Hour}})
	route := mustWith(t, m, Policy{Name: "login", Rate: limits.Limit{Events: 1, Period: time.Hour}})
	h := m.Handler(route.Handler(ok))
	serve(h, "198.51.100.7:1", "/")
	if w := serve(h, "198.51.100.7:1", "/"); w.Code != 429 {
		t.Fatalf("second request: %d", w.Code)
	}
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "198.51.100.7:9"
	key := m.ClientKey(r)
	if key != "a:198.51.100.7/32" {
		t.Errorf("ClientKey = %q", key)
	}
	if err := route.Reset(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if w := serve(h, "198.51.100.7:1", "/"); w.Code != 200 {
		t.Errorf("after Reset: %d, want the client unblocked in every policy", w.Code)
	}
}

func TestStatsJSON(t *testing.T) {
	m := mustNew(t, Config{Rate: limits.Limit{Events: 1, Period: time.Hour}})
	b, _ := json.Marshal(m.Stats())
	if strings.Contains(string(b), `"gate"`) || !strings.Contains(string(b), `"policies":[{"name":"default","allowed":0`) {
		t.Errorf("Stats without a gate: %s", b)
	}
	m = mustNew(t, Config{MaxInFlight: 2})
	b, _ = json.Marshal(m.Stats())
	if !strings.Contains(string(b), `"gate":{"max":2,"in_flight":0,"peak":0,"waiting":0,"admitted":0,"shed":0,"timed_out":0`) {
		t.Errorf("Stats with a gate: %s", b)
	}
}

func TestLoadEnvPrefixes(t *testing.T) {
	env := map[string]string{
		"LIMITS_RATE": "100/min", "LIMITS_ADDRESS_MULTIPLIER": "8", "LIMITS_MAX_INFLIGHT_PER_CLIENT": "4",
		"LIMITS_BUSY_RETRY_AFTER": "3s", "LIMITS_FORWARDED_HEADER": "forwarded", "LIMITS_ON_LIMITER_ERROR": "fail_open",
		"LIMITS_HEADERS": "none", "LIMITS_LIMITER_TIMEOUT": "50ms", "LIMITS_POLICY_NAME": "web",
		"APP_LOGIN_RATE": "5/min", "APP_LOGIN_BURST": "2", "APP_LOGIN_MAX_KEYS": "1000",
		"APP_RATE": "10/s", "APP_BURST": "oops",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	var c Config
	if err := c.LoadEnv("", lookup); err != nil {
		t.Fatal(err)
	}
	if c.Rate != (limits.Limit{Events: 100, Period: time.Minute}) || c.AddressMultiplier != 8 || c.MaxInFlightPerClient != 4 ||
		c.BusyRetryAfter != 3*time.Second || c.ForwardedHeader != "Forwarded" || c.OnLimiterError != FailOpen ||
		c.Headers != HeadersNone || c.LimiterTimeout != 50*time.Millisecond || c.PolicyName != "web" {
		t.Errorf("LoadEnv: %+v", c)
	}
	p := Policy{Name: "login"}
	if err := p.LoadEnv("APP_LOGIN_", lookup); err != nil || p.Rate != (limits.Limit{Events: 5, Period: time.Minute}) || p.Burst != 2 || p.MaxKeys != 1000 {
		t.Errorf("Policy.LoadEnv: %+v, %v", p, err)
	}
	// Errors name the variable actually read.
	var d Config
	if err := d.LoadEnv("APP_", lookup); err == nil || !strings.Contains(err.Error(), `APP_BURST="oops"`) {
		t.Errorf("LoadEnv with a prefix: %v, want the error to name APP_BURST", err)
	}
	if err := p.LoadEnv("", lookup); err == nil {
		t.Error("Policy.LoadEnv without a prefix")
	}
	for name, bad := range map[string]string{
		EnvOnLimiterError: "sometimes", EnvHeaders: "all", EnvForwardedHeader: "X-Client-IP",
		EnvBusyRetryAfter: "0", EnvAddressMultiplier: "0",
	} {
		var c Config
		err := c.LoadEnv("", func(k string) (string, bool) { return bad, k == name })
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: %v", name, bad, err)
		}
	}
}

// failCounter is a Limiter that always fails, and counts its calls.
type failCounter struct{ n atomic.Int64 }

func (f *failCounter) Take(context.Context, string, int) (limits.Decision, error) {
	f.n.Add(1)
	return limits.Decision{}, errors.New("store unreachable")
}

func (*failCounter) Refund(context.Context, string, limits.Decision) error { return nil }

// TestLocalBeforeSharedDuringOutage checks that a failure policy speaks for
// the failing limiter only: under FailOpen the local limiter in front of
// it keeps counting and refusing, and the shared one is not asked about a
// request the local one refuses; under FailClosed the refusal gives the
// local charge back.
func TestLocalBeforeSharedDuringOutage(t *testing.T) {
	const key = "a:192.0.2.1/32"
	for _, tt := range []struct {
		policy ErrorPolicy
		want   []int
		calls  int64
		left   int // the local bucket's Remaining afterwards
	}{
		{FailOpen, []int{200, 200, 429, 429, 429}, 2, 0},
		{FailClosed, []int{503, 503, 503, 503, 503}, 5, 2},
	} {
		shared := &failCounter{}
		m := mustNew(t, Config{Limiter: shared, Rate: limits.Limit{Events: 2, Period: time.Hour}, OnLimiterError: tt.policy})
		h := m.Handler(ok)
		for i, want := range tt.want {
			if w := serve(h, "192.0.2.1:1", "/"); w.Code != want {
				t.Errorf("policy %d: request %d: %d, want %d", tt.policy, i, w.Code, want)
			}
		}
		if n := shared.n.Load(); n != tt.calls {
			t.Errorf("policy %d: the shared limiter was asked %d times, want %d", tt.policy, n, tt.calls)
		}
		if p := m.rates[0].Pre.Peek(key); p.Remaining != tt.left {
			t.Errorf("policy %d: local bucket afterwards: %+v, want Remaining %d", tt.policy, p, tt.left)
		}
	}

	// Served under FailOpen, then refused by a later layer: the local charge
	// is given back, as any other.
	synctest.Test(t, func(t *testing.T) {
		block := make(chan struct{})
		m := mustNew(t, Config{Limiter: &failCounter{}, Rate: limits.Limit{Events: 2, Period: time.Hour},
			OnLimiterError: FailOpen, MaxInFlightPerClient: 1})
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				<-block
			}
		}))
		go serve(h, "192.0.2.1:1", "/slow")
		synctest.Wait()
		if w := serve(h, "192.0.2.1:1", "/"); w.Code != 429 || problemOf(t, w).Reason != ReasonConcurrencyLimited {
			t.Errorf("second request: %d %s, want 429 concurrency_limited", w.Code, w.Body.String())
		}
		if p := m.rates[0].Pre.Peek(key); p.Remaining != 1 {
			t.Errorf("local bucket after a concurrency refusal: %+v, want Remaining 1", p)
		}
		close(block)
		synctest.Wait()
	})
}

// TestRouteOrderWhereverMounted checks that a route's policies run before
// per-client concurrency, as documented, whether the route is mounted
// inside m.Handler or served by its own Handler alone: the same answers,
// and per-policy Stats that agree.
func TestRouteOrderWhereverMounted(t *testing.T) {
	type outcome struct {
		code                      int
		reason, retry, rateFields string
	}
	run := func(t *testing.T, nested bool) ([]outcome, []PolicyStats) {
		var got []outcome
		var stats []PolicyStats
		synctest.Test(t, func(t *testing.T) {
			m := mustNew(t, Config{Rate: limits.Limit{Events: 10, Period: time.Hour}, MaxInFlightPerClient: 1})
			login := mustWith(t, m, Policy{Name: "login", Rate: limits.Limit{Events: 1, Period: time.Hour}})
			api := mustWith(t, m, Policy{Name: "api", Rate: limits.Limit{Events: 10, Period: time.Hour}})
			block := make(chan struct{})
			slow := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-block })
			mux := http.NewServeMux()
			mux.Handle("/login", login.Handler(ok))
			mux.Handle("/api", api.Handler(ok))
			var h http.Handler = mux
			if nested {
				mux.Handle("/slow", slow)
				h = m.Handler(mux)
			} else {
				mux.Handle("/slow", m.Handler(slow))
			}
			const a = "192.0.2.1:1"
			record := func(w *httptest.ResponseRecorder) {
				o := outcome{code: w.Code, retry: w.Header().Get("Retry-After"), rateFields: w.Header().Get("RateLimit")}
				if w.Code != 200 {
					o.reason = problemOf(t, w).Reason
				}
				got = append(got, o)
			}
			record(serve(h, a, "/login"))
			go serve(h, a, "/slow")
			synctest.Wait()
			record(serve(h, a, "/login"))
			record(serve(h, a, "/api")) // allowed by its policy, then refused: its charge given back
			close(block)
			synctest.Wait()
			record(serve(h, a, "/api"))
			synctest.Wait()
			stats = m.Stats().Policies
		})
		return got, stats
	}
	want := []outcome{
		{200, "", "", `"default";r=9;t=360, "login";r=0;t=3600`},
		{429, ReasonRateLimited, "3600", `"login";r=0;t=3600`},
		{429, ReasonConcurrencyLimited, "1", ""},
		{200, "", "", `"default";r=7;t=1080, "api";r=9;t=360`},
	}
	var stats [2][]PolicyStats
	for i, nested := range []bool{true, false} {
		got, s := run(t, nested)
		stats[i] = s
		if len(got) != len(want) {
			t.Fatalf("nested %v: %d outcomes", nested, len(got))
		}
		for j := range want {
			if got[j] != want[j] {
				t.Errorf("nested %v: request %d: %+v, want %+v", nested, j, got[j], want[j])
			}
		}
	}
	if fmt.Sprint(stats[0]) != fmt.Sprint(stats[1]) {
		t.Errorf("per-policy Stats differ:\nnested %+v\nalone  %+v", stats[0], stats[1])
	}
}
