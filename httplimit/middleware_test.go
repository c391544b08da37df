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
	"github.com/limitsgo/limits/internal/front"
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
		m := mustNew(t, Config{Limiter: rec})
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
		m := mustNew(t, Config{Rate: limits.Limit{Events: 1, Period: time.Minute}})
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
		if resp.Header.Get("Retry-After") != "60" {
			t.Errorf("Retry-After %q, want 60", resp.Header.Get("Retry-After"))
		}
		c.CloseIdleConnections()
	})
}

func TestHeaderModes(t *testing.T) {
	tests := []struct {
		mode            HeaderMode
		ietf, legacy    bool
		wantLegacyReset string
	}{
		{HeadersIETF, true, false, ""},
		{HeadersIETFAndLegacy, true, true, "30"},
		{HeadersLegacy, false, true, "30"},
		{HeadersNone, false, false, ""},
	}
	for _, tt := range tests {
		m := mustNew(t, Config{Rate: limits.Limit{Events: 2, Period: time.Minute}, Headers: tt.mode})
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		m.Handler(ok).ServeHTTP(w, r)
		h := w.Result().Header
		if got := h.Get("RateLimit") != ""; got != tt.ietf {
			t.Errorf("mode %d: RateLimit present %v, want %v", tt.mode, got, tt.ietf)
		}
		if got := h.Get("X-RateLimit-Remaining") != ""; got != tt.legacy {
			t.Errorf("mode %d: X-RateLimit-Remaining present %v, want %v", tt.mode, got, tt.legacy)
		}
		if tt.legacy && (h.Get("X-RateLimit-Limit") != "2" || h.Get("X-RateLimit-Remaining") != "1" || h.Get("X-RateLimit-Reset") != tt.wantLegacyReset) {
			t.Errorf("mode %d: legacy headers %v", tt.mode, h)
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
			Exempt:               ExemptPaths("/healthz"),
			MaxInFlight:          1,
			Rate:                 limits.Limit{Events: 1, Period: time.Hour},
			MaxInFlightPerClient: 1,
			Timeout:              time.Second,
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
		close(release)
		synctest.Wait()
		if s := m.Stats(); s.Exempt != 5 || s.Allowed != 1 || s.ServerBusy != 1 {
			t.Errorf("Stats = %+v", s)
		}
		c.CloseIdleConnections()
	})
}

func TestGateBusyAndQueueWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				<-release
			}
		})
		m := mustNew(t, Config{MaxInFlight: 2, BusyRetryAfter: 1500 * time.Millisecond})
		l := pipeServer(t, m.Handler(h))
		for i := range 2 {
			goGet(t, l.client(fmt.Sprintf("192.0.2.%d:1", i)), "/slow")
		}
		synctest.Wait()
		resp, _ := get(t, l.client("192.0.2.9:1"), "/")
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "2" {
			t.Errorf("gate full: status %d, Retry-After %q; want 503, 2", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		close(release)
		synctest.Wait()
		if resp, _ := get(t, l.client("192.0.2.9:2"), "/"); resp.StatusCode != 200 {
			t.Errorf("after release: status %d", resp.StatusCode)
		}
		if s := m.Stats(); s.ServerBusy != 1 || s.Gate.InFlight != 0 || s.Gate.Peak != 2 {
			t.Errorf("Stats = %+v", s)
		}

		// With a queue wait, a request waits for a place that frees in time.
		mq := mustNew(t, Config{MaxInFlight: 1, QueueWait: 50 * time.Millisecond})
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
		m := mustNew(t, Config{MaxInFlight: 4, Timeout: time.Second})
		l := pipeServer(t, m.Handler(h))
		c := l.client("192.0.2.1:1")
		resp, body := get(t, c, "/fast")
		if resp.StatusCode != 201 || body != "made" || resp.Header.Get("X-Handler") != "yes" {
			t.Errorf("fast request: %d %q %v", resp.StatusCode, body, resp.Header)
		}
		start := time.Now()
		resp, body = get(t, c, "/slow")
		if resp.StatusCode != 503 || !strings.Contains(body, ReasonRequestTimeout) || time.Since(start) != time.Second {
			t.Errorf("slow request: %d %q after %v", resp.StatusCode, body, time.Since(start))
		}
		if n := m.Stats().Gate.InFlight; n != 1 {
			t.Errorf("gate in flight while the handler cleans up = %d, want 1", n)
		}
		if err := <-handlerDone; !errors.Is(err, http.ErrHandlerTimeout) {
			t.Errorf("write after the deadline: %v, want ErrHandlerTimeout", err)
		}
		synctest.Wait()
		if s := m.Stats(); s.Gate.InFlight != 0 || s.RequestTimeout != 1 || s.Allowed != 2 {
			t.Errorf("Stats = %+v", s)
		}
		c.CloseIdleConnections()
	})
}

