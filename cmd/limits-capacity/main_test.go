package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// kneeServer starts a server whose handler serves slots requests at once,
// each in d, and queues the rest: its knee is at slots. It returns the
// server's URL. Called in a synctest bubble, it serves on an in-memory
// network, which http.DefaultTransport (cloned by the tool's client)
// dials until the test ends: the latencies the tool measures are the
// bubble's, the same on a busy machine as on an idle one.
func kneeServer(t *testing.T, slots int, d time.Duration) string {
	sem := make(chan struct{}, slots)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sem <- struct{}{}
		time.Sleep(d)
		<-sem
	})}
	l := &memListener{conns: make(chan net.Conn), done: make(chan struct{})}
	go srv.Serve(l)
	def := http.DefaultTransport
	http.DefaultTransport = &http.Transport{DialContext: l.dial}
	t.Cleanup(func() {
		http.DefaultTransport = def
		srv.Close()
	})
	return "http://knee.test"
}

// memListener is a net.Listener of an in-memory network: connections
// made with dial, each a net.Pipe, whose blocking a synctest bubble
// sees, where it cannot see a socket's.
type memListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *memListener) Addr() net.Addr { return memAddr{} }

// dial connects to l, whatever the address.
func (l *memListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// memAddr is the address of a memListener.
type memAddr struct{}

func (memAddr) Network() string { return "mem" }
func (memAddr) String() string  { return "knee.test" }

// TestKnee drives a server of 4 slots of 40ms: the tool must find the knee
// at 4. The budget, 60ms, is halfway between the latency at the knee and
// one step past it.
func TestKnee(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		url := kneeServer(t, 4, 40*time.Millisecond)
		dir := t.TempDir()
		cfg := config{
			url: url, method: http.MethodGet, start: 1, max: 32, step: 400 * time.Millisecond,
			stepRequests: 10_000, budget: 60 * time.Millisecond, timeout: 5 * time.Second,
			duration: 20 * time.Second, requests: 100_000,
			md: filepath.Join(dir, "knee.md"), svg: filepath.Join(dir, "knee.svg"),
		}
		var out, progress bytes.Buffer
		start := time.Now()
		if err := run(context.Background(), cfg, &out, &progress); err != nil {
			t.Fatalf("run: %v\n%s", err, progress.String())
		}
		if took := time.Since(start); took > cfg.duration {
			t.Fatalf("took %v, over the -duration bound %v", took, cfg.duration)
		}
		report := out.String()
		for _, want := range []string{"**Suggested MaxInFlight: 4.**", "| 4 |", "| 8 |", "out: the knee", "Little's law"} {
			if !strings.Contains(report, want) {
				t.Errorf("report lacks %q:\n%s\nprogress:\n%s", want, report, progress.String())
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
	})
}

// TestDefaultBudget leaves the budget to the tool: 1.5 times the first
// step's p99. One past the knee, the slowest requests wait a whole service
// time, out of it.
func TestDefaultBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config{url: kneeServer(t, 2, 40*time.Millisecond), method: http.MethodGet, start: 1, max: 16, step: 400 * time.Millisecond,
			stepRequests: 10_000, timeout: 5 * time.Second, duration: 20 * time.Second, requests: 100_000}
		var out, progress bytes.Buffer
		if err := run(context.Background(), cfg, &out, &progress); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(progress.String(), "latency budget: 60ms") {
			t.Errorf("no budget of 60ms in the progress:\n%s", progress.String())
		}
		if s := out.String(); !strings.Contains(s, "Suggested MaxInFlight: 2.") {
			t.Errorf("no suggestion of 2:\n%s\nprogress:\n%s", s, progress.String())
		}
	})
}

// TestBounds checks that the run stops at its bounds and reports the
// steps done, and refuses flags it cannot use.
func TestBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		url := kneeServer(t, 64, time.Millisecond)
		var out, progress bytes.Buffer
		cfg := config{url: url, method: http.MethodGet, start: 1, max: 1024, step: 200 * time.Millisecond,
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
			{url: url, start: 4, max: 2, step: time.Second, stepRequests: 1, requests: 1, timeout: time.Second, duration: time.Second},
			{url: url, start: 1, max: 2, step: time.Millisecond, stepRequests: 1, requests: 1, timeout: time.Second, duration: time.Second},
		} {
			if err := run(context.Background(), bad, &out, &progress); err == nil {
				t.Errorf("run(%+v) did not fail", bad)
			}
		}
	})
}
