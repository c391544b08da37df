package ginlimit_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
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

	"github.com/gin-gonic/gin"
	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/httplimit/ginlimit"
	"github.com/limitsgo/limits/internal/routertest"
)

func init() { gin.SetMode(gin.TestMode) }

func mustNew(t *testing.T, cfg httplimit.Config) *httplimit.Middleware {
	t.Helper()
	m, err := httplimit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func ok(c *gin.Context) { c.String(http.StatusOK, "ok") }

// A route's policy, found by the request's method and path, charges the
// route's bucket after the service-wide one, and its refusal gives back
// what the service-wide layer charged.
func TestWrapRoutePolicy(t *testing.T) {
	m := mustNew(t, httplimit.Config{Limits: admit.Config{MaxInFlight: 8, Rate: limits.Limit{Events: 10, Period: time.Minute},
		Policies: []admit.Policy{{Name: "login", Routes: []string{"POST /login"}, Rate: limits.Limit{Events: 3, Period: time.Minute}}}}})
	var served atomic.Int64
	r := gin.New()
	r.Use(ginlimit.Wrap(m.Handler))
	r.POST("/login", func(c *gin.Context) { served.Add(1); ok(c) })
	r.GET("/", ok)
	srv := httptest.NewServer(r)
	defer srv.Close()

	for i := range 3 {
		res := routertest.Do(t, "POST", srv.URL+"/login")
		if res.Code != http.StatusOK {
			t.Fatalf("login %d: status %d, want 200", i, res.Code)
		}
		want := fmt.Sprintf(`"default";r=%d;t=`, 9-i)
		if got := res.Header.Get("RateLimit"); !strings.HasPrefix(got, want) || !strings.Contains(got, fmt.Sprintf(`, "login";r=%d;t=`, 2-i)) {
			t.Errorf("login %d: RateLimit %q, want default r=%d and login r=%d", i, got, 9-i, 2-i)
		}
		if got := res.Header.Get("RateLimit-Policy"); got != `"default";q=10;w=60, "login";q=3;w=60` {
			t.Errorf("login %d: RateLimit-Policy %q", i, got)
		}
	}
	for range 2 {
		res := routertest.Do(t, "POST", srv.URL+"/login")
		if res.Code != http.StatusTooManyRequests || res.Problem.Reason != limits.ReasonRateLimited.String() {
			t.Fatalf("login over the policy: %d %+v, want 429 rate_limited", res.Code, res.Problem)
		}
		if len(res.Problem.Violated) != 1 || res.Problem.Violated[0] != "login" {
			t.Errorf("refusal: violated-policies %q, want [login]", res.Problem.Violated)
		}
		if got := res.Header.Get("RateLimit"); !strings.HasPrefix(got, `"login";r=0;t=`) {
			t.Errorf("refusal: RateLimit %q, want the login policy's, empty", got)
		}
		if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || s < 1 || s > 20 {
			t.Errorf("refusal: Retry-After %q, want 1 to 20 s (a third of a minute at most)", res.Header.Get("Retry-After"))
		}
	}
	if n := served.Load(); n != 3 {
		t.Errorf("login handler ran %d times, want 3", n)
	}
	// 3 logins served and 1 request now: the refused logins cost nothing.
	res := routertest.Do(t, "GET", srv.URL+"/")
	if got := res.Header.Get("RateLimit"); res.Code != http.StatusOK || !strings.HasPrefix(got, `"default";r=6;t=`) {
		t.Errorf("after the refused logins: %d, RateLimit %q, want 200 and default r=6", res.Code, got)
	}
	s := m.Stats().Requests
	if s[admit.Allowed] != 4 || s[limits.ReasonRateLimited] != 2 {
		t.Errorf("Stats: allowed %d, rate limited %d; want 4 and 2", s[admit.Allowed], s[limits.ReasonRateLimited])
	}
}

// A handler behind Wrap gives its place in the gate back with
// ReleaseCapacity(c.Request): another request gets in while it still runs.
// One that does not release keeps the only place.
func TestWrapReleaseCapacity(t *testing.T) {
	m := mustNew(t, httplimit.Config{Limits: admit.Config{MaxInFlight: 1}})
	entered := make(chan struct{})
	finish := make(chan struct{})
	r := gin.New()
	r.Use(ginlimit.Wrap(m.Handler))
	hold := func(release bool) gin.HandlerFunc {
		return func(c *gin.Context) {
			if release {
				httplimit.ReleaseCapacity(c.Writer)
			}
			entered <- struct{}{}
			<-finish
			ok(c)
		}
	}
	r.GET("/stream", hold(true))
	r.GET("/hold", hold(false))
	r.GET("/", ok)
	srv := httptest.NewServer(r)
	defer srv.Close()

	for _, tc := range []struct {
		path string
		want int
	}{{"/hold", http.StatusServiceUnavailable}, {"/stream", http.StatusOK}} {
		done := make(chan routertest.Response, 1)
		go func() { done <- routertest.Do(t, "GET", srv.URL+tc.path) }()
		<-entered
		res := routertest.Do(t, "GET", srv.URL+"/")
		if res.Code != tc.want {
			t.Errorf("while %s runs: status %d, want %d", tc.path, res.Code, tc.want)
		}
		if tc.want == http.StatusServiceUnavailable {
			if res.Problem.Reason != admit.ServerBusy.String() || res.Header.Get("Retry-After") != "1" {
				t.Errorf("while %s runs: reason %q, Retry-After %q; want server_busy and 1", tc.path, res.Problem.Reason, res.Header.Get("Retry-After"))
			}
		}
		finish <- struct{}{}
		if res := <-done; res.Code != http.StatusOK {
			t.Errorf("%s: status %d, want 200", tc.path, res.Code)
		}
	}
	if g := m.Stats().Gate; g == nil || g.InFlight != 0 {
		t.Errorf("gate after the requests: %+v, want none in flight", g)
	}
}

// A refusal ends the gin chain: neither the handlers nor the middleware
// after Wrap run, and the middleware before it sees the refusal's status.
func TestWrapAbortsOnRefusal(t *testing.T) {
	m := mustNew(t, httplimit.Config{Limits: admit.Config{Rate: limits.Limit{Events: 1, Period: time.Minute}}})
	var after, handler atomic.Int64
	var statuses []int
	var mu sync.Mutex
	r := gin.New()
	r.Use(func(c *gin.Context) {
		c.Next()
		mu.Lock()
		statuses = append(statuses, c.Writer.Status())
		mu.Unlock()
		if c.IsAborted() != (c.Writer.Status() == http.StatusTooManyRequests) {
			t.Errorf("status %d, aborted %v", c.Writer.Status(), c.IsAborted())
		}
	})
	r.Use(ginlimit.Wrap(m.Handler))
	r.Use(func(c *gin.Context) { after.Add(1) })
	r.GET("/", func(c *gin.Context) { handler.Add(1); ok(c) })
	srv := httptest.NewServer(r)
	defer srv.Close()

	if res := routertest.Do(t, "GET", srv.URL+"/"); res.Code != http.StatusOK || res.Body != "ok" {
		t.Fatalf("first request: %d %q", res.Code, res.Body)
	}
	res := routertest.Do(t, "GET", srv.URL+"/")
	if res.Code != http.StatusTooManyRequests || res.Problem.Reason != limits.ReasonRateLimited.String() || res.Header.Get("Retry-After") == "" {
		t.Fatalf("second request: %d %+v Retry-After %q, want 429 rate_limited with Retry-After", res.Code, res.Problem, res.Header.Get("Retry-After"))
	}
	if after.Load() != 1 || handler.Load() != 1 {
		t.Errorf("after the refusal: middleware after Wrap ran %d times, handler %d; want 1 and 1", after.Load(), handler.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(statuses) != "[200 429]" {
		t.Errorf("statuses seen before Wrap: %v, want [200 429]", statuses)
	}
}

// recorder is a middleware that wraps the writer, as a middleware that
// watches the status does: the gin chain must write through it.
type recorder struct {
	http.ResponseWriter
	mu       sync.Mutex
	status   int
	flushes  int
	hijacked bool
}

func (w *recorder) WriteHeader(code int) {
	w.mu.Lock()
	if w.status == 0 {
		w.status = code
	}
	w.mu.Unlock()
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	w.mu.Lock()
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.mu.Unlock()
	return w.ResponseWriter.Write(b)
}

func (w *recorder) Flush() {
	w.mu.Lock()
	w.flushes++
	w.mu.Unlock()
	http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.mu.Lock()
	w.hijacked = true
	w.mu.Unlock()
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func recording(seen chan<- *recorder) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rw := &recorder{ResponseWriter: w}
			next.ServeHTTP(rw, r)
			seen <- rw
		})
	}
}

