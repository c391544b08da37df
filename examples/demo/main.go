// Command demo shows the httplimit middleware at work: it serves a small
// API on loopback behind the middleware, with the middleware's Prometheus
// metrics at /metrics next to it, drives a few seconds of traffic from
// simulated clients at the API, and prints what each client got and what
// the metrics say. It is a module of its own, so that the library's
// module needs no Prometheus client; from the repository's root:
//
//	cd examples/demo && go run .
//	cd examples/demo && go run . -keep   # then serve until interrupted, for curl or a Prometheus
//
// The limits come from limits.json (-config), then from LIMITS_*
// environment variables (admit.Config.LoadEnv). While the demo serves, a
// SIGHUP reads them again and applies them at once, keeping every
// client's state and every counter: the demo shows it, editing a copy of
// the file and sending itself SIGHUP after the traffic.
//
// The clients:
//
//   - polite: one user at 4 requests a second, well within the limits;
//   - abusive: one session sending 1,000 requests a second;
//   - office: five users behind one NAT address, each with its own session,
//     each at 5 requests a second;
//   - rotator: a client sending a new session cookie with every request,
//     trying to escape its limit;
//   - probe: a health check every 100ms, exempt from every limit;
//   - burst: 40 slow report requests at once, more than the gate admits.
//
// Every request comes from 127.0.0.1; the clients stand for different
// addresses with X-Forwarded-For, which the middleware reads because
// loopback is configured as a trusted proxy.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/limitsprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	d := flag.Duration("duration", 3*time.Second, "how long the clients send traffic")
	addr := flag.String("addr", "127.0.0.1:0", "the address to serve the API and /metrics on")
	keep := flag.Bool("keep", false, "keep serving after the traffic, until interrupted")
	path := flag.String("config", "limits.json", "the file of the limits, read again on SIGHUP")
	flag.Parse()
	var hold func()
	if *keep {
		hold = func() {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			<-ctx.Done()
		}
	}
	if err := run(os.Stdout, *addr, *d, *path, hold); err != nil {
		log.Fatal(err)
	}
}

// load reads the limits of the demo from the JSON file at path, then from
// the environment: limits.json has 10 requests a second per session, 40
// per address, 8 requests in flight at most.
func load(path string) (admit.Config, error) {
	var c admit.Config
	b, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, c.LoadEnv("", nil)
}

// reload applies the limits of the file at path to m on each SIGHUP,
// until ctx ends, and writes what changed to out.
func reload(ctx context.Context, m *httplimit.Middleware, path func() string, out io.Writer, done chan<- error) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		c, err := load(path())
		if err == nil {
			err = m.Update(c)
		}
		if err != nil {
			fmt.Fprintf(out, "SIGHUP: %v; the limits are unchanged\n", err)
		} else {
			fmt.Fprintf(out, "SIGHUP: %s read again: %v per session, %d in flight at most\n", path(), c.Rate, c.MaxInFlight)
		}
		if done != nil {
			done <- err
		}
	}
}

// app is the service behind the middleware.
func app() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/api", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * time.Millisecond)
		io.WriteString(w, "{}\n")
	})
	mux.HandleFunc("/report", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(300 * time.Millisecond):
			io.WriteString(w, "report\n")
		case <-r.Context().Done():
		}
	})
	return mux
}

// tally counts one client's answers.
type tally struct {
	mu         sync.Mutex
	status     map[int]int
	retryAfter []int
	errors     int
}

func (t *tally) add(resp *http.Response, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.errors++
		return
	}
	t.status[resp.StatusCode]++
	if ra := resp.Header.Get("Retry-After"); ra != "" {
		if n, err := strconv.Atoi(ra); err == nil {
			t.retryAfter = append(t.retryAfter, n)
		}
	}
}

// client is one simulated client: a name, the address it stands for, and
// its traffic.
type client struct {
	name, addr string
	drive      func(ctx context.Context, send func(path, session string))
}

