package httplimit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
)

// recorder is a Limiter that decides with a local GCRA and remembers its
// last Decision, so tests can check the headers against it.
type recorder struct {
	g    *limits.GCRA
	mu   sync.Mutex
	last limits.Decision
}

func (r *recorder) Refund(ctx context.Context, key string, d limits.Decision) error {
	return r.g.Refund(ctx, key, d)
}

func (r *recorder) Take(_ context.Context, key string, n int) (limits.Decision, error) {
	d := r.g.AllowN(key, n)
	r.mu.Lock()
	r.last = d
	r.mu.Unlock()
	return d, nil
}

func (r *recorder) lastDecision() limits.Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// TestRateHeadersExact sends requests past a limit of 3 per 10s and checks
// status, Retry-After and the RateLimit fields against the limiter's
// Decisions, to the second.
func TestRateHeadersExact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{g: limits.NewGCRA(3, 10*time.Second)} // T = 3.333...s
		m := mustNew(t, Config{Limits: admit.Config{Limiters: named(rec), Limiter: "l"}})
		c := pipeServer(t, m.Handler(ok)).client("192.0.2.1:1000")
		want := []struct {
			status             int
			rateLimit, retryAt string
		}{
			{200, `"default";r=2;t=4`, ""},
			{200, `"default";r=1;t=7`, ""},
			{200, `"default";r=0;t=10`, ""}, // 3T = 10s exactly
			{429, `"default";r=0;t=4`, "4"},
		}
		for i, w := range want {
			resp, _ := get(t, c, "/")
			d := rec.lastDecision()
			if resp.StatusCode != w.status {
				t.Errorf("request %d: status %d, want %d", i, resp.StatusCode, w.status)
			}
			if got := resp.Header.Get("RateLimit-Policy"); got != `"default";q=3;w=10` {
				t.Errorf("request %d: RateLimit-Policy %q", i, got)
			}
			if got := resp.Header.Get("RateLimit"); got != w.rateLimit {
				t.Errorf("request %d: RateLimit %q, want %q", i, got, w.rateLimit)
			}
			// t is the Decision's ResetAfter (allowed) or RetryAfter
			// (refused), rounded up.
			tWant := d.ResetAfter
			if !d.Allowed {
				tWant = d.RetryAfter
			}
			if !strings.HasSuffix(w.rateLimit, fmt.Sprintf(";t=%d", int64((tWant+time.Second-1)/time.Second))) {
				t.Errorf("request %d: RateLimit %q disagrees with the Decision %+v", i, w.rateLimit, d)
			}
			if got := resp.Header.Get("Retry-After"); got != w.retryAt {
				t.Errorf("request %d: Retry-After %q, want %q", i, got, w.retryAt)
			}
			if !d.Allowed {
				ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
				if time.Duration(ra)*time.Second < d.RetryAfter {
					t.Errorf("request %d: Retry-After %ds earlier than the Decision's %v", i, ra, d.RetryAfter)
				}
			}
		}
		// Retry-After is never early: after it, the request passes.
		time.Sleep(4 * time.Second)
		if resp, _ := get(t, c, "/"); resp.StatusCode != 200 {
			t.Errorf("after Retry-After: status %d", resp.StatusCode)
		}
		c.CloseIdleConnections()
	})
}

func TestProblemBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 1, Period: time.Minute}}})
		c := pipeServer(t, m.Handler(ok)).client("192.0.2.1:1")
		get(t, c, "/")
		resp, body := get(t, c, "/")
		if resp.StatusCode != 429 || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		var p map[string]any
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatalf("body %q: %v", body, err)
		}
		if p["status"] != float64(429) || p["reason"] != "rate_limited" || p["type"] != quotaExceeded || p["title"] == "" || p["detail"] == "" ||
			fmt.Sprint(p["violated-policies"]) != "[default]" {
			t.Errorf("problem body %v", p)
		}
		if resp.Header.Get("Retry-After") != "60" || resp.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("Retry-After %q, Cache-Control %q; want 60, no-store", resp.Header.Get("Retry-After"), resp.Header.Get("Cache-Control"))
		}
		c.CloseIdleConnections()
	})
}

func TestHeaderModes(t *testing.T) {
	tests := []struct {
		mode            string
		ietf, legacy    bool
		wantLegacyReset string
	}{
		{"", true, false, ""},
		{"ietf", true, false, ""},
		{"ietf_legacy", true, true, "30"},
		{"legacy", false, true, "30"},
		{"none", false, false, ""},
	}
	for _, tt := range tests {
		m := mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 2, Period: time.Minute}, Headers: tt.mode}})
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		m.Handler(ok).ServeHTTP(w, r)
		h := w.Result().Header
		if got := h.Get("RateLimit") != ""; got != tt.ietf {
			t.Errorf("mode %q: RateLimit present %v, want %v", tt.mode, got, tt.ietf)
		}
		if got := h.Get("X-RateLimit-Remaining") != ""; got != tt.legacy {
			t.Errorf("mode %q: X-RateLimit-Remaining present %v, want %v", tt.mode, got, tt.legacy)
		}
		if tt.legacy && (h.Get("X-RateLimit-Limit") != "2" || h.Get("X-RateLimit-Remaining") != "1" || h.Get("X-RateLimit-Reset") != tt.wantLegacyReset) {
			t.Errorf("mode %q: legacy headers %v", tt.mode, h)
		}
	}
}

// TestPolicyNameQuoted checks that a policy's name reaches the rate limit
// fields as a Structured Field string, its quotes and backslashes escaped.
func TestPolicyNameQuoted(t *testing.T) {
	for name, want := range map[string]string{"web": `"web"`, `a"b`: `"a\"b"`, `c\d`: `"c\\d"`} {
		m := mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 2, Period: time.Minute}, PolicyName: name}})
		w := serve(m.Handler(ok), "192.0.2.1:1", "/")
		if got := w.Header().Get("RateLimit-Policy"); got != want+";q=2;w=60" {
			t.Errorf("policy %q: RateLimit-Policy %q, want %s;q=2;w=60", name, got, want)
		}
	}
}

