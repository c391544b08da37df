// Command ratelimit serves HTTP on loopback and limits each application,
// named by its appid request header, to a number of requests per window
// with a limits.Rate. Every response carries X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset, the seconds until the current
// window ends (rounded up); requests over the limit get 429 Too Many Requests.
//
//	go run ./examples/ratelimit            # serve on 127.0.0.1:8080
//	curl -i -H 'appid: 1' localhost:8080/
//	go run ./examples/ratelimit -demo      # send a few requests to itself and exit
//
// It is the rate limiter example of pingora done over: there the reset
// header is always 1, whatever the time left in the window, and requests
// without an appid are not limited at all; here they are refused.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/limitsgo/limits"
)

// limiter answers requests for one Rate and limit.
type limiter struct {
	rate  *limits.Rate
	limit int64
}

// ServeHTTP counts the request against its appid and answers it.
func (l *limiter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	appid := r.Header.Get("appid")
	if appid == "" {
		http.Error(w, "missing appid header", http.StatusBadRequest)
		return
	}
	// Every request counts, refused ones included, so a client that keeps
	// trying stays refused until the window ends.
	count := l.rate.Observe(appid, 1)
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.FormatInt(l.limit, 10))
	h.Set("X-RateLimit-Remaining", strconv.FormatInt(max(0, l.limit-count), 10))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(ceilSeconds(l.rate.ResetIn()), 10))
	if count > l.limit {
		http.Error(w, "too many requests", http.StatusTooManyRequests)
		return
	}
	fmt.Fprintf(w, "hello, %s\n", appid)
}

// ceilSeconds rounds d up to whole seconds, so that a client waiting that
// long never comes back before the window ends.
func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to serve on")
	limit := flag.Int64("limit", 5, "requests per window and appid")
	window := flag.Duration("window", 3*time.Second, "length of a window")
	demo := flag.Bool("demo", false, "serve on a free port, send a few requests, print the answers and exit")
	flag.Parse()
	if *limit < 1 || *window <= 0 {
		log.Fatal("ratelimit: -limit must be >= 1 and -window > 0")
	}
	l := &limiter{rate: limits.NewRate(*window), limit: *limit}
	if *demo {
		if err := runDemo(l, os.Stdout); err != nil {
			log.Fatal(err)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	srv := &http.Server{Addr: *addr, Handler: l, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Shutdown(context.Background())
	}()
	log.Printf("serving on http://%s (%d requests per %v per appid); Ctrl-C stops", *addr, *limit, *window)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}

// runDemo serves l on a free loopback port, sends requests from two
// applications, once at the start, once within the same window, and once
// after it ends, and prints what comes back.
func runDemo(l *limiter, out io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: l, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/"
	start := time.Now()
	send := func(appid string) error {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("appid", appid)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		h := resp.Header
		fmt.Fprintf(out, "%5.2fs  %-6s %6d %6s %9s %5ss\n", time.Since(start).Seconds(), appid, resp.StatusCode,
			h.Get("X-RateLimit-Limit"), h.Get("X-RateLimit-Remaining"), h.Get("X-RateLimit-Reset"))
		return nil
	}
	fmt.Fprintf(out, "%d requests per %v per appid\n", l.limit, l.rate.Interval())
	fmt.Fprintf(out, "%6s  %-6s %6s %6s %9s %6s\n", "time", "appid", "status", "limit", "remaining", "reset")
	var appids []string
	for range l.limit + 2 {
		appids = append(appids, "app-a")
	}
	appids = append(appids, "app-b", "app-b")
	for _, a := range appids {
		if err := send(a); err != nil {
			return err
		}
	}
	// Later in the same window: still refused, and the reset is nearer.
	time.Sleep(l.rate.Interval() * 6 / 10)
	if err := send("app-a"); err != nil {
		return err
	}
	// After the window ends: served again.
	time.Sleep(l.rate.ResetIn() + 10*time.Millisecond)
	return send("app-a")
}
