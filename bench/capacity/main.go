// Command capacity compares capacity gates on a real HTTP server under a
// real open-loop load generator: it serves a handler of known capacity
// over loopback, in front of it no gate, a limits.Gate set right, one set
// four times too high, and one moved by an adaptive.Controller, and
// drives each with vegeta (as a library) at half, once, twice and four
// times the capacity. For each it reports the requests served a second
// (answered 2xx within the measured window), the share of requests sent
// that were shed with 503 and that failed (timeouts), and the latency
// percentiles of the requests served and of the refusals, as a markdown
// table.
//
//	./run.sh                      # about three minutes; writes RESULTS.md
//	go run . -measure 2s -warm 1s # a quicker look
//	go run . -serve 127.0.0.1:8080 # the handler alone, for cmd/limits-capacity
//
// The handler serves -slots requests at once, each for -service (8 of
// 20ms by default: 400 requests a second at most, a little less with the
// HTTP overhead), and queues the rest, as a service whose workers or
// connections to a dependency are all busy. Each run starts a fresh
// server, attacks it at a constant rate for -warm (not measured: the
// adaptive gate finds its limit) then -measure, with vegeta's timeout of
// -timeout, and waits for the answers still due. Everything runs on
// 127.0.0.1, and stops by itself.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/internal/report"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// config is a comparison.
type config struct {
	slots   int
	service time.Duration
	loads   []float64 // times the capacity
	fronts  []front
	warm    time.Duration
	measure time.Duration
	timeout time.Duration
}

// front is what stands before the handler.
type front struct {
	name     string
	limit    int  // the gate's maximum, or its initial one; 0: no gate
	adaptive bool // moved by a Controller
}