// TestExemptBypassesEveryLayer fills the gate and empties the rate bucket,
// then checks that exempt requests still pass, and are counted as exempt.
func TestExemptBypassesEveryLayer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				<-release
			}
			io.WriteString(w, "ok")
		})
		m := mustNew(t, Config{
			Limits: admit.Config{
				Exempt:               []string{"/healthz"},
				MaxInFlight:          1,
				Rate:                 limits.Limit{Events: 1, Period: time.Hour},
				MaxInFlightPerClient: 1,
				Timeout:              time.Second,
			},
			Exempt: func(r *http.Request) bool { return r.Header.Get("X-Probe") == "k8s" },
		})
		l := pipeServer(t, m.Handler(h))
		c := l.client("192.0.2.1:1")
		goGet(t, l.client("192.0.2.1:2"), "/slow") // holds the gate and the bucket
		synctest.Wait()
		if resp, _ := get(t, c, "/api"); resp.StatusCode != 503 {
			t.Fatalf("gate full: status %d, want 503", resp.StatusCode)
		}
		for range 5 {
			resp, body := get(t, c, "/healthz")
			if resp.StatusCode != 200 || body != "ok" || resp.Header.Get("RateLimit") != "" {
				t.Errorf("exempt request: %d %q %v", resp.StatusCode, body, resp.Header)
			}
		}
		if resp, body := get(t, c, "/api", "X-Probe", "k8s"); resp.StatusCode != 200 || body != "ok" {
			t.Errorf("request Config.Exempt picks: %d %q", resp.StatusCode, body)
		}
		close(release)
		synctest.Wait()
		if s := m.Stats(); s.Requests[admit.Exempt] != 6 || s.Requests[admit.Allowed] != 1 || s.Requests[admit.ServerBusy] != 1 {
			t.Errorf("Stats = %v", s.Requests)
		}
		c.CloseIdleConnections()
	})
}

// TestExemptRoutes checks which paths the patterns of Limits.Exempt
// exempt: exact paths, and a subtree's paths below it.
func TestExemptRoutes(t *testing.T) {
	m := mustNew(t, Config{Limits: admit.Config{
		Exempt: []string{"/healthz", "/readyz", "/static/"},
		Rate:   limits.Limit{Events: 1, Period: time.Hour},
	}})
	h := m.Handler(ok)
	serve(h, "192.0.2.1:1", "/") // the client's one request an hour
	for path, exempt := range map[string]bool{
		"/healthz": true, "/readyz": true, "/static/app.js": true, "/static/css/a.css": true,
		"/healthz/x": false, "/static": false, "/api": false, "/": false,
	} {
		if w := serve(h, "192.0.2.1:1", path); (w.Code == 200) != exempt {
			t.Errorf("%s: %d, exempt %v", path, w.Code, exempt)
		}
	}
}

func TestGateBusyAndQueueWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				<-release
			}
		})
		m := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 2, BusyRetryAfter: 1500 * time.Millisecond}})
		l := pipeServer(t, m.Handler(h))
		for i := range 2 {
			goGet(t, l.client(fmt.Sprintf("192.0.2.%d:1", i)), "/slow")
		}
		synctest.Wait()
		resp, body := get(t, l.client("192.0.2.9:1"), "/")
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "2" || !strings.Contains(body, `"server_busy"`) {
			t.Errorf("gate full: status %d, Retry-After %q, %s; want 503, 2, server_busy", resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
		close(release)
		synctest.Wait()
		if resp, _ := get(t, l.client("192.0.2.9:2"), "/"); resp.StatusCode != 200 {
			t.Errorf("after release: status %d", resp.StatusCode)
		}
		if s := m.Stats(); s.Requests[admit.ServerBusy] != 1 || s.Gate.InFlight != 0 || s.Gate.Peak != 2 {
			t.Errorf("Stats = %v, gate %+v", s.Requests, s.Gate)
		}

		// With a queue wait, a request waits for a place that frees in time.
		mq := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 1, QueueWait: 50 * time.Millisecond}})
		lq := pipeServer(t, mq.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(20 * time.Millisecond)
		})))
		goGet(t, lq.client("192.0.2.1:1"), "/")
		synctest.Wait()
		start := time.Now()
		if resp, _ := get(t, lq.client("192.0.2.2:1"), "/"); resp.StatusCode != 200 {
			t.Errorf("queued request: status %d", resp.StatusCode)
		}
		if waited := time.Since(start); waited != 40*time.Millisecond {
			t.Errorf("queued request took %v, want 40ms (20ms waiting, 20ms served)", waited)
		}
		// A place that does not free in time: refused at the bound.
		mq2 := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 1, QueueWait: 5 * time.Millisecond}})
		hold := make(chan struct{})
		lq2 := pipeServer(t, mq2.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				<-hold
			}
		})))
		goGet(t, lq2.client("192.0.2.1:1"), "/slow")
		synctest.Wait()
		start = time.Now()
		if resp, _ := get(t, lq2.client("192.0.2.2:1"), "/"); resp.StatusCode != 503 || time.Since(start) != 5*time.Millisecond {
			t.Errorf("queued past the wait: status %d after %v, want 503 after 5ms", resp.StatusCode, time.Since(start))
		}
		close(hold)
		synctest.Wait()
	})
}

