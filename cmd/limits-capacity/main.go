// Command limits-capacity measures the knee of a service: the number of
// requests in flight past which they queue rather than go faster. It
// drives a URL with a rising number of concurrent clients, each sending
// one request after another, reports the throughput and latency
// percentiles of each step, marks the step where the 99th percentile
// leaves a latency budget, and suggests a MaxInFlight for a limits.Gate
// (admit.Config.MaxInFlight) with its reasoning.
//
//	go run ./cmd/limits-capacity -url http://127.0.0.1:8080/work
//	go run ./cmd/limits-capacity -url http://127.0.0.1:8080/work -budget 50ms -step 5s -max 512 -svg knee.svg -md knee.md
//
// Concurrency doubles from -start until -max; once a step leaves the
// budget, the tool bisects between the last step within it and that one,
// to a tenth of the concurrency. Each step lasts -step, of which the first
// tenth warms the connections and is not measured, and sends at most
// -step-requests requests; the whole run stops after -duration or
// -requests requests, whichever comes first, and on Ctrl-C, reporting the
// steps done. A step is out of the budget when its 99th percentile
// exceeds -budget (by default 1.5 times that of the first step, whose
// requests hardly queue) or more than 1% of its requests fail (a status
// of 500 or more, or no answer within -timeout).
//
// Point it at one instance, on a machine that has cores to spare for the
// clients, never at a service others depend on: past the knee it queues
// requests on purpose. Progress goes to standard error, a line per step
// and, on a terminal, a running count; the table, the suggestion and their
// reasoning go to standard output, and to -md if set; -svg writes a chart
// of throughput and latency against concurrency.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"time"
)

// config is a run.
type config struct {
	url          string
	method       string
	start, max   int
	step         time.Duration
	stepRequests int
	budget       time.Duration
	timeout      time.Duration
	duration     time.Duration
	requests     int
	md, svg      string
}

func main() {
	var cfg config
	flag.StringVar(&cfg.url, "url", "", "the URL to drive (required)")
	flag.StringVar(&cfg.method, "method", http.MethodGet, "the request method; requests have no body")
	flag.IntVar(&cfg.start, "start", 1, "concurrency of the first step")
	flag.IntVar(&cfg.max, "max", 256, "the most concurrency to try")
	flag.DurationVar(&cfg.step, "step", 3*time.Second, "how long each step lasts, warm-up included")
	flag.IntVar(&cfg.stepRequests, "step-requests", 100_000, "the most requests a step sends")
	flag.DurationVar(&cfg.budget, "budget", 0, "the latency budget for the 99th percentile; 0 means 1.5 times that of the first step")
	flag.DurationVar(&cfg.timeout, "timeout", 10*time.Second, "how long to wait for an answer before counting the request as failed")
	flag.DurationVar(&cfg.duration, "duration", 2*time.Minute, "the longest the whole run may take")
	flag.IntVar(&cfg.requests, "requests", 1_000_000, "the most requests the whole run may send")
	flag.StringVar(&cfg.md, "md", "", "also write the table and the suggestion to this markdown file")
	flag.StringVar(&cfg.svg, "svg", "", "write a chart of throughput and latency against concurrency to this SVG file")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "limits-capacity:", err)
		os.Exit(1)
	}
}

// check returns an error naming the first flag of cfg that cannot be
// used.
func (cfg *config) check() error {
	u, err := url.Parse(cfg.url)
	switch {
	case cfg.url == "":
		return errors.New("-url is required")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("-url %q: want an http or https URL", cfg.url)
	case cfg.start < 1 || cfg.max < cfg.start:
		return fmt.Errorf("-start %d, -max %d: want 1 <= start <= max", cfg.start, cfg.max)
	case cfg.step < 10*time.Millisecond:
		return fmt.Errorf("-step %v: want at least 10ms", cfg.step)
	case cfg.stepRequests < 1 || cfg.requests < 1:
		return fmt.Errorf("-step-requests %d, -requests %d: want at least 1", cfg.stepRequests, cfg.requests)
	case cfg.budget < 0 || cfg.timeout <= 0 || cfg.duration <= 0:
		return fmt.Errorf("-budget %v, -timeout %v, -duration %v: want a budget >= 0 and the others > 0", cfg.budget, cfg.timeout, cfg.duration)
	}
	return nil
}

// run measures cfg's URL, writing progress to progress and the report to
// out.
func run(ctx context.Context, cfg config, out, progress io.Writer) error {
	if err := cfg.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	d := newDriver(cfg, progress)
	defer d.client.CloseIdleConnections()
	began := time.Now()
	steps, err := d.sweep(ctx)
	if len(steps) == 0 {
		if err == nil {
			err = errors.New("no step completed")
		}
		return err
	}
	if err != nil {
		fmt.Fprintf(progress, "stopped early: %v; reporting the %d steps done\n", err, len(steps))
	}
	k := analyse(steps, d.budget)
	text := k.markdown(cfg, time.Since(began), d.sent.Load())
	fmt.Fprint(out, text)
	if cfg.md != "" {
		if err := os.WriteFile(cfg.md, []byte(text), 0o644); err != nil {
			return err
		}
	}
	if cfg.svg != "" {
		if err := os.WriteFile(cfg.svg, k.chart(cfg), 0o644); err != nil {
			return err
		}
	}
	return nil
}
