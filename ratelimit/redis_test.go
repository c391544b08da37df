package ratelimit

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// redisServer is a redis-server of a test's own, on a loopback port.
type redisServer struct {
	t    testing.TB
	port int
	cmd  *exec.Cmd
}

// startRedis starts a redis-server on a free loopback port, stopped when
// the test ends; without one installed the test is skipped, or fails if
// LIMITSTEST_REQUIRE_REDIS=1.
func startRedis(t testing.TB) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("LIMITSTEST_REQUIRE_REDIS") == "1" {
			t.Fatal("no redis-server, and LIMITSTEST_REQUIRE_REDIS=1")
		}
		t.Skip("no redis-server")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	r := &redisServer{t: t, port: port}
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// start starts the server and waits until it answers.
func (r *redisServer) start() {
	r.t.Helper()
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.t.TempDir())
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.addr()})
	defer c.Close()
	for i := 0; ; i++ {
		if c.Ping(context.Background()).Err() == nil {
			return
		}
		if i == 500 {
			r.t.Fatal("redis-server did not answer within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop stops the server, if running.
func (r *redisServer) stop() {
	if r.cmd != nil && r.cmd.Process != nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
		r.cmd = nil
	}
}

// client returns a client of the server, as the command makes one.
func (r *redisServer) client() redis.UniversalClient {
	c := redis.NewClient(&redis.Options{Addr: r.addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	r.t.Cleanup(func() { c.Close() })
	return c
}

// TestFleetNeverOverLimit runs several replicas against one redis-server,
// each in lease mode, with many goroutines asking for one hot descriptor,
// and counts every admission: in no interval, nor overall, do they exceed
// the GCRA's bound, burst + d/T + 1. An admission is placed between the
// start and the end of its call, and counted in an interval only if its
// call lies within it, so the check never blames the fleet for the
// test's own delays.
func TestFleetNeverOverLimit(t *testing.T) {
	rs := startRedis(t)
	const (
		replicas   = 4
		goroutines = 4
		rate       = 500 // a second
		burst      = 50
		run        = 2 * time.Second
	)
	conf := fmt.Sprintf("domain: fleet\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: %d, burst: %d}\n", rate, burst)
	type admission struct{ start, end time.Time }
	var (
		mu        sync.Mutex
		admitted  []admission
		refused   int
		wg        sync.WaitGroup
		svcs      []*Service
		firstCall = time.Now()
	)
	for range replicas {
		s, _ := serviceOf(t, Options{Redis: rs.client(), OnError: FailClosed}, "fleet.yaml", conf)
		svcs = append(svcs, s)
	}
	deadline := time.Now().Add(run)
	for _, s := range svcs {
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rlreq("fleet", desc("tenant=hot"))
				var mine []admission
				no := 0
				for time.Now().Before(deadline) {
					start := time.Now()
					resp, err := s.ShouldRateLimit(context.Background(), r)
					end := time.Now()
					if err != nil {
						t.Error(err)
						return
					}
					if resp.OverallCode == pb.RateLimitResponse_OK {
						mine = append(mine, admission{start, end})
					} else {
						no++
					}
				}
				mu.Lock()
				admitted = append(admitted, mine...)
				refused += no
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	lastEnd := firstCall
	for _, a := range admitted {
		if a.end.After(lastEnd) {
			lastEnd = a.end
		}
	}
	T := time.Second / rate
	bound := func(d time.Duration) int { return burst + int(d/T) + 1 }
	if n := len(admitted); n > bound(lastEnd.Sub(firstCall)) {
		t.Fatalf("%d admitted in %v, over the bound %d", n, lastEnd.Sub(firstCall), bound(lastEnd.Sub(firstCall)))
	}
	// Every interval of a second starting at an admission's start.
	slices.SortFunc(admitted, func(a, b admission) int { return a.start.Compare(b.start) })
	worst, worstBound := 0, 0
	for i, a := range admitted {
		end := a.start.Add(time.Second)
		n := 0
		for _, b := range admitted[i:] {
			if b.start.After(end) {
				break
			}
			if !b.end.After(end) {
				n++
			}
		}
		if n > bound(time.Second) {
			t.Fatalf("%d admitted within a second from %v, over the bound %d", n, a.start.Sub(firstCall), bound(time.Second))
		}
		if n > worst {
			worst, worstBound = n, bound(time.Second)
		}
	}
	if refused == 0 {
		t.Fatalf("%d admitted, none refused: the test did not drive the descriptor past its limit", len(admitted))
	}
	var calls, local uint64
	for _, s := range svcs {
		for _, g := range s.gcras {
			ls, st := g.LeaseStats(), g.Stats()
			calls += ls.Leases + st.Answered + st.Errors
			local += ls.Local
		}
	}
	t.Logf("%d replicas: %d admitted and %d refused in %v (bound %d); worst second %d (bound %d); %d Redis calls, %d decisions local",
		replicas, len(admitted), refused, lastEnd.Sub(firstCall).Round(time.Millisecond), bound(lastEnd.Sub(firstCall)), worst, worstBound, calls, local)
}

// TestRedisDown checks each failure policy while Redis is down, and that
// decisions resume once it is back: open answers OK, closed OVER_LIMIT,
// and error (the default) a gRPC Unavailable, so that Envoy's
// failure_mode_deny decides.
func TestRedisDown(t *testing.T) {
	rs := startRedis(t)
	conf := `domain: d
descriptors:
  - key: open
    failure_policy: open
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: closed
    failure_policy: closed
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: default
    rate_limit: {unit: second, requests_per_unit: 100}
`
	s, _ := serviceOf(t, Options{Redis: rs.client(), Timeout: 200 * time.Millisecond}, "d.yaml", conf)
	i := 0
	ask := func(key string) (*pb.RateLimitResponse, error) {
		i++ // a cold key each time: a Redis call, no lease in hand
		return s.ShouldRateLimit(context.Background(), rlreq("d", desc(key+"=k"+strconv.Itoa(i))))
	}
	for _, key := range []string{"open", "closed", "default"} {
		if resp, err := ask(key); err != nil || resp.OverallCode != pb.RateLimitResponse_OK {
			t.Fatalf("%s with Redis up: %v, %v", key, resp, err)
		}
	}
	rs.stop()
	if resp, err := ask("open"); err != nil || resp.OverallCode != pb.RateLimitResponse_OK {
		t.Fatalf("open with Redis down: %v, %v; want OK", resp, err)
	}
	if resp, err := ask("closed"); err != nil || resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("closed with Redis down: %v, %v; want OVER_LIMIT", resp, err)
	}
	if _, err := ask("default"); status.Code(err) != codes.Unavailable {
		t.Fatalf("default (error) with Redis down: %v; want Unavailable", err)
	}
	if s.n.redisErrors.Load() < 3 {
		t.Fatalf("%d Redis errors counted, want at least 3", s.n.redisErrors.Load())
	}
	rs.start()
	for n := 0; ; n++ {
		resp, err := ask("closed")
		if err == nil && resp.OverallCode == pb.RateLimitResponse_OK {
			break
		}
		if n == 1000 {
			t.Fatalf("no decision 1000 calls after Redis came back: %v, %v", resp, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := ask("default"); err != nil {
		t.Fatalf("default after Redis came back: %v", err)
	}
}

// TestFleetReloadKeepsRedisState checks that a reload keeps each key's
// state in Redis, and that the limit changed applies to it (SetLimit).
func TestFleetReloadKeepsRedisState(t *testing.T) {
	rs := startRedis(t)
	conf := func(rpu int) string {
		return fmt.Sprintf("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", rpu)
	}
	s, dir := serviceOf(t, Options{Redis: rs.client(), LeaseSlots: 1, OnError: FailClosed}, "d.yaml", conf(5))
	a := rlreq("d", desc("a=1"))
	if n := allowedOf(t, s, a, 8); n != 5 {
		t.Fatalf("%d of 8 allowed, want 5", n)
	}
	writeFiles(t, dir, "d.yaml", conf(5))
	if err := s.LoadDir(dir); err != nil {
		t.Fatal(err)
	}
	if n := allowedOf(t, s, a, 3); n != 0 {
		t.Fatalf("after a reload: %d allowed, want 0", n)
	}
	// Another replica, reading the same configuration, shares the state.
	s2, _ := serviceOf(t, Options{Redis: rs.client(), LeaseSlots: 1, OnError: FailClosed}, "d.yaml", conf(5))
	if n := allowedOf(t, s2, a, 3); n != 0 {
		t.Fatalf("another replica: %d allowed, want 0", n)
	}
	writeFiles(t, dir, "d.yaml", conf(1))
	if err := s.LoadDir(dir); err != nil {
		t.Fatal(err)
	}
	resp := decide(t, s, a)
	if d := resp.Statuses[0].DurationUntilReset.AsDuration(); resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT || d < 12*time.Minute {
		t.Fatalf("at 1 an hour: %v, want refused for more than the 12 minutes 5 an hour would take", resp.Statuses[0])
	}
}