// TestTimeout checks the deadline: 503 request_timeout, the handler's
// context cancelled, and its gate place held until it returns.
func TestTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		handlerDone := make(chan error, 1)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/fast" {
				w.Header().Set("X-Handler", "yes")
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "made")
				return
			}
			<-r.Context().Done()
			time.Sleep(100 * time.Millisecond) // cleaning up
			_, err := io.WriteString(w, "too late")
			handlerDone <- err
		})
		m := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 4, Timeout: time.Second, Rate: limits.Limit{Events: 10, Period: time.Minute}}})
		l := pipeServer(t, m.Handler(h))
		c := l.client("192.0.2.1:1")
		resp, body := get(t, c, "/fast")
		if resp.StatusCode != 201 || body != "made" || resp.Header.Get("X-Handler") != "yes" || resp.Header.Get("RateLimit") != `"default";r=9;t=6` {
			t.Errorf("fast request: %d %q %v", resp.StatusCode, body, resp.Header)
		}
		start := time.Now()
		resp, body = get(t, c, "/slow")
		if resp.StatusCode != 503 || !strings.Contains(body, `"request_timeout"`) || time.Since(start) != time.Second {
			t.Errorf("slow request: %d %q after %v", resp.StatusCode, body, time.Since(start))
		}
		if n := m.Stats().Gate.InFlight; n != 1 {
			t.Errorf("gate in flight while the handler cleans up = %d, want 1", n)
		}
		if err := <-handlerDone; !errors.Is(err, http.ErrHandlerTimeout) {
			t.Errorf("write after the deadline: %v, want ErrHandlerTimeout", err)
		}
		synctest.Wait()
		if s := m.Stats(); s.Gate.InFlight != 0 || s.Requests[admit.RequestTimeout] != 1 || s.Requests[admit.Allowed] != 2 {
			t.Errorf("Stats = %v, gate %+v", s.Requests, s.Gate)
		}
		c.CloseIdleConnections()
	})
}

// TestTimeoutPanic checks that a handler panicking under a deadline still
// releases its places and that the panic reaches net/http.
func TestTimeoutPanic(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Second} {
		m := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 1, MaxInFlightPerClient: 1, Timeout: timeout}})
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/panic" {
				panic("boom")
			}
		}))
		func() {
			defer func() {
				if p := recover(); p != "boom" {
					t.Errorf("Timeout %v: recovered %v, want boom", timeout, p)
				}
			}()
			serve(h, "192.0.2.1:1", "/panic")
		}()
		if w := serve(h, "192.0.2.1:1", "/"); w.Code != 200 || m.Stats().Gate.InFlight != 0 {
			t.Errorf("Timeout %v: after a panic, the client's next request: %d %s, gate %+v", timeout, w.Code, w.Body.String(), m.Stats().Gate)
		}
	}
}

// TestAbortedAndPanickingRequestsRelease sends many requests that the
// client abandons mid-way, and some whose handler panics, through a real
// server, and checks that every count returns to 0.
func TestAbortedAndPanickingRequestsRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/panic" {
				panic(http.ErrAbortHandler)
			}
			<-r.Context().Done() // until the client goes away
		})
		const n = 40
		m := mustNew(t, Config{Limits: admit.Config{MaxInFlight: n, MaxInFlightPerClient: n}})
		l := pipeServer(t, m.Handler(h))
		c := l.client("192.0.2.1:1")
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				path := "/panic"
				if i%4 != 0 {
					path = "/hang"
					time.AfterFunc(time.Millisecond, cancel) // the client leaves
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://limits.test"+path, nil)
				if resp, err := c.Do(req); err == nil {
					resp.Body.Close()
				}
			})
		}
		wg.Wait()
		synctest.Wait()
		if s := m.Stats(); s.Requests[admit.Allowed] != n || s.Gate.Admitted != n || s.Gate.InFlight != 0 {
			t.Errorf("Stats = %v, gate %+v", s.Requests, s.Gate)
		}
		if free := freeFor(t, m, "192.0.2.1:1", n); free != n {
			t.Errorf("the client may have %d requests in progress, want %d: counts not given back", free, n)
		}
	})
}

// TestCallerKeyRotation checks that a caller changing its session cookie
// on every request stays inside its address bucket, that one session is
// held to its own limit, and that its refusals do not drain the address
// bucket for other sessions behind the same address.
func TestCallerKeyRotation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mustNew(t, Config{Limits: admit.Config{
			Rate:      limits.Limit{Events: 2, Period: time.Minute},
			CallerKey: "cookie:session",
		}})
		l := pipeServer(t, m.Handler(ok))
		nat := l.client("198.51.100.1:1")
		// One session: 2 allowed, then refused by its own bucket, many times.
		for i := range 10 {
			resp, _ := get(t, nat, "/", "Cookie", "session=alice")
			if want := map[bool]int{true: 200, false: 429}[i < 2]; resp.StatusCode != want {
				t.Errorf("alice request %d: status %d, want %d", i, resp.StatusCode, want)
			}
		}
		// Its refusals did not drain the address: another session gets 2.
		for i := range 2 {
			if resp, _ := get(t, nat, "/", "Cookie", "session=bob"); resp.StatusCode != 200 {
				t.Errorf("bob request %d: status %d", i, resp.StatusCode)
			}
		}
		// Rotating sessions: the address bucket (4 x 2 = 8) has 4 left.
		allowed := 0
		for i := range 20 {
			resp, _ := get(t, nat, "/", "Cookie", fmt.Sprintf("session=rot%d", i))
			if resp.StatusCode == 200 {
				allowed++
			} else if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, `"address";r=0`) {
				t.Errorf("rotation refused by %q, want the address bucket", got)
			}
		}
		if allowed != 4 {
			t.Errorf("rotating sessions: %d allowed, want 4", allowed)
		}
		// Without a cookie, the address bucket alone applies.
		if resp, _ := get(t, nat, "/"); resp.StatusCode != 429 {
			t.Errorf("no cookie: status %d, want 429", resp.StatusCode)
		}
		// Another address is untouched; a request with a key is told of
		// its key's limit, not of its address's.
		resp, _ := get(t, l.client("198.51.100.2:1"), "/", "Cookie", "session=alice2")
		if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != `"default";q=2;w=60` {
			t.Errorf("other address: %d, policy %q", resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
		}
		// Without a key, of its address's and the keyless bucket's.
		resp, _ = get(t, l.client("198.51.100.3:1"), "/")
		if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != `"address";q=8;w=60, "keyless";q=2;w=60` {
			t.Errorf("no key: %d, policy %q", resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
		}
		nat.CloseIdleConnections()
	})
}