// TestTimeoutPanic checks that a handler panicking under a deadline still
// releases its places and that the panic reaches net/http.
func TestTimeoutPanic(t *testing.T) {
	m := mustNew(t, Config{MaxInFlight: 1, MaxInFlightPerClient: 1, Timeout: time.Second})
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { panic("boom") }))
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Errorf("recovered %v, want boom", p)
			}
		}()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	}()
	if s := m.Stats(); s.Gate.InFlight != 0 || m.c.slots.Len() != 0 {
		t.Errorf("after a panic: %+v, per client %d", s, m.c.slots.Len())
	}
}

// TestAbortedAndPanickingRequestsRelease sends many requests that the
// client abandons mid-way, and some whose handler panics, through a real
// server, and checks that every count returns to 0.
func TestAbortedAndPanickingRequestsRelease(t *testing.T) {
	var entered sync.Map // request id -> chan struct{}, closed when its handler runs
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic(http.ErrAbortHandler)
		}
		ch, _ := entered.Load(r.URL.Query().Get("id"))
		close(ch.(chan struct{}))
		<-r.Context().Done() // until the client goes away
	})
	m := mustNew(t, Config{MaxInFlight: 50, MaxInFlightPerClient: 50})
	srv := httptest.NewServer(m.Handler(h))
	defer srv.Close()
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			url := srv.URL + "/panic"
			if i%4 != 0 {
				id := strconv.Itoa(i)
				ch := make(chan struct{})
				entered.Store(id, ch)
				url = srv.URL + "/hang?id=" + id
				go func() {
					<-ch
					cancel()
				}()
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if resp, err := srv.Client().Do(req); err == nil {
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for m.Stats().Gate.InFlight != 0 || m.c.slots.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("counts not released: %+v, per client %d", m.Stats(), m.c.slots.Len())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s := m.Stats(); s.Allowed != 40 || s.Gate.Admitted != 40 {
		t.Errorf("Stats = %+v", s)
	}
}

// TestCallerKeyRotation checks that a caller changing its session cookie
// on every request stays inside its address bucket, that one session is
// held to its own limit, and that its refusals do not drain the address
// bucket for other sessions behind the same address.
func TestCallerKeyRotation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mustNew(t, Config{
			Rate:      limits.Limit{Events: 2, Period: time.Minute},
			CallerKey: CookieKey("session"),
		})
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
		// Another address is untouched.
		resp, _ := get(t, l.client("198.51.100.2:1"), "/", "Cookie", "session=alice2")
		if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != `"address";q=8;w=60, "default";q=2;w=60` {
			t.Errorf("other address: %d, policy %q", resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
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
	m := mustNew(t, Config{Rate: limits.Limit{Events: 1, Period: time.Hour}, CallerKey: HeaderKey("X-Api-Key"), CallerLimiter: rec})
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Api-Key", "sk_live_secret")
	m.Handler(ok).ServeHTTP(httptest.NewRecorder(), r)
	m.Handler(ok).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	if len(rec.keys) != 2 || strings.Contains(rec.keys[0], "sk_live") || len(rec.keys[0]) != 34 || rec.keys[1] != "n:a:192.0.2.1/32" {
		t.Errorf("caller limiter saw keys %q", rec.keys)
	}

	m = mustNew(t, Config{Rate: limits.Limit{Events: 2, Period: time.Hour}, CallerKey: CookieKey("session")})
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

func TestPerClientConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		m := mustNew(t, Config{MaxInFlightPerClient: 1, InFlightStatus: http.StatusServiceUnavailable})
		l := pipeServer(t, m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				<-release
			}
		})))
		goGet(t, l.client("192.0.2.1:1"), "/slow")
		synctest.Wait()
		resp, body := get(t, l.client("192.0.2.1:2"), "/")
		if resp.StatusCode != 503 || !strings.Contains(body, ReasonConcurrencyLimited) {
			t.Errorf("second request from the client: %d %q", resp.StatusCode, body)
		}
		if resp, _ := get(t, l.client("192.0.2.2:1"), "/"); resp.StatusCode != 200 {
			t.Errorf("another client: %d", resp.StatusCode)
		}
		close(release)
		synctest.Wait()
		if resp, _ := get(t, l.client("192.0.2.1:3"), "/"); resp.StatusCode != 200 {
			t.Errorf("after the first finished: %d", resp.StatusCode)
		}
		if s := m.Stats(); s.ConcurrencyLimited != 1 {
			t.Errorf("Stats = %+v", s)
		}
	})
}

