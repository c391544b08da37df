package ginlimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/httplimit/ginlimit"
)

// A gin engine with one gate and a limit per client for the whole service,
// and a stricter policy on its login route. The login refused by its policy
// gets back what the service-wide limit charged.
func ExampleWrap() {
	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{
		Exempt:      []string{"/healthz"},
		MaxInFlight: 512,
		Rate:        limits.Limit{Events: 100, Period: time.Minute},
		Policies: []admit.Policy{
			{Name: "login", Routes: []string{"POST /login"}, Rate: limits.Limit{Events: 2, Period: time.Minute}},
		},
	}})
	if err != nil {
		log.Fatal(err)
	}
	r := gin.New()
	r.Use(ginlimit.Wrap(m.Handler))
	r.GET("/healthz", func(c *gin.Context) { c.String(http.StatusOK, "ok") })
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "hello") })
	r.POST("/login", func(c *gin.Context) { c.String(http.StatusOK, "welcome") })

	for _, path := range []string{"/login", "/login", "/login", "/", "/healthz"} {
		method := http.MethodGet
		if path == "/login" {
			method = http.MethodPost
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		line := fmt.Sprint(path, " ", w.Code, " ", w.Header().Get("RateLimit"), " ", w.Header().Get("Retry-After"))
		fmt.Println(strings.TrimRight(line, " "))
	}
	// Output:
	// /login 200 "default";r=99;t=1, "login";r=1;t=30
	// /login 200 "default";r=98;t=2, "login";r=0;t=60
	// /login 429 "login";r=0;t=30 30
	// / 200 "default";r=97;t=2
	// /healthz 200
}
