// Package routertest holds the tests that the examples of routers
// (examples/chi, examples/echo, examples/gin) and httplimit/ginlimit share:
// a client of a service limited by httplimit, over loopback, and what it
// must see.
package routertest

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/httplimit"
)

// Problem is the part of httplimit's problem+json body the tests read.
type Problem struct {
	Status   int      `json:"status"`
	Reason   string   `json:"reason"`
	Violated []string `json:"violated-policies"`
}

// Response is what Do read of a response.
type Response struct {
	Code    int
	Header  http.Header
	Body    string
	Problem Problem // from a problem+json body
}

// Do sends a request without a body and reads its response, failing t if
// that fails.
func Do(t *testing.T, method, url string) Response {
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
	r := Response{Code: res.StatusCode, Header: res.Header, Body: string(b)}
	if res.Header.Get("Content-Type") == "application/problem+json" {
		if err := json.Unmarshal(b, &r.Problem); err != nil {
			t.Fatalf("%s %s: problem body %q: %v", method, url, b, err)
		}
	}
	return r
}

// CheckRefusal checks a 429 rate_limited refusal by policy, whose bucket
// refills one request every period.
func CheckRefusal(t *testing.T, what string, res Response, policy string, period int) {
	t.Helper()
	if res.Code != http.StatusTooManyRequests || res.Problem.Status != http.StatusTooManyRequests || res.Problem.Reason != limits.ReasonRateLimited.String() {
		t.Fatalf("%s: %d %q, want 429 rate_limited", what, res.Code, res.Body)
	}
	if len(res.Problem.Violated) != 1 || res.Problem.Violated[0] != policy {
		t.Errorf("%s: violated-policies %q, want [%s]", what, res.Problem.Violated, policy)
	}
	if got := res.Header.Get("RateLimit"); !strings.HasPrefix(got, `"`+policy+`";r=0;t=`) {
		t.Errorf("%s: RateLimit %q, want %s's, empty", what, got, policy)
	}
	if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || s < 1 || s > period {
		t.Errorf("%s: Retry-After %q, want 1 to %d s", what, res.Header.Get("Retry-After"), period)
	}
}

// RouterLimits checks the router that newRouter makes, as the examples of
// routers build it, served on loopback: it refuses a client over the login
// policy and then over the service-wide rate, with 429, the refusing
// policy's fields and Retry-After; a refused login costs nothing in the
// service-wide bucket, and the health probe passes throughout.
func RouterLimits(t *testing.T, newRouter func() (http.Handler, *httplimit.Middleware, error)) {
	h, m, err := newRouter()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	for i := range 5 {
		res := Do(t, "POST", srv.URL+"/login")
		if res.Code != http.StatusOK || res.Body != "welcome\n" {
			t.Fatalf("login %d: %d %q, want 200", i, res.Code, res.Body)
		}
		if got := res.Header.Get("RateLimit-Policy"); got != `"default";q=60;w=60, "login";q=5;w=60` {
			t.Errorf("login %d: RateLimit-Policy %q, want both policies", i, got)
		}
	}
	for i := range 3 {
		CheckRefusal(t, "login "+strconv.Itoa(5+i), Do(t, "POST", srv.URL+"/login"), "login", 12)
	}
	// 60 a minute: 5 logins served, the 3 refused cost nothing.
	for i := range 55 {
		res := Do(t, "GET", srv.URL+"/")
		if res.Code != http.StatusOK || res.Body != "hello\n" {
			t.Fatalf("request %d: %d %q, want 200", i, res.Code, res.Body)
		}
		if got, want := res.Header.Get("RateLimit"), `"default";r=`+strconv.Itoa(54-i)+`;t=`; !strings.HasPrefix(got, want) {
			t.Fatalf("request %d: RateLimit %q, want %s...", i, got, want)
		}
	}
	CheckRefusal(t, "request 61", Do(t, "GET", srv.URL+"/"), "default", 1)
	// Over both, refused by the service-wide rate, the first: Retry-After
	// is when both would allow it, the login policy's, about 12 s off.
	both := Do(t, "POST", srv.URL+"/login")
	CheckRefusal(t, "login over both", both, "default", 12)
	if s, _ := strconv.Atoi(both.Header.Get("Retry-After")); s < 2 {
		t.Errorf("login over both: Retry-After %d s, want the login policy's wait, not the service-wide rate's 1 s", s)
	}

	for range 3 {
		res := Do(t, "GET", srv.URL+"/healthz")
		if res.Code != http.StatusOK || res.Body != "ok\n" || res.Header.Get("RateLimit") != "" {
			t.Errorf("/healthz of a limited client: %d %q RateLimit %q, want 200 and no limit", res.Code, res.Body, res.Header.Get("RateLimit"))
		}
	}
	s := m.Stats().Requests
	if s[admit.Allowed] != 60 || s[limits.ReasonRateLimited] != 5 || s[admit.Exempt] != 3 {
		t.Errorf("Stats: allowed %d, rate limited %d, exempt %d; want 60, 5, 3", s[admit.Allowed], s[limits.ReasonRateLimited], s[admit.Exempt])
	}
}

// StreamReleasesCapacity checks that the router's event stream, at
// /events, gives its place in the gate back once started: while it is
// open, the gate has none in flight.
func StreamReleasesCapacity(t *testing.T, newRouter func() (http.Handler, *httplimit.Middleware, error)) {
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
