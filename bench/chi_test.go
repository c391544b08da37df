package bench

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/httplimit"
)

// TestHttplimitWithChi mounts the middleware on a chi router, with a real
// server and client: routes under it are limited, exempt routes are not.
// The bench module hosts this test because it may depend on chi, which the
// core module must not.
func TestHttplimitWithChi(t *testing.T) {
	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{
		Exempt: []string{"/healthz"},
		Rate:   limits.Limit{Events: 2, Period: time.Hour},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(m.Handler)
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) {})
	r.Get("/items/{id}", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(chi.URLParam(r, "id"))) })
	srv := httptest.NewServer(r)
	defer srv.Close()
	var got []int
	for _, path := range []string{"/items/1", "/items/2", "/items/3", "/healthz", "/healthz"} {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got = append(got, resp.StatusCode)
	}
	want := []int{200, 200, 429, 200, 200}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("statuses %v, want %v", got, want)
		}
	}
}
