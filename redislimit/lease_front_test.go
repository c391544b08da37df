package redislimit

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/redislimit/redistest"
)

// TestLeaseHTTP checks that httplimit takes a GCRA in lease mode as its
// Limiter with nothing beyond the constructor: a client's requests are
// limited to the burst, most of them decided without a call to Redis.
func TestLeaseHTTP(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	g := must(New(c, 10, time.Hour, WithBurst(50), WithPrefix(freshPrefix()), WithLeases(16, 0)))
	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{Limiters: map[string]limits.Limiter{"redis": g}, Limiter: "redis"}})
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	codes := map[int]int{}
	for range 80 {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = "192.0.2.1:1234"
		h.ServeHTTP(rec, req)
		codes[rec.Code]++
	}
	if codes[http.StatusOK] != 50 || codes[http.StatusTooManyRequests] != 30 {
		t.Errorf("status codes %v, want 50 OK and 30 Too Many Requests", codes)
	}
	if s := g.LeaseStats(); s.Local < 40 {
		t.Errorf("lease counters %+v: most decisions should be local", s)
	}
}