// keyRecorder is a Limiter that remembers the keys it is asked about.
type keyRecorder struct {
	mu   sync.Mutex
	keys []string
}

func (k *keyRecorder) Refund(context.Context, string, limits.Decision) error { return nil }

func (k *keyRecorder) Take(_ context.Context, key string, n int) (limits.Decision, error) {
	k.mu.Lock()
	k.keys = append(k.keys, key)
	k.mu.Unlock()
	return limits.Decision{Allowed: true, Limit: 1, Period: time.Second, Burst: 1, Remaining: 1}, nil
}

// TestCallerKeyHashedAndKeylessLimited checks that limiters never see a
// caller key in clear, and that requests without one are held to Rate per
// address, not to the address bucket's multiple.
func TestCallerKeyHashedAndKeylessLimited(t *testing.T) {
	rec := &keyRecorder{}
	m := mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 1, Period: time.Hour}, CallerKey: "X-Api-Key", Limiters: named(rec), CallerLimiter: "l"}})
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Api-Key", "sk_live_secret")
	m.Handler(ok).ServeHTTP(httptest.NewRecorder(), r)
	m.Handler(ok).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	if len(rec.keys) != 2 || strings.Contains(rec.keys[0], "sk_live") || len(rec.keys[0]) != 34 || rec.keys[1] != "n:a:192.0.2.1/32" {
		t.Errorf("caller limiter saw keys %q", rec.keys)
	}

	m = mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 2, Period: time.Hour}, CallerKey: "cookie:session"}})
	allowed := 0
	for range 10 {
		w := httptest.NewRecorder()
		m.Handler(ok).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		if w.Code == 200 {
			allowed++
		}
	}
	if allowed != 2 {
		t.Errorf("requests without a session: %d allowed, want 2 (Rate, not the address bucket's 8)", allowed)
	}
}

// TestFields checks where a request's fields are read from: a function of
// Keys, which hides the header of its name; a cookie; a header.
func TestFields(t *testing.T) {
	m := mustNew(t, Config{Keys: map[string]func(*http.Request) string{
		"user":       func(r *http.Request) string { return "u-" + r.URL.Query().Get("u") },
		"X-Shadowed": func(*http.Request) string { return "from Keys" },
	}})
	r := httptest.NewRequest(http.MethodGet, "/?u=7", nil)
	q := &request{m: m, r: r}
	for name, want := range map[string]string{"cookie:session": "", "X-Api-Key": "", "user": "u-7", "X-Shadowed": "from Keys"} {
		if got := q.Field(name); got != want {
			t.Errorf("empty request: Field(%q) = %q, want %q", name, got, want)
		}
	}
	r.AddCookie(&http.Cookie{Name: "session", Value: "abc"})
	r.Header.Add("X-Api-Key", "k1")
	r.Header.Add("X-Api-Key", "k2")
	r.Header.Set("X-Shadowed", "from the header")
	for name, want := range map[string]string{"cookie:session": "abc", "cookie:other": "", "X-Api-Key": "k1", "x-api-key": "k1", "X-Shadowed": "from Keys"} {
		if got := q.Field(name); got != want {
			t.Errorf("Field(%q) = %q, want %q", name, got, want)
		}
	}
	if got := q.FieldValues("X-Api-Key"); fmt.Sprint(got) != "[k1 k2]" {
		t.Errorf("FieldValues = %q, want both values", got)
	}

	// A caller key from Keys: each user its own bucket.
	m = mustNew(t, Config{
		Limits: admit.Config{Rate: limits.Limit{Events: 1, Period: time.Hour}, CallerKey: "user"},
		Keys:   map[string]func(*http.Request) string{"user": func(r *http.Request) string { return r.URL.Query().Get("u") }},
	})
	h := m.Handler(ok)
	for i, tc := range []struct {
		path string
		want int
	}{{"/?u=a", 200}, {"/?u=a", 429}, {"/?u=b", 200}, {"/?u=b", 429}} {
		if w := serve(h, "192.0.2.1:1", tc.path); w.Code != tc.want {
			t.Errorf("request %d, %s: %d, want %d", i, tc.path, w.Code, tc.want)
		}
	}
}

func TestPerClientConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		m := mustNew(t, Config{Limits: admit.Config{MaxInFlightPerClient: 1}, InFlightStatus: http.StatusServiceUnavailable})
		l := pipeServer(t, m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				<-release
			}
		})))
		goGet(t, l.client("192.0.2.1:1"), "/slow")
		synctest.Wait()
		resp, body := get(t, l.client("192.0.2.1:2"), "/")
		if resp.StatusCode != 503 || !strings.Contains(body, `"concurrency_limited"`) || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("second request from the client: %d %q, Retry-After %q", resp.StatusCode, body, resp.Header.Get("Retry-After"))
		}
		if resp, _ := get(t, l.client("192.0.2.2:1"), "/"); resp.StatusCode != 200 {
			t.Errorf("another client: %d", resp.StatusCode)
		}
		close(release)
		synctest.Wait()
		if resp, _ := get(t, l.client("192.0.2.1:3"), "/"); resp.StatusCode != 200 {
			t.Errorf("after the first finished: %d", resp.StatusCode)
		}
		if s := m.Stats(); s.Requests[admit.ConcurrencyLimited] != 1 {
			t.Errorf("Stats = %v", s.Requests)
		}
	})
}

