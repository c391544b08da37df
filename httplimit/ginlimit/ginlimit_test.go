package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/httplimit/ginlimit"
)

func init() { gin.SetMode(gin.TestMode) }

// TestRoutes serves a gin router behind a Middleware of 3 requests an
// hour per client and a gate of 1, with a login route that allows 1: the
// route's refusal gives back the global charge, a global refusal aborts
// the chain, ReleaseCapacity frees the gate's place from a gin handler,
// and a status the handler writes reaches both gin and the Middleware.
func TestRoutes(t *testing.T) {
	m, err := httplimit.New(httplimit.Config{MaxInFlight: 1, Rate: limits.Limit{Events: 3, Period: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	login, err := m.With(httplimit.Policy{Name: "login", Rate: limits.Limit{Events: 1, Period: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	r.Use(ginlimit.Handler(m.Handler))
	r.POST("/login", ginlimit.Handler(login.Handler), func(c *gin.Context) { c.String(http.StatusOK, "welcome") })
	inner := -1
	r.GET("/stream", func(c *gin.Context) {
		httplimit.ReleaseCapacity(c.Request)
		inner = m.Stats().Gate.InFlight
		c.String(http.StatusAccepted, "streaming")
	})
	reached := 0
	r.GET("/", func(c *gin.Context) { reached++; c.Status(http.StatusNoContent) })

	do := func(method, path string) int {
		w := httptest.NewRecorder()
		req := httptest.NewRequest(method, path, nil)
		req.RemoteAddr = "192.0.2.1:1"
		r.ServeHTTP(w, req)
		return w.Code
	}
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests, http.StatusTooManyRequests} {
		if got := do(http.MethodPost, "/login"); got != want {
			t.Fatalf("login %d: %d, want %d", i+1, got, want)
		}
	}
	// The refused logins cost nothing in the global bucket: 2 left.
	if got := do(http.MethodGet, "/stream"); got != http.StatusAccepted || inner != 0 {
		t.Errorf("stream: %d, %d in the gate after ReleaseCapacity; want 202 and 0", got, inner)
	}
	if got := do(http.MethodGet, "/"); got != http.StatusNoContent {
		t.Errorf("the third request: %d", got)
	}
	if got := do(http.MethodGet, "/"); got != http.StatusTooManyRequests || reached != 1 {
		t.Errorf("past the global limit: %d, handler reached %d times; want 429, once", got, reached)
	}
	if s := m.Stats(); s.Allowed != 3 || s.RateLimited != 3 {
		t.Errorf("Stats: %+v", s)
	}
}
