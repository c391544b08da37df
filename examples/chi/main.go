// Command chi serves a chi router behind httplimit: a gate and a rate per
// client for every route, and a stricter policy of its own for the login
// route, which chi mounts with r.With.
package main

import (
	"log"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/httplimit"
)

// newRouter returns the service's router and its Middleware.
func newRouter() (http.Handler, *httplimit.Middleware, error) {
	m, err := httplimit.New(httplimit.Config{
		MaxInFlight: 64,
		Rate:        limits.Limit{Events: 100, Period: time.Minute},
		Exempt:      httplimit.ExemptPaths("/healthz"),
	})
	if err != nil {
		return nil, nil, err
	}
	login, err := m.With(httplimit.Policy{Name: "login", Rate: limits.Limit{Events: 5, Period: time.Minute}})
	if err != nil {
		return nil, nil, err
	}
	r := chi.NewRouter()
	r.Use(m.Handler)
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	r.Get("/items", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("items")) })
	r.With(login.Handler).Post("/login", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("welcome")) })
	return r, m, nil
}

func main() {
	h, _, err := newRouter()
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe("localhost:8080", h))
}