// TestReleaseCapacity has a long-lived handler give its gate place back
// early, as a WebSocket handler would after the upgrade.
func TestReleaseCapacity(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Hour} {
		t.Run(fmt.Sprintf("Timeout=%v", timeout), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				hold := make(chan struct{})
				m := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 1, Timeout: timeout}})
				l := pipeServer(t, m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/socket" {
						ReleaseCapacity(w)
						ReleaseCapacity(w) // idempotent
						<-hold
					}
				})))
				goGet(t, l.client("192.0.2.1:1"), "/socket")
				synctest.Wait()
				if n := m.Stats().Gate.InFlight; n != 0 {
					t.Errorf("Timeout %v: in flight after ReleaseCapacity = %d, want 0", timeout, n)
				}
				for i := range 3 {
					if resp, _ := get(t, l.client("192.0.2.2:1"), "/"); resp.StatusCode != 200 {
						t.Errorf("Timeout %v: request %d beside the socket: %d", timeout, i, resp.StatusCode)
					}
				}
				close(hold)
				synctest.Wait()
				if s := m.Stats(); s.Gate.InFlight != 0 || s.Gate.Admitted != 4 {
					t.Errorf("Timeout %v: gate %+v", timeout, s.Gate)
				}
			})
		})
	}
	ReleaseCapacity(httptest.NewRecorder()) // no place: no effect
	ReleaseCapacity(nil)
}

// failing is a Limiter that always fails.
type failing struct{}

func (failing) Refund(context.Context, string, limits.Decision) error { return nil }

func (failing) Take(context.Context, string, int) (limits.Decision, error) {
	return limits.Decision{}, errors.New("store unreachable")
}

func TestLimiterErrorPolicies(t *testing.T) {
	for _, tt := range []struct {
		failOpen bool
		status   int
	}{{false, 503}, {true, 200}} {
		var logs bytes.Buffer
		m := mustNew(t, Config{Limits: admit.Config{Limiters: named(failing{}), Limiter: "l", FailOpen: tt.failOpen, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}})
		w := httptest.NewRecorder()
		m.Handler(ok).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/x", nil))
		if w.Code != tt.status {
			t.Errorf("FailOpen %v: status %d, want %d", tt.failOpen, w.Code, tt.status)
		}
		if tt.status == 503 && reasonOf(t, w) != "limiter_error" {
			t.Errorf("FailOpen %v: reason %q, want limiter_error", tt.failOpen, reasonOf(t, w))
		}
		if s := m.Stats(); s.Policies[0].Requests[admit.LimiterError] != 1 {
			t.Errorf("FailOpen %v: Stats = %+v", tt.failOpen, s.Policies)
		}
		var entry map[string]any
		if err := json.Unmarshal(logs.Bytes(), &entry); err != nil {
			t.Fatalf("FailOpen %v: log %q: %v", tt.failOpen, logs.String(), err)
		}
		if entry["reason"] != "limiter_error" || entry["error"] != "store unreachable" || entry["route"] != "/x" || entry["method"] != "GET" || entry["level"] != "ERROR" {
			t.Errorf("FailOpen %v: log entry %v", tt.failOpen, entry)
		}
	}
}

// TestLimiterErrorCountedOnce checks that a request refused because its
// limiter failed counts once in Stats.Requests, as every outcome does: the
// failed call and the refusal are one event.
func TestLimiterErrorCountedOnce(t *testing.T) {
	m := mustNew(t, Config{Limits: admit.Config{Limiters: named(failing{}), Limiter: "l"}})
	for range 3 {
		serve(m.Handler(ok), "192.0.2.1:1", "/")
	}
	if n := m.Stats().Requests[admit.LimiterError]; n != 3 {
		t.Errorf("3 requests refused with limiter_error: Stats.Requests counts %d, want 3", n)
	}
}

// TestLogsHashKeys checks that refusals are logged with a hash of the key,
// never the key.
func TestLogsHashKeys(t *testing.T) {
	var logs bytes.Buffer
	m := mustNew(t, Config{Limits: admit.Config{
		Rate:      limits.Limit{Events: 1, Period: time.Minute},
		CallerKey: "X-Api-Key",
		Logger:    slog.New(slog.NewTextHandler(&logs, nil)),
	}})
	for range 2 {
		r := httptest.NewRequest(http.MethodGet, "/v1/things", nil)
		r.Header.Set("X-Api-Key", "sk_live_secret_token")
		m.Handler(ok).ServeHTTP(httptest.NewRecorder(), r)
	}
	out := logs.String()
	if !strings.Contains(out, "reason=rate_limited") || !strings.Contains(out, "route=/v1/things") || !strings.Contains(out, "key_hash=") {
		t.Errorf("log %q lacks the refusal", out)
	}
	if strings.Contains(out, "sk_live") {
		t.Errorf("log %q reveals the key", out)
	}
}

// TestDenyHook checks that Deny writes the response to a refusal, with
// the status chosen and Retry-After and the rate limit fields already set,
// and is given the refusal.
func TestDenyHook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			status int
			got    admit.Refusal
		)
		m := mustNew(t, Config{
			Limits: admit.Config{Rate: limits.Limit{Events: 1, Period: time.Minute}},
			Deny: func(w http.ResponseWriter, r *http.Request, s int, ref *admit.Refusal) {
				status, got = s, admit.Refusal{Reason: ref.Reason, Policy: ref.Policy, RetryAfter: ref.RetryAfter, Decision: ref.Decision}
				w.WriteHeader(s)
				io.WriteString(w, "slow down")
			},
		})
		h := m.Handler(ok)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		if w.Code != 429 || w.Body.String() != "slow down" || w.Header().Get("Retry-After") != "60" || w.Header().Get("RateLimit") == "" {
			t.Errorf("hooked refusal: %d %q %v", w.Code, w.Body.String(), w.Header())
		}
		if got.Reason != limits.ReasonRateLimited || status != 429 || got.Policy != "default" || got.RetryAfter != time.Minute ||
			got.Decision.Allowed || got.Decision.Limit != 1 {
			t.Errorf("Deny got status %d, %+v", status, got)
		}
	})
}

func TestTableFull(t *testing.T) {
	m := mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 1, Period: time.Hour}, MaxKeys: 1}})
	h := m.Handler(ok)
	serve(h, "192.0.2.1:1", "/")
	w := serve(h, "192.0.2.2:1", "/")
	if w.Code != 503 || reasonOf(t, w) != "table_full" || w.Header().Get("Retry-After") != "1" {
		t.Errorf("new client in a full table: %d %q %v", w.Code, w.Body.String(), w.Header())
	}
	if s := m.Stats(); s.Requests[limits.ReasonTableFull] != 1 || s.Requests[limits.ReasonRateLimited] != 0 {
		t.Errorf("Stats = %v", s.Requests)
	}
}