// TestReleaseCapacity has a long-lived handler give its gate place back
// early, as a WebSocket handler would after the upgrade.
func TestReleaseCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hold := make(chan struct{})
		m := mustNew(t, Config{MaxInFlight: 1})
		l := pipeServer(t, m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/socket" {
				ReleaseCapacity(r)
				ReleaseCapacity(r) // idempotent
				<-hold
			}
		})))
		goGet(t, l.client("192.0.2.1:1"), "/socket")
		synctest.Wait()
		if n := m.Stats().Gate.InFlight; n != 0 {
			t.Errorf("in flight after ReleaseCapacity = %d, want 0", n)
		}
		for i := range 3 {
			if resp, _ := get(t, l.client("192.0.2.2:1"), "/"); resp.StatusCode != 200 {
				t.Errorf("request %d beside the socket: %d", i, resp.StatusCode)
			}
		}
		close(hold)
		synctest.Wait()
		if s := m.Stats(); s.Gate.InFlight != 0 || s.Gate.Admitted != 4 {
			t.Errorf("Stats = %+v", s)
		}
		ReleaseCapacity(httptest.NewRequest(http.MethodGet, "/", nil)) // no place: no effect
	})
}

// failing is a Limiter that always fails.
type failing struct{}

func (failing) Refund(context.Context, string, limits.Decision) error { return nil }

func (failing) Take(context.Context, string, int) (limits.Decision, error) {
	return limits.Decision{}, errors.New("store unreachable")
}

