package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestRouter checks the per-route policy under chi: the sixth login in a
// minute is refused by the login policy, which gives back the global
// charge, while the other routes go on; the health probe is exempt.
func TestRouter(t *testing.T) {
	h, m, err := newRouter()
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(method, path, nil)
		r.RemoteAddr = "192.0.2.1:1"
		h.ServeHTTP(w, r)
		return w
	}
	for i := range 6 {
		w := do(http.MethodPost, "/login")
		if want := http.StatusOK; i == 5 {
			if w.Code != http.StatusTooManyRequests || w.Header().Get("RateLimit") == "" {
				t.Errorf("login 6: %d %v, want 429 with the login policy's RateLimit", w.Code, w.Header())
			}
		} else if w.Code != want {
			t.Errorf("login %d: %d", i+1, w.Code)
		}
	}
	if w := do(http.MethodGet, "/items"); w.Code != http.StatusOK {
		t.Errorf("items after the logins: %d", w.Code)
	}
	do(http.MethodGet, "/healthz")
	s := m.Stats()
	if s.Allowed != 6 || s.RateLimited != 1 || s.Exempt != 1 {
		t.Errorf("Stats: %+v", s)
	}
	for _, p := range s.Policies {
		if p.Name == "default" && p.Allowed != 7 {
			t.Errorf("the global policy allowed %d, want 7: the refused login counts as allowed there but was given back", p.Allowed)
		}
	}
}