// TestConcurrentRequests runs many clients at once under the race detector
// and checks that every request has exactly one outcome and that no layer
// lets more through than it should.
func TestConcurrentRequests(t *testing.T) {
	var inside, most atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inside.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(100 * time.Microsecond)
		inside.Add(-1)
	})
	m := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 3, Rate: limits.Limit{Events: 50, Period: time.Hour}, CallerKey: "X-Key"}})
	srv := httptest.NewServer(m.Handler(h))
	defer srv.Close()
	var wg sync.WaitGroup
	var ok200, refused atomic.Int64
	for g := range 16 {
		wg.Go(func() {
			for range 50 {
				req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
				req.Header.Set("X-Key", strconv.Itoa(g%4))
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode == 200 {
					ok200.Add(1)
				} else {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	s := m.Stats()
	if most.Load() > 3 {
		t.Errorf("%d requests in the handler at once, gate of 3", most.Load())
	}
	// All from one address: at most 4 x 50 pass the address bucket, and
	// each of the 4 keys at most 50.
	allowed, limited, busy := s.Requests[admit.Allowed], s.Requests[limits.ReasonRateLimited], s.Requests[admit.ServerBusy]
	if ok200.Load() > 200 || uint64(ok200.Load()) != allowed {
		t.Errorf("%d served, Stats %v", ok200.Load(), s.Requests)
	}
	if total := allowed + limited + busy; total != 800 || uint64(refused.Load()) != limited+busy {
		t.Errorf("outcomes %v do not add up to 800 requests (%d refused)", s.Requests, refused.Load())
	}
}

// TestNewErrors checks that New refuses a Config that cannot be honoured,
// with an error naming the field.
func TestNewErrors(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{Limits: admit.Config{MaxInFlight: -1}}, "httplimit: Limits: MaxInFlight must not be negative, got -1"},
		{Config{Limits: admit.Config{Timeout: -time.Second}}, "httplimit: Limits: Timeout must not be negative"},
		{Config{Limits: admit.Config{IPv6Prefix: 129}}, "httplimit: Limits: IPv4Prefix and IPv6Prefix must be within 0-32 and 0-128"},
		{Config{InFlightStatus: 200}, "httplimit: InFlightStatus must be a 4xx or 5xx status, got 200"},
		{Config{InFlightStatus: 600}, "httplimit: InFlightStatus must be a 4xx or 5xx status, got 600"},
		{Config{Limits: admit.Config{Rate: limits.Limit{Events: 0, Period: time.Second}}}, "httplimit: Limits: Rate: limits: invalid limit: events must be >= 1, got 0"},
		{Config{Limits: admit.Config{CallerKey: "X"}}, "httplimit: Limits: CallerKey needs Rate or CallerLimiter"},
		{Config{Limits: admit.Config{PolicyName: "café"}}, `httplimit: Limits: PolicyName "café" must be printable ASCII`},
		{Config{Limits: admit.Config{PolicyName: "a\tb"}}, `httplimit: Limits: PolicyName "a\tb" must be printable ASCII`},
		{Config{Limits: admit.Config{Rate: limits.Limit{Events: 1, Period: time.Hour}, Burst: 1 << 20}}, "a burst of 1048576 at 1 per 1h0m0s takes too long to recover"},
		{Config{Limits: admit.Config{ForwardedHeader: "X-Client-IP"}}, `httplimit: Limits: ForwardedHeader must be X-Forwarded-For, Forwarded or X-Real-IP, got "X-Client-IP"`},
		{Config{Limits: admit.Config{Limiter: "shared"}}, `no limiter named "shared" in Limiters`},
		{Config{Limits: admit.Config{Headers: "all"}}, `httplimit: Limits: Headers must be ietf, ietf_legacy, legacy or none, got "all"`},
		{Config{Limits: admit.Config{Exempt: []string{"healthz"}}}, `httplimit: Limits: Exempt[0]: route "healthz": want a path starting with /`},
	} {
		if m, err := New(tt.cfg); m != nil || err == nil || !strings.HasPrefix(err.Error(), "httplimit: ") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want %q", tt.cfg, err, tt.want)
		}
	}
}

// TestLoadEnv checks that the variables of admit.Config.LoadEnv configure
// a Middleware: read into Limits, accepted by New, and applied to
// requests; that a bad value is an error naming the variable; and that a
// prefix and the policies' own variables are read.
func TestLoadEnv(t *testing.T) {
	env := map[string]string{
		"LIMITS_RATE": "2/min", "LIMITS_BURST": "2", "LIMITS_MAX_INFLIGHT": "64", "LIMITS_QUEUE_WAIT": "0",
		"LIMITS_TIMEOUT": "5s", "LIMITS_MAX_KEYS": "1000", "LIMITS_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.1",
		"LIMITS_EXEMPT": "/healthz, /static/", "LIMITS_HEADERS": "ietf_legacy", "LIMITS_POLICY_NAME": "web",
		"LIMITS_LOGIN_RATE": "1/min", "LIMITS_LOGIN_BURST": "1", "LIMITS_LOGIN_MAX_KEYS": "1000",
		"LIMITS_CALLER_KEY": "X-Api-Key", "LIMITS_ADDRESS_MULTIPLIER": "8", "LIMITS_MAX_INFLIGHT_PER_CLIENT": "4",
		"LIMITS_BUSY_RETRY_AFTER": "3s", "LIMITS_FORWARDED_HEADER": "forwarded", "LIMITS_ON_LIMITER_ERROR": "fail_open",
		"LIMITS_LIMITER_TIMEOUT": "50ms",
		"APP_RATE":               "10/s", "APP_BURST": "oops",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg := Config{Limits: admit.Config{Policies: []admit.Policy{{Name: "login", Routes: []string{"/login"}, Rate: limits.Limit{Events: 5, Period: time.Minute}}}}}
	if err := cfg.Limits.LoadEnv("", lookup); err != nil {
		t.Fatal(err)
	}
	c := cfg.Limits
	if c.Rate != (limits.Limit{Events: 2, Period: time.Minute}) || c.Burst != 2 || c.MaxInFlight != 64 ||
		c.QueueWait != 0 || c.Timeout != 5*time.Second || c.MaxKeys != 1000 ||
		fmt.Sprint(c.TrustedProxies) != "[10.0.0.0/8 192.0.2.1/32]" || fmt.Sprint(c.Exempt) != "[/healthz /static/]" ||
		c.Headers != "ietf_legacy" || c.PolicyName != "web" || c.CallerKey != "X-Api-Key" || c.AddressMultiplier != 8 ||
		c.MaxInFlightPerClient != 4 || c.BusyRetryAfter != 3*time.Second || c.ForwardedHeader != "Forwarded" || !c.FailOpen ||
		c.LimiterTimeout != 50*time.Millisecond ||
		c.Policies[0].Rate != (limits.Limit{Events: 1, Period: time.Minute}) || c.Policies[0].Burst != 1 || c.Policies[0].MaxKeys != 1000 {
		t.Errorf("LoadEnv gave %+v", c)
	}
	m := mustNew(t, cfg)
	h := m.Handler(ok)
	for i, tc := range []struct {
		path string
		want int
	}{{"/login", 200}, {"/login", 429}, {"/healthz", 200}, {"/static/a.js", 200}, {"/", 200}, {"/", 429}} {
		w := serve(h, "203.0.113.1:1", tc.path)
		if w.Code != tc.want {
			t.Errorf("request %d, %s: %d, want %d", i, tc.path, w.Code, tc.want)
		}
		if tc.path == "/" && w.Header().Get("X-RateLimit-Limit") != "2" {
			t.Errorf("request %d, %s: legacy fields %v", i, tc.path, w.Header())
		}
	}

	var d admit.Config
	if err := d.LoadEnv("APP_", lookup); err == nil || !strings.Contains(err.Error(), `APP_BURST="oops"`) {
		t.Errorf("LoadEnv with a prefix: %v, want the error to name APP_BURST", err)
	}
	for name, bad := range map[string]string{
		"LIMITS_RATE": "100", "LIMITS_BURST": "0", "LIMITS_MAX_INFLIGHT": "-3", "LIMITS_QUEUE_WAIT": "soon",
		"LIMITS_TIMEOUT": "0s", "LIMITS_MAX_KEYS": "many", "LIMITS_TRUSTED_PROXIES": "10.0.0.0/8,nope",
		"LIMITS_ON_LIMITER_ERROR": "sometimes", "LIMITS_HEADERS": "all", "LIMITS_FORWARDED_HEADER": "X-Client-IP",
		"LIMITS_BUSY_RETRY_AFTER": "0", "LIMITS_ADDRESS_MULTIPLIER": "0",
	} {
		var c admit.Config
		err := c.LoadEnv("", func(k string) (string, bool) { return bad, k == name })
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: error %v, want one naming the variable", name, bad, err)
		}
	}
	c = admit.Config{MaxInFlight: 7}
	if err := c.LoadEnv("", func(string) (string, bool) { return "", false }); err != nil || c.MaxInFlight != 7 {
		t.Errorf("unset variables changed the config: %+v, %v", c, err)
	}
	if err := c.LoadEnv("", func(k string) (string, bool) { return "fail_open", k == "LIMITS_ON_LIMITER_ERROR" }); err != nil || !c.FailOpen {
		t.Errorf("LIMITS_ON_LIMITER_ERROR=fail_open: %v, FailOpen %v", err, c.FailOpen)
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
// limiter's own timeout end together, the error logged and handed to Deny
// is the limiter's, with its cause, under either policy.
func TestLimiterErrorKeepsCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, failOpen := range []bool{false, true} {
			var logs bytes.Buffer
			var denied []error
			m := mustNew(t, Config{
				Limits: admit.Config{Limiters: named(refusedAtDeadline{100 * time.Millisecond}), Limiter: "l", LimiterTimeout: 100 * time.Millisecond,
					FailOpen: failOpen, Logger: slog.New(slog.NewJSONHandler(&logs, nil))},
				Deny: func(w http.ResponseWriter, r *http.Request, _ int, ref *admit.Refusal) {
					denied = append(denied, ref.Err)
				},
			})
			const n = 20
			for range n {
				serve(m.Handler(ok), "192.0.2.1:1", "/")
			}
			if s := m.Stats(); s.Policies[0].Requests[admit.LimiterError] != n {
				t.Errorf("FailOpen %v: %d limiter errors counted, want %d", failOpen, s.Policies[0].Requests[admit.LimiterError], n)
			}
			if want := map[bool]int{false: n, true: 0}[failOpen]; len(denied) != want {
				t.Errorf("FailOpen %v: %d requests denied, want %d", failOpen, len(denied), want)
			}
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			if len(lines) != n {
				t.Fatalf("FailOpen %v: %d log entries, want %d", failOpen, len(lines), n)
			}
			for i, line := range lines {
				var entry map[string]any
				if err := json.Unmarshal([]byte(line), &entry); err != nil {
					t.Fatal(err)
				}
				if e, _ := entry["error"].(string); !strings.Contains(e, "connection refused") {
					t.Errorf("FailOpen %v: request %d logged %q, want the limiter's cause", failOpen, i, e)
				}
			}
			for i, err := range denied {
				if !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("FailOpen %v: request %d denied with %v, want the limiter's cause", failOpen, i, err)
				}
			}
		}
	})
}

