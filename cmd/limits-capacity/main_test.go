package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// kneeServer returns a server whose handler serves slots requests at once,
// each in d, and queues the rest: its knee is at slots.
func kneeServer(t *testing.T, slots int, d time.Duration) *httptest.Server {
	sem := make(chan struct{}, slots)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sem <- struct{}{}
		time.Sleep(d)
		<-sem
	}))
	t.Cleanup(srv.Close)
	return srv
}

// attempts is how many times a test drives its server before it fails: a
// step of a few hundred milliseconds on a loaded machine (the race
// detector, other packages' tests) can see one request delayed by tens of
// milliseconds, which moves a 99th percentile of a few dozen requests.
const attempts = 3

// TestKnee drives a server of 4 slots of 40ms: the tool must find the knee
// at 4. The budget, 60ms, is halfway between the latency at the knee and
// one step past it.
func TestKnee(t *testing.T) {
	srv := kneeServer(t, 4, 40*time.Millisecond)
	dir := t.TempDir()
	cfg := config{
		url: srv.URL, method: http.MethodGet, start: 1, max: 32, step: 400 * time.Millisecond,
		stepRequests: 10_000, budget: 60 * time.Millisecond, timeout: 5 * time.Second,
		duration: 20 * time.Second, requests: 100_000,
		md: filepath.Join(dir, "knee.md"), svg: filepath.Join(dir, "knee.svg"),
	}
	var report string
	for i := range attempts {
		var out, progress bytes.Buffer
		start := time.Now()
		if err := run(context.Background(), cfg, &out, &progress); err != nil {
			t.Fatalf("run: %v\n%s", err, progress.String())
		}
		if took := time.Since(start); took > cfg.duration {
			t.Fatalf("took %v, over the -duration bound %v", took, cfg.duration)
		}
		report = out.String()
		if strings.Contains(report, "**Suggested MaxInFlight: 4.**") {
			break
		}
		if i == attempts-1 {
			t.Fatalf("no suggestion of 4 in %d runs; the last:\n%s\nprogress:\n%s", attempts, report, progress.String())
		}
		t.Logf("run %d suggested otherwise, again:\n%s", i+1, report)
	}
	for _, want := range []string{"| 4 |", "| 8 |", "out: the knee", "Little's law"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if md, err := os.ReadFile(cfg.md); err != nil || string(md) != report {
		t.Errorf("markdown file: %v, differs from the output: %v", err, string(md) != report)
	}
	svg, err := os.ReadFile(cfg.svg)
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(svg, new(struct{})); err != nil || !bytes.Contains(svg, []byte("requests at once")) {
		t.Errorf("chart: %v", err)
	}
}

// TestDefaultBudget leaves the budget to the tool: 1.5 times the first
// step's p99. One past the knee, the slowest requests wait a whole service
// time, out of it.
func TestDefaultBudget(t *testing.T) {
	srv := kneeServer(t, 2, 40*time.Millisecond)
	cfg := config{url: srv.URL, method: http.MethodGet, start: 1, max: 16, step: 400 * time.Millisecond,
		stepRequests: 10_000, timeout: 5 * time.Second, duration: 20 * time.Second, requests: 100_000}
	for i := range attempts {
		var out, progress bytes.Buffer
		if err := run(context.Background(), cfg, &out, &progress); err != nil {
			t.Fatal(err)
		}
		s := out.String()
		if !strings.Contains(progress.String(), "latency budget:") {
			t.Fatalf("no budget in the progress:\n%s", progress.String())
		}
		if strings.Contains(s, "Suggested MaxInFlight: 2.") {
			return
		}
		if i == attempts-1 {
			t.Fatalf("no suggestion of 2 in %d runs; the last:\n%s\nprogress:\n%s", attempts, s, progress.String())
		}
	}
}

// TestBounds checks that the run stops at its bounds and reports the
// steps done, and refuses flags it cannot use.
func TestBounds(t *testing.T) {
	srv := kneeServer(t, 64, time.Millisecond)
	var out, progress bytes.Buffer
	cfg := config{url: srv.URL, method: http.MethodGet, start: 1, max: 1024, step: 200 * time.Millisecond,
		stepRequests: 50, timeout: time.Second, duration: 10 * time.Second, requests: 120}
	if err := run(context.Background(), cfg, &out, &progress); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(progress.String(), "stopped early") || !strings.Contains(out.String(), "| 1 |") {
		t.Errorf("output:\n%s\nprogress:\n%s", out.String(), progress.String())
	}
	for _, bad := range []config{
		{},
		{url: "ftp://x", start: 1, max: 2, step: time.Second, stepRequests: 1, requests: 1, timeout: time.Second, duration: time.Second},
		{url: srv.URL, start: 4, max: 2, step: time.Second, stepRequests: 1, requests: 1, timeout: time.Second, duration: time.Second},
		{url: srv.URL, start: 1, max: 2, step: time.Millisecond, stepRequests: 1, requests: 1, timeout: time.Second, duration: time.Second},
	} {
		if err := run(context.Background(), bad, &out, &progress); err == nil {
			t.Errorf("run(%+v) did not fail", bad)
		}
	}
}