// every calls f every period until ctx ends.
func every(ctx context.Context, period time.Duration, f func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		f()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func clients() []client {
	return []client{
		{"polite", "192.0.2.10", func(ctx context.Context, send func(string, string)) {
			every(ctx, 250*time.Millisecond, func() { send("/api", "polite-1") })
		}},
		{"abusive", "203.0.113.66", func(ctx context.Context, send func(string, string)) {
			every(ctx, time.Millisecond, func() { send("/api", "abuser-1") })
		}},
		{"office (5 users)", "198.51.100.20", func(ctx context.Context, send func(string, string)) {
			var wg sync.WaitGroup
			for u := range 5 {
				wg.Go(func() {
					every(ctx, 200*time.Millisecond, func() { send("/api", fmt.Sprintf("office-%d", u)) })
				})
			}
			wg.Wait()
		}},
		{"rotator", "203.0.113.99", func(ctx context.Context, send func(string, string)) {
			i := 0
			every(ctx, 5*time.Millisecond, func() {
				i++
				send("/api", fmt.Sprintf("fresh-%d", i))
			})
		}},
		{"probe", "10.0.0.2", func(ctx context.Context, send func(string, string)) {
			every(ctx, 100*time.Millisecond, func() { send("/healthz", "") })
		}},
		{"burst", "192.0.2.77", func(ctx context.Context, send func(string, string)) {
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
				return
			}
			var wg sync.WaitGroup
			for i := range 40 {
				wg.Go(func() { send("/report", fmt.Sprintf("burst-%d", i)) })
			}
			wg.Wait()
		}},
	}
}