// TestStatsJSON checks that Stats marshals with its counts keyed by
// reason, the gate's counters only when there is a gate, and the
// protocol.
func TestStatsJSON(t *testing.T) {
	m := mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 1, Period: time.Hour}}})
	serve(m.Handler(ok), "192.0.2.1:1", "/")
	serve(m.Handler(ok), "192.0.2.1:1", "/")
	b, _ := json.Marshal(m.Stats())
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	req, _ := s["requests"].(map[string]any)
	if s["protocol"] != "http" || s["gate"] != nil || req["allowed"] != float64(1) || req["rate_limited"] != float64(1) ||
		!strings.Contains(string(b), `"policies":[{"name":"default","requests":{`) {
		t.Errorf("Stats without a gate: %s", b)
	}
	m = mustNew(t, Config{Limits: admit.Config{MaxInFlight: 2}})
	b, _ = json.Marshal(m.Stats())
	if !strings.Contains(string(b), `"gate":{"max":2,"in_flight":0,"peak":0,"waiting":0,"admitted":0,"shed":0,"timed_out":0`) {
		t.Errorf("Stats with a gate: %s", b)
	}
}

// TestClientKeyAndReset checks the key ClientKey gives a request, and that
// Reset with it unblocks the client in every policy, a route's included.
func TestClientKeyAndReset(t *testing.T) {
	m := mustNew(t, Config{Limits: admit.Config{
		Rate:     limits.Limit{Events: 1, Period: time.Hour},
		Policies: []admit.Policy{{Name: "login", Routes: []string{"/login"}, Rate: limits.Limit{Events: 1, Period: time.Hour}}},
	}})
	h := m.Handler(ok)
	serve(h, "198.51.100.7:1", "/login")
	if w := serve(h, "198.51.100.7:1", "/login"); w.Code != 429 {
		t.Fatalf("second request: %d", w.Code)
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "198.51.100.7:9"
	key := m.ClientKey(r)
	if key != "a:198.51.100.7/32" {
		t.Errorf("ClientKey = %q", key)
	}
	if err := m.Reset(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if w := serve(h, "198.51.100.7:1", "/login"); w.Code != 200 {
		t.Errorf("after Reset: %d, want the client unblocked in every policy", w.Code)
	}
}

// TestSharedGate gives one gate to two Middlewares, as a process serving
// two front ends does: a place one takes is one the other cannot.
func TestSharedGate(t *testing.T) {
	a := mustNew(t, Config{Limits: admit.Config{MaxInFlight: 1}})
	b := mustNew(t, Config{Limits: admit.Config{Gate: a.Engine().Gate()}})
	release, entered := make(chan struct{}), make(chan struct{})
	slowA := a.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		entered <- struct{}{}
		<-release
	}))
	done := make(chan int)
	go func() { done <- serve(slowA, "192.0.2.1:1", "/").Code }()
	<-entered
	if w := serve(b.Handler(ok), "192.0.2.2:1", "/"); w.Code != 503 || reasonOf(t, w) != "server_busy" {
		t.Errorf("b while a holds the shared place: %d %s, want 503 server_busy", w.Code, w.Body.String())
	}
	close(release)
	if code := <-done; code != 200 {
		t.Errorf("a's request: %d", code)
	}
	if w := serve(b.Handler(ok), "192.0.2.2:1", "/"); w.Code != 200 {
		t.Errorf("b once the place is free: %d", w.Code)
	}
	if s := b.Stats(); !s.SharedGate || s.Gate.Admitted != 2 || s.Requests[admit.ServerBusy] != 1 {
		t.Errorf("b's Stats: shared %v, gate %+v, %v", s.SharedGate, s.Gate, s.Requests)
	}
	if _, err := New(Config{Limits: admit.Config{Gate: a.Engine().Gate(), MaxInFlight: 4}}); err == nil {
		t.Error("New accepted MaxInFlight beside a shared Gate")
	}
}

