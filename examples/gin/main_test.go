package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/limitsgo/limits/httplimit"
)

// problem is the part of httplimit's problem+json body the test reads.
type problem struct {
	Status   int      `json:"status"`
	Reason   string   `json:"reason"`
	Violated []string `json:"violated-policies"`
}

type response struct {
	code    int
	header  http.Header
	body    string
	problem problem
}

func init() { gin.SetMode(gin.TestMode) }

func do(t *testing.T, method, url string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := response{code: res.StatusCode, header: res.Header, body: string(b)}
	if res.Header.Get("Content-Type") == "application/problem+json" {
		if err := json.Unmarshal(b, &r.problem); err != nil {
			t.Fatalf("%s %s: problem body %q: %v", method, url, b, err)
		}
	}
	return r
}

// checkRefusal checks a 429 rate_limited refusal by policy, whose bucket
// refills one request every period.
func checkRefusal(t *testing.T, what string, res response, policy string, period int) {
	t.Helper()
	if res.code != http.StatusTooManyRequests || res.problem.Status != http.StatusTooManyRequests || res.problem.Reason != httplimit.ReasonRateLimited {
		t.Fatalf("%s: %d %q, want 429 rate_limited", what, res.code, res.body)
	}
	if len(res.problem.Violated) != 1 || res.problem.Violated[0] != policy {
		t.Errorf("%s: violated-policies %q, want [%s]", what, res.problem.Violated, policy)
	}
	if got := res.header.Get("RateLimit"); !strings.HasPrefix(got, `"`+policy+`";r=0;t=`) {
		t.Errorf("%s: RateLimit %q, want %s's, empty", what, got, policy)
	}
	if s, err := strconv.Atoi(res.header.Get("Retry-After")); err != nil || s < 1 || s > period {
		t.Errorf("%s: Retry-After %q, want 1 to %d s", what, res.header.Get("Retry-After"), period)
	}
}

// The router, served on loopback, refuses a client over the login policy
// and then over the service-wide rate, with 429, the refusing policy's
// fields and Retry-After; a refused login costs nothing in the service-wide
// bucket, and the health probe passes throughout.
func TestRouterLimits(t *testing.T) {
	h, m, err := newRouter()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	for i := range 5 {
		res := do(t, "POST", srv.URL+"/login")
		if res.code != http.StatusOK || res.body != "welcome\n" {
			t.Fatalf("login %d: %d %q, want 200", i, res.code, res.body)
		}
		if got := res.header.Get("RateLimit-Policy"); got != `"default";q=60;w=60, "login";q=5;w=60` {
			t.Errorf("login %d: RateLimit-Policy %q, want both policies", i, got)
		}
	}
	for i := range 3 {
		checkRefusal(t, "login "+strconv.Itoa(5+i), do(t, "POST", srv.URL+"/login"), "login", 12)
	}
	// 60 a minute: 5 logins served, the 3 refused cost nothing.
	for i := range 55 {
		res := do(t, "GET", srv.URL+"/")
		if res.code != http.StatusOK || res.body != "hello\n" {
			t.Fatalf("request %d: %d %q, want 200", i, res.code, res.body)
		}
		if got, want := res.header.Get("RateLimit"), `"default";r=`+strconv.Itoa(54-i)+`;t=`; !strings.HasPrefix(got, want) {
			t.Fatalf("request %d: RateLimit %q, want %s...", i, got, want)
		}
	}
	checkRefusal(t, "request 61", do(t, "GET", srv.URL+"/"), "default", 1)
	checkRefusal(t, "login over both", do(t, "POST", srv.URL+"/login"), "default", 1)

	for range 3 {
		res := do(t, "GET", srv.URL+"/healthz")
		if res.code != http.StatusOK || res.body != "ok\n" || res.header.Get("RateLimit") != "" {
			t.Errorf("/healthz of a limited client: %d %q RateLimit %q, want 200 and no limit", res.code, res.body, res.header.Get("RateLimit"))
		}
	}
	s := m.Stats()
	if s.Allowed != 60 || s.RateLimited != 5 || s.Exempt != 3 {
		t.Errorf("Stats: allowed %d, rate limited %d, exempt %d; want 60, 5, 3", s.Allowed, s.RateLimited, s.Exempt)
	}
}

// An event stream gives its place in the gate back once started: while it
// is open, the gate has none in flight.
func TestStreamReleasesCapacity(t *testing.T) {
	h, m, err := newRouter()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	res, err := http.Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	if err != nil || line != "data: 0\n" || res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("/events: %q %v, %v", line, err, res.Header)
	}
	g := m.Stats().Gate
	if g == nil || g.Admitted != 1 || g.InFlight != 0 {
		t.Errorf("gate with a stream open: %+v, want 1 admitted and none in flight", g)
	}
	res.Body.Close()
}
