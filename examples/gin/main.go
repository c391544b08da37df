// Command gin serves a gin router behind httplimit, through the adapter
// of package ginlimit: a gate and a rate per client for every route, and a
// stricter policy of its own for the login route.
package main

import (
	"log"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/httplimit/ginlimit"
)

// newRouter returns the service's router and its Middleware.
func newRouter() (*gin.Engine, *httplimit.Middleware, error) {
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
	r := gin.New()
	r.Use(ginlimit.Handler(m.Handler))
	r.GET("/items", func(c *gin.Context) { c.String(http.StatusOK, "items") })
	r.POST("/login", ginlimit.Handler(login.Handler), func(c *gin.Context) { c.String(http.StatusOK, "welcome") })
	r.GET("/stream", func(c *gin.Context) {
		httplimit.ReleaseCapacity(c.Request) // the costly part is done
		c.String(http.StatusOK, "streaming")
	})
	return r, m, nil
}

func main() {
	r, _, err := newRouter()
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(r.Run("localhost:8080"))
}