// TestTierFromKeys checks that a tier is read only from a function of
// Keys: a Tier naming no function, or tiers without a Tier, are errors,
// in New and in Update, so that no client picks its own tier.
func TestTierFromKeys(t *testing.T) {
	min := func(n int) limits.Limit { return limits.Limit{Events: n, Period: time.Minute} }
	plan := map[string]func(*http.Request) string{"plan": func(*http.Request) string { return "free" }}
	tiers := map[string]admit.Policy{"free": {Rate: min(3)}, "pro": {Rate: min(30)}}
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"a header", Config{Limits: admit.Config{Rate: min(20), CallerKey: "X-API-Key", Tier: "plan", Tiers: tiers}}},
		{"another case", Config{Limits: admit.Config{Rate: min(20), CallerKey: "X-API-Key", Tier: "Plan", Tiers: tiers}, Keys: plan}},
		{"no Tier", Config{Limits: admit.Config{Rate: min(20), CallerKey: "X-API-Key", Tiers: tiers}, Keys: plan}},
		{"no Tier for a policy", Config{Limits: admit.Config{Rate: min(20), Policies: []admit.Policy{{Name: "p", Rate: min(5), Tiers: tiers}}}}},
		{"a key in another case", Config{Limits: admit.Config{Rate: min(20), CallerKey: "User"},
			Keys: map[string]func(*http.Request) string{"user": func(*http.Request) string { return "u" }}}},
	} {
		if _, err := New(c.cfg); err == nil {
			t.Errorf("%s: New accepted %+v", c.name, c.cfg.Limits)
		}
		m := mustNew(t, Config{Limits: admit.Config{Rate: min(20)}, Keys: c.cfg.Keys})
		if err := m.Update(c.cfg.Limits); err == nil {
			t.Errorf("%s: Update accepted %+v", c.name, c.cfg.Limits)
		}
	}
	// From Keys, the tier applies, whatever header the client sends.
	m := mustNew(t, Config{Limits: admit.Config{Rate: min(20), CallerKey: "X-API-Key", Tier: "plan", Tiers: tiers}, Keys: plan})
	allowed := 0
	for range 10 {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-API-Key", "k")
		r.Header.Set("plan", "pro")
		w := httptest.NewRecorder()
		m.Handler(ok).ServeHTTP(w, r)
		if w.Code == 200 {
			allowed++
		}
	}
	if allowed != 3 {
		t.Errorf("a free key sending plan: pro: %d of 10 allowed, want the free tier's 3", allowed)
	}
}