func TestLimiterErrorPolicies(t *testing.T) {
	for _, tt := range []struct {
		policy ErrorPolicy
		status int
	}{{FailClosed, 503}, {FailOpen, 200}} {
		var logs bytes.Buffer
		m := mustNew(t, Config{Limiter: failing{}, OnLimiterError: tt.policy, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		w := httptest.NewRecorder()
		m.Handler(ok).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/x", nil))
		if w.Code != tt.status {
			t.Errorf("policy %d: status %d, want %d", tt.policy, w.Code, tt.status)
		}
		if s := m.Stats(); s.LimiterError != 1 {
			t.Errorf("policy %d: Stats = %+v", tt.policy, s)
		}
		var entry map[string]any
		if err := json.Unmarshal(logs.Bytes(), &entry); err != nil {
			t.Fatalf("policy %d: log %q: %v", tt.policy, logs.String(), err)
		}
		if entry["reason"] != ReasonLimiterError || entry["error"] != "store unreachable" || entry["path"] != "/x" || entry["level"] != "ERROR" {
			t.Errorf("policy %d: log entry %v", tt.policy, entry)
		}
	}
}

// TestLogsHashKeys checks that refusals are logged with a hash of the key,
// never the key.
func TestLogsHashKeys(t *testing.T) {
	var logs bytes.Buffer
	m := mustNew(t, Config{
		Rate:      limits.Limit{Events: 1, Period: time.Minute},
		CallerKey: HeaderKey("X-Api-Key"),
		Logger:    slog.New(slog.NewTextHandler(&logs, nil)),
	})
	for range 2 {
		r := httptest.NewRequest(http.MethodGet, "/v1/things", nil)
		r.Header.Set("X-Api-Key", "sk_live_secret_token")
		m.Handler(ok).ServeHTTP(httptest.NewRecorder(), r)
	}
	out := logs.String()
	if !strings.Contains(out, "reason=rate_limited") || !strings.Contains(out, "path=/v1/things") || !strings.Contains(out, "key_hash=") {
		t.Errorf("log %q lacks the refusal", out)
	}
	if strings.Contains(out, "sk_live") {
		t.Errorf("log %q reveals the key", out)
	}
}

func TestDenyHook(t *testing.T) {
	var got Denial
	m := mustNew(t, Config{
		Rate: limits.Limit{Events: 1, Period: time.Minute},
		Deny: func(w http.ResponseWriter, r *http.Request, d Denial) {
			got = d
			w.WriteHeader(d.Status)
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
	if got.Reason != ReasonRateLimited || got.Status != 429 || got.RetryAfter != time.Minute || got.Decision == nil || got.Decision.Allowed {
		t.Errorf("Denial = %+v", got)
	}
}

func TestTableFull(t *testing.T) {
	m := mustNew(t, Config{Rate: limits.Limit{Events: 1, Period: time.Hour}, MaxKeys: 1})
	h := m.Handler(ok)
	serve := func(remote string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		h.ServeHTTP(w, r)
		return w
	}
	serve("192.0.2.1:1")
	w := serve("192.0.2.2:1")
	if w.Code != 503 || !strings.Contains(w.Body.String(), ReasonTableFull) || w.Header().Get("Retry-After") != "1" {
		t.Errorf("new client in a full table: %d %q %v", w.Code, w.Body.String(), w.Header())
	}
	if s := m.Stats(); s.TableFull != 1 || s.RateLimited != 0 {
		t.Errorf("Stats = %+v", s)
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
	m := mustNew(t, Config{MaxInFlight: 3, Rate: limits.Limit{Events: 50, Period: time.Hour}, CallerKey: HeaderKey("X-Key")})
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
	if ok200.Load() > 200 || uint64(ok200.Load()) != s.Allowed {
		t.Errorf("%d served, Stats %+v", ok200.Load(), s)
	}
	if total := s.Allowed + s.RateLimited + s.ServerBusy; total != 800 || uint64(refused.Load()) != s.RateLimited+s.ServerBusy {
		t.Errorf("outcomes %+v do not add up to 800 requests (%d refused)", s, refused.Load())
	}
}

func TestSFString(t *testing.T) {
	for in, want := range map[string]string{"default": `"default"`, `a"b`: `"a\"b"`, `c\d`: `"c\\d"`, "": `""`} {
		if got, ok := front.SFString(in); !ok || got != want {
			t.Errorf("sfString(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestNewErrors(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{MaxInFlight: -1}, "httplimit: MaxInFlight must not be negative, got -1"},
		{Config{Timeout: -time.Second}, "httplimit: Timeout must not be negative, got -1000000000"},
		{Config{IPv6Prefix: 129}, "httplimit: prefix lengths must be within 0-32 (IPv4) and 0-128 (IPv6), got 0 and 129"},
		{Config{InFlightStatus: 200}, "httplimit: InFlightStatus must be a 4xx or 5xx status, got 200"},
		{Config{Rate: limits.Limit{Events: 0, Period: time.Second}}, "httplimit: Rate: limits: invalid limit: events must be >= 1, got 0"},
		{Config{CallerKey: HeaderKey("X")}, "httplimit: CallerKey needs Rate or CallerLimiter"},
		{Config{PolicyName: "café"}, `httplimit: PolicyName "café" must be printable ASCII`},
		{Config{PolicyName: "a\tb"}, `httplimit: PolicyName "a\tb" must be printable ASCII`},
		{Config{Rate: limits.Limit{Events: 1, Period: time.Hour}, Burst: 1 << 20}, "httplimit: Rate: limits: invalid limit: a burst of 1048576 at 1 per 1h0m0s takes too long to recover"},
	} {
		if _, err := New(tt.cfg); err == nil || err.Error() != tt.want {
			t.Errorf("New(%+v) = %v, want %q", tt.cfg, err, tt.want)
		}
	}
}

func TestLoadEnv(t *testing.T) {
	env := map[string]string{
		EnvRate: "100/min", EnvBurst: "20", EnvMaxInFlight: "64", EnvQueueWait: "15ms",
		EnvTimeout: "5s", EnvMaxKeys: "1000", EnvTrustedProxies: "10.0.0.0/8, 192.0.2.1",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	var c Config
	if err := c.LoadEnv("", lookup); err != nil {
		t.Fatal(err)
	}
	if c.Rate != (limits.Limit{Events: 100, Period: time.Minute}) || c.Burst != 20 || c.MaxInFlight != 64 ||
		c.QueueWait != 15*time.Millisecond || c.Timeout != 5*time.Second || c.MaxKeys != 1000 ||
		fmt.Sprint(c.TrustedProxies) != "[10.0.0.0/8 192.0.2.1/32]" {
		t.Errorf("LoadEnv gave %+v", c)
	}
	if _, err := New(c); err != nil {
		t.Errorf("New with the loaded config: %v", err)
	}
	for name, bad := range map[string]string{
		EnvRate: "100", EnvBurst: "0", EnvMaxInFlight: "-3", EnvQueueWait: "soon",
		EnvTimeout: "0s", EnvMaxKeys: "many", EnvTrustedProxies: "10.0.0.0/8,nope",
	} {
		c := Config{}
		err := c.LoadEnv("", func(k string) (string, bool) {
			if k == name {
				return bad, true
			}
			return "", false
		})
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: error %v, want one naming the variable", name, bad, err)
		}
	}
	c = Config{MaxInFlight: 7}
	if err := c.LoadEnv("", func(string) (string, bool) { return "", false }); err != nil || c.MaxInFlight != 7 {
		t.Errorf("unset variables changed the config: %+v, %v", c, err)
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
		for _, policy := range []ErrorPolicy{FailClosed, FailOpen} {
			var logs bytes.Buffer
			var denied []error
			m := mustNew(t, Config{Limiter: refusedAtDeadline{100 * time.Millisecond}, LimiterTimeout: 100 * time.Millisecond,
				OnLimiterError: policy, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
				Deny: func(w http.ResponseWriter, r *http.Request, d Denial) { denied = append(denied, d.Err) }})
			const n = 20
			for range n {
				serve(m.Handler(ok), "192.0.2.1:1", "/")
			}
			if s := m.Stats(); s.LimiterError != n {
				t.Errorf("policy %d: %d limiter errors counted, want %d", policy, s.LimiterError, n)
			}
			lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
			if len(lines) != n {
				t.Fatalf("policy %d: %d log entries, want %d", policy, len(lines), n)
			}
			for i, line := range lines {
				var entry map[string]any
				if err := json.Unmarshal([]byte(line), &entry); err != nil {
					t.Fatal(err)
				}
				if e, _ := entry["error"].(string); !strings.Contains(e, "connection refused") {
					t.Errorf("policy %d: request %d logged %q, want the limiter's cause", policy, i, e)
				}
			}
			for i, err := range denied {
				if !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("policy %d: request %d denied with %v, want the limiter's cause", policy, i, err)
				}
			}
		}
	})
}