func main() {
	cfg := config{loads: []float64{0.5, 1, 2, 4}}
	flag.IntVar(&cfg.slots, "slots", 8, "requests the handler serves at once")
	flag.DurationVar(&cfg.service, "service", 20*time.Millisecond, "how long the handler takes over each")
	flag.DurationVar(&cfg.warm, "warm", 3*time.Second, "how long each run attacks before it measures")
	flag.DurationVar(&cfg.measure, "measure", 5*time.Second, "how long each run measures")
	flag.DurationVar(&cfg.timeout, "timeout", 10*time.Second, "vegeta's timeout for each request")
	out := flag.String("out", "", "also write the table to this file")
	serve := flag.String("serve", "", "only serve the handler, without a gate, on this loopback address (such as 127.0.0.1:8080), for cmd/limits-capacity to measure")
	flag.Parse()
	if *serve != "" {
		if host, _, err := net.SplitHostPort(*serve); err != nil || (host != "localhost" && !net.ParseIP(host).IsLoopback()) {
			fmt.Fprintf(os.Stderr, "-serve %q: want a loopback address, such as 127.0.0.1:8080\n", *serve)
			os.Exit(2)
		}
		h, _, _ := handler(cfg, front{})
		fmt.Fprintf(os.Stderr, "serving %d slots of %v on http://%s/work\n", cfg.slots, cfg.service, *serve)
		srv := &http.Server{Addr: *serve, Handler: h, ReadHeaderTimeout: cfg.timeout}
		if err := srv.ListenAndServe(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	cfg.fronts = fronts(cfg.slots)
	began := time.Now()
	table := compare(cfg, os.Stderr)
	text := fmt.Sprintf("%s\nHandler of %d slots of %v; vegeta at a constant rate, %v warm-up then %v measured per run, timeout %v; %s in all.\n",
		table, cfg.slots, cfg.service, cfg.warm, cfg.measure, cfg.timeout, time.Since(began).Round(time.Second))
	fmt.Print(text)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(text), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

// fronts returns the fronts compared for a handler of slots.
func fronts(slots int) []front {
	return []front{
		{name: "no gate"},
		{name: fmt.Sprintf("fixed %d (right)", slots), limit: slots},
		{name: fmt.Sprintf("fixed %d (4x too high)", 4*slots), limit: 4 * slots},
		{name: fmt.Sprintf("adaptive (from %d)", 4*slots), limit: 4 * slots, adaptive: true},
	}
}

// compare runs every front at every load and returns the table.
func compare(cfg config, progress io.Writer) string {
	capacity := float64(cfg.slots) / cfg.service.Seconds()
	var b strings.Builder
	b.WriteString("| front | load | offered /s | served /s | shed (503) | failed | p50 | p90 | p99 | refusal p99 | limit at end |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, f := range cfg.fronts {
		for _, load := range cfg.loads {
			r := runOne(cfg, f, load*capacity)
			fmt.Fprintf(progress, "%-24s %4gx: %s\n", f.name, load, r.summary())
			fmt.Fprintf(&b, "| %s | %gx | %.0f | %.0f | %s | %s | %s | %s | %s | %s | %s |\n",
				f.name, load, load*capacity, r.admitted, pct(r.shed), pct(r.failed),
				ms(r.p50), ms(r.p90), ms(r.p99), ms(r.refusedP99), r.limit)
		}
	}
	return b.String()
}

// result is what one run measured.
type result struct {
	admitted            float64 // 2xx answered in the window, a second
	shed, failed        float64 // shares of the requests sent
	p50, p90, p99       time.Duration
	refusedP99          time.Duration
	limit               string
	sent, refused       int
	served              int // 2xx answered in the window, whenever sent
	failedN             int
	firstError          string
	admittedLatencies   []time.Duration
	refusedLatencies    []time.Duration
	measuredFrom, until time.Time
}

func (r result) summary() string {
	s := fmt.Sprintf("%d sent, %.0f/s admitted, %s shed, %s failed, p50 %s, p99 %s", r.sent, r.admitted, pct(r.shed), pct(r.failed), ms(r.p50), ms(r.p99))
	if r.firstError != "" {
		s += "; first error: " + r.firstError
	}
	return s
}

// runOne attacks a fresh server behind f at rate requests a second.
func runOne(cfg config, f front, rate float64) result {
	h, g, c := handler(cfg, f)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return result{firstError: err.Error()}
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: cfg.timeout}
	go srv.Serve(ln)
	// Close drops the connections at once: handlers still queued give up
	// with their requests, rather than hold the next run's machine.
	defer srv.Close()
	attacker := vegeta.NewAttacker(vegeta.Timeout(cfg.timeout), vegeta.KeepAlive(true), vegeta.Connections(10_000))
	targeter := vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodGet, URL: "http://" + ln.Addr().String() + "/work"})
	pacer := vegeta.ConstantPacer{Freq: int(rate + 0.5), Per: time.Second}
	start := time.Now()
	r := result{measuredFrom: start.Add(cfg.warm), until: start.Add(cfg.warm + cfg.measure)}
	for res := range attacker.Attack(targeter, pacer, cfg.warm+cfg.measure, "capacity") {
		if done := res.Timestamp.Add(res.Latency); res.Code >= 200 && res.Code < 300 && !done.Before(r.measuredFrom) && !done.After(r.until) {
			r.served++
		}
		if res.Timestamp.Before(r.measuredFrom) {
			continue
		}
		r.sent++
		switch {
		case res.Code >= 200 && res.Code < 300:
			r.admittedLatencies = append(r.admittedLatencies, res.Latency)
		case res.Code == http.StatusServiceUnavailable:
			r.refused++
			r.refusedLatencies = append(r.refusedLatencies, res.Latency)
		default:
			r.failedN++
			if r.firstError == "" {
				r.firstError = res.Error
			}
		}
	}
	attacker.Stop()
	// A service that queues answers requests after the window they were
	// sent in: count those answered in it, whenever sent.
	r.admitted = float64(r.served) / cfg.measure.Seconds()
	if r.sent > 0 {
		r.shed, r.failed = float64(r.refused)/float64(r.sent), float64(r.failedN)/float64(r.sent)
	}
	r.p50, r.p90, r.p99 = report.Percentile(r.admittedLatencies, 0.5), report.Percentile(r.admittedLatencies, 0.9), report.Percentile(r.admittedLatencies, 0.99)
	r.refusedP99 = report.Percentile(r.refusedLatencies, 0.99)
	switch {
	case c != nil:
		r.limit = fmt.Sprint(c.Limit())
	case g != nil:
		r.limit = fmt.Sprint(g.Stats().Max)
	default:
		r.limit = "none"
	}
	return r
}

// handler returns the service behind front f, and its gate and controller
// if any.
func handler(cfg config, f front) (http.Handler, *limits.Gate, *adaptive.Controller) {
	slots := make(chan struct{}, cfg.slots)
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}: // queue for a slot
		case <-r.Context().Done():
			return // the client is gone
		}
		time.Sleep(cfg.service)
		<-slots
		io.WriteString(w, "done\n")
	})
	if f.limit == 0 {
		return h, nil, nil
	}
	g, err := limits.NewGate(f.limit)
	if err != nil {
		panic(err) // f.limit > 0
	}
	var c *adaptive.Controller
	if f.adaptive {
		if c, err = adaptive.New(g, adaptive.Config{Max: 16 * cfg.slots}); err != nil {
			panic(err) // a valid Config
		}
	}
	return gated(g, c, h), g, c
}

// gated admits requests to next through g, refusing with 503 when it is
// full, and tells c, if set, how long each took.
func gated(g *limits.Gate, c *adaptive.Controller, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := g.TryEnter()
		if !ok {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		defer p.Release()
		start := time.Now()
		next.ServeHTTP(w, r)
		if c != nil {
			c.Observe(time.Since(start), adaptive.Success)
		}
	})
}

func pct(share float64) string { return fmt.Sprintf("%.1f%%", 100*share) }

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	if d >= time.Second {
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("%.1f ms", float64(d)/1e6)
}
