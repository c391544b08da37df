package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/limitsgo/limits/internal/report"
)

// step is what one step of concurrency measured.
type step struct {
	Concurrency int
	// Requests counts the requests measured: started after the warm-up;
	// Failed those of them that failed.
	Requests, Failed int
	// Throughput is the requests that completed, and did not fail, a
	// second, over the step after its warm-up.
	Throughput float64
	// Latency percentiles and mean of the requests measured, failed ones
	// included.
	P50, P90, P99, Mean time.Duration
}

// errRequests is returned once the run has sent the requests it may.
var errRequests = errors.New("the -requests bound is reached")

// driver sends the requests of a run.
type driver struct {
	cfg      config
	client   *http.Client
	progress io.Writer
	tty      bool
	sent     atomic.Int64 // requests sent in all
	budget   time.Duration
}

func newDriver(cfg config, progress io.Writer) *driver {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = cfg.max
	t.DisableCompression = true
	d := &driver{cfg: cfg, client: &http.Client{Transport: t, Timeout: cfg.timeout}, progress: progress, budget: cfg.budget}
	if f, ok := progress.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			d.tty = true
		}
	}
	return d
}

// within reports whether s is within the budget: its 99th percentile no
// higher, and at most 1% of its requests failed.
func within(s step, budget time.Duration) bool {
	return s.Requests > 0 && s.P99 <= budget && s.Failed*100 <= s.Requests
}

// sweep runs the steps: doubling the concurrency until two steps in a row
// leave the budget or -max is reached, then bisecting between the highest
// step within it and the lowest out of it.
func (d *driver) sweep(ctx context.Context) ([]step, error) {
	var steps []step
	lastOK, firstBad := 0, 0
	past := false // measured a step past the first out of the budget
	n := d.cfg.start
	for {
		s, err := d.measure(ctx, n)
		if s.Requests > 0 {
			steps = append(steps, s)
		}
		if err != nil {
			return steps, err
		}
		if d.budget == 0 {
			d.budget = defaultBudget(s.P99)
			fmt.Fprintf(d.progress, "latency budget: %v, 1.5 times the p99 at %d at once\n", d.budget, n)
		}
		ok := within(s, d.budget)
		mark := "within the budget"
		if !ok {
			mark = "OUT of the budget"
		}
		fmt.Fprintf(d.progress, "%4d at once: %6d requests, %8.1f/s, p50 %v, p99 %v, %d failed: %s\n",
			n, s.Requests, s.Throughput, s.P50.Round(10*time.Microsecond), s.P99.Round(10*time.Microsecond), s.Failed, mark)
		if ok {
			lastOK = max(lastOK, n)
		} else if firstBad == 0 || n < firstBad {
			firstBad = n
		}
		var next int
		switch {
		case firstBad == 0: // doubling
			if n >= d.cfg.max {
				return steps, nil
			}
			next = min(2*n, d.cfg.max)
		case !past && n == firstBad && n < d.cfg.max:
			// One step past the first out of the budget, to show the knee.
			past = true
			next = min(2*n, d.cfg.max)
		case lastOK == 0:
			return steps, nil // even the first step is out of the budget
		default: // bisecting
			gap := firstBad - lastOK
			next = lastOK + gap/2
			if gap <= max(1, lastOK/10) || slices.ContainsFunc(steps, func(s step) bool { return s.Concurrency == next }) {
				return steps, nil
			}
		}
		n = next
	}
}

// measure runs n clients for a step, each sending a request after the
// other, and returns what they measured.
func (d *driver) measure(ctx context.Context, n int) (step, error) {
	start := time.Now()
	warm := start.Add(d.cfg.step / 10)
	end := start.Add(d.cfg.step)
	type sample struct {
		lat    time.Duration
		done   time.Time
		failed bool
	}
	var (
		mu      sync.Mutex
		samples []sample
		started atomic.Int64
		stopErr error
	)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			var mine []sample
			defer func() {
				mu.Lock()
				samples = append(samples, mine...)
				mu.Unlock()
			}()
			for ctx.Err() == nil && time.Now().Before(end) {
				if started.Add(1) > int64(d.cfg.stepRequests) {
					return
				}
				if d.sent.Add(1) > int64(d.cfg.requests) {
					mu.Lock()
					stopErr = errRequests
					mu.Unlock()
					return
				}
				t0 := time.Now()
				failed := d.do(ctx)
				t1 := time.Now()
				if t0.After(warm) {
					mine = append(mine, sample{t1.Sub(t0), t1, failed})
				}
			}
		})
	}
	stopTicker := d.tick(n, start, &started)
	wg.Wait()
	stopTicker()
	s := step{Concurrency: n}
	var lats []time.Duration
	var sum time.Duration
	ok := 0
	for _, x := range samples {
		s.Requests++
		lats = append(lats, x.lat)
		sum += x.lat
		if x.failed {
			s.Failed++
		} else if !x.done.After(end) {
			ok++
		}
	}
	if s.Requests > 0 {
		s.P50, s.P90, s.P99 = report.Percentile(lats, 0.5), report.Percentile(lats, 0.9), report.Percentile(lats, 0.99)
		s.Mean = sum / time.Duration(s.Requests)
		s.Throughput = float64(ok) / end.Sub(warm).Seconds()
	}
	if err := ctx.Err(); err != nil {
		return s, err
	}
	return s, stopErr
}

// do sends one request and reports whether it failed: no answer, or a
// status of 500 or more.
func (d *driver) do(ctx context.Context) bool {
	req, err := http.NewRequestWithContext(ctx, d.cfg.method, d.cfg.url, nil)
	if err != nil {
		return true
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return true
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode >= 500
}

// tick shows a running count on a terminal until the returned function is
// called.
func (d *driver) tick(n int, start time.Time, started *atomic.Int64) func() {
	if !d.tty {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(d.progress, "\r\033[K")
				return
			case <-t.C:
				fmt.Fprintf(d.progress, "\r\033[K%4d at once: %.1fs of %v, %d requests", n, time.Since(start).Seconds(), d.cfg.step, started.Load())
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
