package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"
)

// TestRouter checks the per-route policy under gin: the sixth login is
// refused by the login policy, which gives back the global charge, the
// other routes go on, and ReleaseCapacity reaches the request's place.
func TestRouter(t *testing.T) {
	e, m, err := newRouter()
	gin.SetMode(gin.TestMode)
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path string) int {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(method, path, nil)
		r.RemoteAddr = "192.0.2.1:1"
		e.ServeHTTP(w, r)
		return w.Code
	}
	for i := range 6 {
		want := http.StatusOK
		if i == 5 {
			want = http.StatusTooManyRequests
		}
		if got := do(http.MethodPost, "/login"); got != want {
			t.Errorf("login %d: %d, want %d", i+1, got, want)
		}
	}
	if got := do(http.MethodGet, "/items"); got != http.StatusOK {
		t.Errorf("items after the logins: %d", got)
	}
	if got := do(http.MethodGet, "/stream"); got != http.StatusOK {
		t.Errorf("stream: %d", got)
	}
	s := m.Stats()
	if s.Allowed != 7 || s.RateLimited != 1 || s.Gate.InFlight != 0 || s.Gate.Admitted != 8 {
		t.Errorf("Stats: %+v, gate %+v", s, *s.Gate)
	}
	for _, p := range s.Policies {
		if p.Name == "default" && p.Allowed != 8 {
			t.Errorf("the global policy allowed %d, want 8", p.Allowed)
		}
	}
}
