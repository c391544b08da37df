package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitsgo/limits"
)

func get(t *testing.T, url, appid string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if appid != "" {
		req.Header.Set("appid", appid)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func TestLimiterHeaders(t *testing.T) {
	l := &limiter{rate: limits.NewRate(time.Hour), limit: 3}
	srv := httptest.NewServer(l)
	defer srv.Close()
	for i, want := range []struct {
		status    int
		remaining string
	}{{200, "2"}, {200, "1"}, {200, "0"}, {429, "0"}, {429, "0"}} {
		before := l.rate.ResetIn()
		resp := get(t, srv.URL, "app")
		after := l.rate.ResetIn()
		if resp.StatusCode != want.status {
			t.Errorf("request %d: status %d, want %d", i, resp.StatusCode, want.status)
		}
		h := resp.Header
		if got := h.Get("X-RateLimit-Limit"); got != "3" {
			t.Errorf("request %d: limit %q, want 3", i, got)
		}
		if got := h.Get("X-RateLimit-Remaining"); got != want.remaining {
			t.Errorf("request %d: remaining %q, want %s", i, got, want.remaining)
		}
		// The reset is the time left in the window, rounded up: between the
		// values just after and just before the request.
		reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
		if err != nil || reset < ceilSeconds(after) || reset > ceilSeconds(before) {
			t.Errorf("request %d: reset %q, want between %d and %d", i, h.Get("X-RateLimit-Reset"), ceilSeconds(after), ceilSeconds(before))
		}
	}
	if resp := get(t, srv.URL, "other"); resp.StatusCode != 200 || resp.Header.Get("X-RateLimit-Remaining") != "2" {
		t.Errorf("another appid: status %d, remaining %q; want 200, 2", resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
	}
	if resp := get(t, srv.URL, ""); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("no appid: status %d, want 400", resp.StatusCode)
	}
}

func TestCeilSeconds(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want int64
	}{{0, 0}, {time.Nanosecond, 1}, {time.Second, 1}, {time.Second + 1, 2}, {59500 * time.Millisecond, 60}} {
		if got := ceilSeconds(tt.d); got != tt.want {
			t.Errorf("ceilSeconds(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
}

func TestDemo(t *testing.T) {
	l := &limiter{rate: limits.NewRate(time.Second), limit: 2}
	var out bytes.Buffer
	if err := runDemo(l, &out); err != nil {
		t.Fatal(err)
	}
	var statuses []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n")[2:] {
		statuses = append(statuses, strings.Fields(line)[1]+":"+strings.Fields(line)[2])
	}
	want := "app-a:200 app-a:200 app-a:429 app-a:429 app-b:200 app-b:200 app-a:429 app-a:200"
	if got := strings.Join(statuses, " "); got != want {
		t.Errorf("demo answered\n%s\nwant %s", out.String(), want)
	}
}