// run serves the demo at addr (a free loopback port for "127.0.0.1:0"),
// with the limits of the file at path, drives the clients for d and
// writes the table and the key metrics to out; then shows a reload of the
// limits on SIGHUP, and, if hold is not nil, calls it before it stops
// serving.
func run(out io.Writer, addr string, d time.Duration, path string, hold func()) error {
	cfg, err := load(path)
	if err != nil {
		return err
	}
	m, err := httplimit.New(httplimit.Config{Limits: cfg})
	if err != nil {
		return err
	}
	var file atomic.Value
	file.Store(path)
	reloaded := make(chan error, 1)
	rctx, stop := context.WithCancel(context.Background())
	defer stop()
	go reload(rctx, m, func() string { return file.Load().(string) }, out, reloaded)
	// The metrics of the middleware, with its gate, and nothing else, at
	// /metrics, outside the middleware: a scrape is never limited.
	reg := prometheus.NewRegistry()
	if err := limitsprom.Register(reg, "demo", m); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", m.Handler(app()))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(out, "API at %s/api, metrics at %s/metrics\n\n", base, base)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer hc.CloseIdleConnections()

	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cs := clients()
	tallies := make([]*tally, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		t := &tally{status: map[int]int{}}
		tallies[i] = t
		wg.Go(func() {
			c.drive(ctx, func(path, session string) {
				req, err := http.NewRequest(http.MethodGet, base+path, nil)
				if err != nil {
					t.add(nil, err)
					return
				}
				req.Header.Set("X-Forwarded-For", c.addr)
				if session != "" {
					req.AddCookie(&http.Cookie{Name: "session", Value: session})
				}
				resp, err := hc.Do(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				t.add(resp, err)
			})
		})
	}
	wg.Wait()

	fmt.Fprintf(out, "%v of traffic; each session may send 10 requests a second, each address 40, and 8 requests may be in flight at once.\n\n", d)
	fmt.Fprintf(out, "%-17s %-14s %6s %6s %6s %6s  %s\n", "client", "address", "sent", "200", "429", "503", "Retry-After (s)")
	for i, c := range cs {
		t := tallies[i]
		sent := t.errors
		for _, n := range t.status {
			sent += n
		}
		fmt.Fprintf(out, "%-17s %-14s %6d %6d %6d %6d  %s\n", c.name, c.addr, sent,
			t.status[200], t.status[429], t.status[503], spread(t.retryAfter))
		if t.errors > 0 {
			fmt.Fprintf(out, "%-17s %d requests failed\n", "", t.errors)
		}
	}
	fmt.Fprintln(out, "\n429: the session's or the address's rate limit; 503: the gate was full (the burst's slow reports).")
	s := m.Stats()
	fmt.Fprintf(out, "\ngate: %d admitted, %d shed, %d timed out waiting, peak %d of %d in flight, %d in flight now\n",
		s.Gate.Admitted, s.Gate.Shed, s.Gate.TimedOut, s.Gate.Peak, s.Gate.Max, s.Gate.InFlight)
	fmt.Fprintf(out, "middleware: %d allowed, %d rate_limited, %d server_busy, %d exempt\n",
		s.Requests[admit.Allowed], s.Requests[limits.ReasonRateLimited], s.Requests[admit.ServerBusy], s.Requests[admit.Exempt])

	fmt.Fprintf(out, "\nThe same from %s/metrics, the series above 0:\n", base)
	if err := showMetrics(out, hc, base+"/metrics"); err != nil {
		return err
	}

	// A change of limit while serving: a copy of the file at 2 requests a
	// second per session, and SIGHUP.
	policy := func() string {
		req, _ := http.NewRequest(http.MethodGet, base+"/api", nil)
		req.Header.Set("X-Forwarded-For", "198.51.100.99")
		req.AddCookie(&http.Cookie{Name: "session", Value: "reload-check"})
		resp, err := hc.Do(req)
		if err != nil {
			return err.Error()
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.Header.Get("RateLimit-Policy")
	}
	fmt.Fprintf(out, "\nRateLimit-Policy of a new session: %s\n", policy())
	if err := editedCopy(&file, cfg); err != nil {
		return err
	}
	defer os.Remove(file.Load().(string))
	before := m.Stats().Requests[admit.Allowed]
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	if err := <-reloaded; err != nil {
		return err
	}
	fmt.Fprintf(out, "RateLimit-Policy of a new session: %s\n", policy())
	fmt.Fprintf(out, "allowed requests counted before the reload %d, after it %d: the counters went on.\n", before, m.Stats().Requests[admit.Allowed])
	if hold == nil {
		fmt.Fprintln(out, "\nWith -keep, the demo serves on after the traffic, for curl or a Prometheus to scrape.")
		return nil
	}
	fmt.Fprintf(out, "\nServing at %s until interrupted: curl %s/metrics\n", base, base)
	hold()
	return nil
}

// editedCopy writes cfg at 2 requests a second per session to a new file,
// and makes it the file the demo reads.
func editedCopy(file *atomic.Value, cfg admit.Config) error {
	f, err := os.CreateTemp("", "limits-*.json")
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := os.ReadFile(file.Load().(string))
	if err != nil {
		return err
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	raw["rate"] = "2/s"
	if err := json.NewEncoder(f).Encode(raw); err != nil {
		return err
	}
	file.Store(f.Name())
	return nil
}

// showMetrics scrapes url and writes the series of the middleware's
// requests, policies and gate counters whose value is not 0.
func showMetrics(out io.Writer, hc *http.Client, url string) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	for line := range strings.Lines(string(body)) {
		line = strings.TrimSpace(line)
		shown := strings.HasPrefix(line, "limits_http_")
		for _, name := range []string{"capacity", "peak_in_flight", "admitted_total", "shed_total", "timed_out_total"} {
			shown = shown || strings.HasPrefix(line, "limits_gate_"+name+"{")
		}
		if shown && !strings.HasSuffix(line, " 0") {
			fmt.Fprintln(out, "  "+line)
		}
	}
	return nil
}

// spread describes the Retry-After values seen: none, one value, or the
// range with how often each came.
func spread(vals []int) string {
	if len(vals) == 0 {
		return "-"
	}
	counts := map[int]int{}
	for _, v := range vals {
		counts[v]++
	}
	keys := make([]int, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d (x%d)", k, counts[k])
	}
	return strings.Join(parts, ", ")
}