// The chain writes through the writer the middleware passes on, with gin's
// semantics: a status set without a body is sent when the chain returns,
// and Flush and Hijack reach the middleware's writer.
func TestWrapWritesThroughMiddleware(t *testing.T) {
	seen := make(chan *recorder, 1)
	r := gin.New()
	// The statuses the middleware before Wrap sees, once the chain has
	// returned: after the answer is sent, and for a hijacked connection
	// after the server stopped tracking the request.
	outer := make(chan int, 4)
	r.Use(func(c *gin.Context) {
		c.Next()
		outer <- c.Writer.Status()
	})
	r.Use(ginlimit.Wrap(recording(seen)))
	r.GET("/json", func(c *gin.Context) { c.JSON(http.StatusCreated, gin.H{"a": 1}) })
	r.GET("/status", func(c *gin.Context) { c.Status(http.StatusAccepted) })
	r.GET("/flush", func(c *gin.Context) { c.String(http.StatusOK, "a"); c.Writer.Flush() })
	r.GET("/hijack", func(c *gin.Context) {
		conn, rw, err := c.Writer.Hijack()
		if err != nil {
			t.Errorf("Hijack: %v", err)
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
		rw.Flush()
	})
	srv := httptest.NewServer(r)

	for _, tc := range []struct {
		path, body string
		code       int
	}{
		{"/json", `{"a":1}`, http.StatusCreated},
		{"/status", "", http.StatusAccepted},
		{"/flush", "a", http.StatusOK},
		{"/hijack", "hi", http.StatusOK},
	} {
		res := routertest.Do(t, "GET", srv.URL+tc.path)
		rw := <-seen
		if res.Code != tc.code || res.Body != tc.body {
			t.Errorf("%s: %d %q, want %d %q", tc.path, res.Code, res.Body, tc.code, tc.body)
		}
		switch tc.path {
		case "/hijack":
			if !rw.hijacked {
				t.Errorf("%s: the middleware's writer was not asked to hijack", tc.path)
			}
		case "/flush":
			if rw.flushes == 0 {
				t.Errorf("%s: the middleware's writer was not flushed", tc.path)
			}
			fallthrough
		default:
			if rw.status != tc.code {
				t.Errorf("%s: the middleware saw status %d, want %d", tc.path, rw.status, tc.code)
			}
		}
	}
	srv.Close()
	var got []int
	for range 4 {
		select {
		case code := <-outer:
			got = append(got, code)
		case <-time.After(5 * time.Second):
			t.Fatalf("statuses seen before Wrap: %v, and no more after 5s", got)
		}
	}
	// In the order the chains returned, which the client's reading of
	// each answer does not wait for.
	for _, want := range []int{http.StatusCreated, http.StatusAccepted, http.StatusOK} {
		if !slices.Contains(got, want) {
			t.Errorf("statuses seen before Wrap: %v, want %d among them", got, want)
		}
	}
}

// With Config.Timeout, the chain runs on the middleware's goroutine and
// writes to its buffer: an answer in time is sent whole; past the
// deadline, the client gets request_timeout and nothing the handler wrote,
// and Wrap returns only once the chain has, so that gin does not reuse the
// gin.Context under it.
func TestWrapTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := mustNew(t, httplimit.Config{Limits: admit.Config{MaxInFlight: 4, Timeout: time.Second}})
		var returned atomic.Bool
		r := gin.New()
		r.Use(ginlimit.Wrap(m.Handler))
		r.GET("/fast", func(c *gin.Context) { c.Header("X-Handler", "1"); c.String(http.StatusCreated, "done") })
		r.GET("/slow", func(c *gin.Context) {
			c.String(http.StatusOK, "partial")
			<-c.Request.Context().Done()
			time.Sleep(time.Second) // still using c after the deadline
			c.Header("X-Late", "1")
			c.Set("late", true)
			returned.Store(true)
		})

		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest("GET", "/fast", nil))
		if w.Code != http.StatusCreated || w.Body.String() != "done" || w.Header().Get("X-Handler") != "1" {
			t.Errorf("/fast: %d %q %v", w.Code, w.Body, w.Header())
		}

		w = httptest.NewRecorder()
		start := time.Now()
		r.ServeHTTP(w, httptest.NewRequest("GET", "/slow", nil))
		if !returned.Load() {
			t.Error("/slow: Wrap returned before the chain")
		}
		if d := time.Since(start); d != 2*time.Second {
			t.Errorf("/slow: served in %v, want 2s (deadline, then the handler's second)", d)
		}
		var p routertest.Problem
		if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != http.StatusServiceUnavailable || p.Reason != admit.RequestTimeout.String() {
			t.Errorf("/slow: %d %q, want 503 request_timeout alone", w.Code, w.Body)
		}
		if !w.Flushed {
			t.Error("/slow: the refusal was not flushed at the deadline")
		}
		if w.Header().Get("X-Late") != "" {
			t.Error("/slow: a header set after the deadline reached the client")
		}
		if g := m.Stats().Gate; g == nil || g.InFlight != 0 {
			t.Errorf("gate after the requests: %+v, want none in flight", g)
		}
	})
}

