// Command gin serves a gin engine behind httplimit: one gate and a rate per
// client address for the whole service, a stricter policy on its login
// route, a stream of events that gives its place in the gate back once it
// has started, and health probes that bypass every limit.
//
//	go run .                                  # serve on 127.0.0.1:8080
//	curl -i localhost:8080/
//	curl -i -X POST localhost:8080/login      # the sixth in a minute gets 429
//	curl -N localhost:8080/events             # one event a second
//
// gin takes httplimit's middleware through ginlimit.Wrap, given to Use;
// the login route's policy is found by the request's method and path. The
// handlers write through the writer the middleware passes on (c.Writer
// unwraps to it), so httplimit.ReleaseCapacity(c.Writer) works from them.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/httplimit/ginlimit"
)

// newRouter returns the service's router, limited by m: at most 64 requests
// in progress (503 server_busy beyond), 60 a minute per client address and
// 5 a minute to /login (429 rate_limited beyond), /healthz exempt; an
// /events stream counts against the gate only until it has started.
func newRouter() (http.Handler, *httplimit.Middleware, error) {
	m, err := httplimit.New(httplimit.Config{Limits: admit.Config{
		Exempt:      []string{"/healthz"},
		MaxInFlight: 64,
		Rate:        limits.Limit{Events: 60, Period: time.Minute},
		Policies: []admit.Policy{
			{Name: "login", Routes: []string{"POST /login"}, Rate: limits.Limit{Events: 5, Period: time.Minute}},
		},
	}})
	if err != nil {
		return nil, nil, err
	}

	r := gin.New()
	r.Use(gin.Recovery(), ginlimit.Wrap(m.Handler))
	r.GET("/healthz", func(c *gin.Context) { c.String(http.StatusOK, "ok\n") })
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "hello\n") })
	r.POST("/login", func(c *gin.Context) { c.String(http.StatusOK, "welcome\n") })
	r.GET("/events", events)
	return r, m, nil
}

// events streams one Server-Sent Event a second until the client leaves.
// Once the stream has started, it gives its place in the gate back: a few
// hundred open streams must not fill the gate.
func events(c *gin.Context) {
	httplimit.ReleaseCapacity(c.Writer)
	c.Header("Content-Type", "text/event-stream")
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for i := 0; ; i++ {
		if _, err := fmt.Fprintf(c.Writer, "data: %d\n\n", i); err != nil {
			return
		}
		c.Writer.Flush()
		select {
		case <-c.Request.Context().Done():
			return
		case <-tick.C:
		}
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	flag.Parse()
	gin.SetMode(gin.ReleaseMode)
	h, _, err := newRouter()
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	log.Printf("serving on http://%s", *addr)
	log.Fatal(srv.ListenAndServe())
}
