// Command echo serves an Echo router behind httplimit: a gate and a rate
// per client for every route (echo.WrapMiddleware), and a stricter policy
// of its own for the login route.
package main

import (
	"log"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/httplimit"
)

// newRouter returns the service's router and its Middleware.
func newRouter() (*echo.Echo, *httplimit.Middleware, error) {
	m, err := httplimit.New(httplimit.Config{
		MaxInFlight: 64,
		Rate:        limits.Limit{Events: 100, Period: time.Minute},
	})
	if err != nil {
		return nil, nil, err
	}
	login, err := m.With(httplimit.Policy{Name: "login", Rate: limits.Limit{Events: 5, Period: time.Minute}})
	if err != nil {
		return nil, nil, err
	}
	e := echo.New()
	e.Use(echo.WrapMiddleware(m.Handler))
	e.GET("/items", func(c echo.Context) error { return c.String(http.StatusOK, "items") })
	e.POST("/login", func(c echo.Context) error { return c.String(http.StatusOK, "welcome") }, echo.WrapMiddleware(login.Handler))
	e.GET("/stream", func(c echo.Context) error {
		httplimit.ReleaseCapacity(c.Request()) // the costly part is done
		return c.String(http.StatusOK, "streaming")
	})
	return e, m, nil
}

func main() {
	e, _, err := newRouter()
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(e.Start("localhost:8080"))
}