// A handler that panics behind Wrap reaches gin's Recovery before it, with
// the gin writer put back, and its place in the gate is given back: with
// or without Timeout, which runs the chain on another goroutine.
func TestWrapPanic(t *testing.T) {
	for _, timeout := range []time.Duration{0, time.Second} {
		t.Run(fmt.Sprint("timeout=", timeout), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := mustNew(t, httplimit.Config{Limits: admit.Config{MaxInFlight: 1, Timeout: timeout}})
				r := gin.New()
				r.Use(gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, err any) {
					c.String(http.StatusInternalServerError, "recovered: %v", err)
				}))
				r.Use(ginlimit.Wrap(m.Handler))
				r.GET("/panic", func(c *gin.Context) { c.Header("X-Handler", "1"); panic("boom") })
				r.GET("/", ok)
				for _, path := range []string{"/panic", "/", "/panic", "/"} {
					w := httptest.NewRecorder()
					r.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
					want, code := "ok", http.StatusOK
					if path == "/panic" {
						want, code = "recovered: boom", http.StatusInternalServerError
					}
					if w.Code != code || w.Body.String() != want {
						t.Errorf("%s: %d %q, want %d %q", path, w.Code, w.Body, code, want)
					}
				}
				if g := m.Stats().Gate; g == nil || g.InFlight != 0 || g.Admitted != 4 {
					t.Errorf("gate after the requests: %+v, want 4 admitted and none in flight", g)
				}
			})
		})
	}
}

// Many requests at once through Wrap with Timeout: each gets either its
// handler's whole answer, when it returns in time, or request_timeout
// alone, as the handler's duration says; Wrap never returns before its
// chain, and the gate ends empty, its counts matching.
func TestWrapTimeoutConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 64
		m := mustNew(t, httplimit.Config{Limits: admit.Config{MaxInFlight: n, Timeout: time.Second}})
		var running atomic.Int64
		r := gin.New()
		r.Use(ginlimit.Wrap(m.Handler))
		r.GET("/:ms", func(c *gin.Context) {
			running.Add(1)
			defer running.Add(-1)
			ms, _ := strconv.Atoi(c.Param("ms"))
			c.Header("X-Ms", c.Param("ms"))
			time.Sleep(time.Duration(ms) * time.Millisecond)
			c.String(http.StatusOK, "slept %d", ms)
		})
		var wg sync.WaitGroup
		var timedOut atomic.Int64
		for i := range n {
			wg.Go(func() {
				ms := 100 + 40*i // from 100ms to 2.62s; past 1s for i > 22
				w := httptest.NewRecorder()
				r.ServeHTTP(w, httptest.NewRequest("GET", "/"+strconv.Itoa(ms), nil))
				if ms < 1000 {
					if w.Code != http.StatusOK || w.Body.String() != fmt.Sprint("slept ", ms) || w.Header().Get("X-Ms") != strconv.Itoa(ms) {
						t.Errorf("%dms: %d %q %v, want the handler's answer", ms, w.Code, w.Body, w.Header())
					}
					return
				}
				timedOut.Add(1)
				var p routertest.Problem
				if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || w.Code != http.StatusServiceUnavailable || p.Reason != admit.RequestTimeout.String() || w.Header().Get("X-Ms") != "" {
					t.Errorf("%dms: %d %q %v, want request_timeout alone", ms, w.Code, w.Body, w.Header())
				}
			})
		}
		wg.Wait()
		if k := running.Load(); k != 0 {
			t.Errorf("%d handlers still running once every Wrap returned", k)
		}
		s := m.Stats()
		if c := s.Requests; c[admit.Allowed] != n || c[admit.RequestTimeout] != uint64(timedOut.Load()) || timedOut.Load() != n-23 {
			t.Errorf("Stats: allowed %d, request timeout %d; want %d and %d", c[admit.Allowed], c[admit.RequestTimeout], n, n-23)
		}
		if s.Gate == nil || s.Gate.InFlight != 0 || s.Gate.Admitted != n {
			t.Errorf("gate: %+v, want %d admitted and none in flight", s.Gate, n)
		}
	})
}
