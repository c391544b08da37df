package ratelimit

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/limitsprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// serviceOf returns a Service loaded with the configuration files given
// as name and content.
func serviceOf(t *testing.T, opts Options, files ...string) (*Service, string) {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, files...)
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.LoadDir(dir); err != nil {
		t.Fatal(err)
	}
	return s, dir
}

func writeFiles(t testing.TB, dir string, files ...string) {
	t.Helper()
	for i := 0; i+1 < len(files); i += 2 {
		if err := os.WriteFile(filepath.Join(dir, files[i]), []byte(files[i+1]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const hitsConfig = `domain: d
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 10}
`

// TestHitsAddend checks the request's hits_addend (0 meaning 1) and a
// descriptor's own, 0 included (checked, not charged), and a descriptor
// repeating a limit: each hit is charged once.
func TestHitsAddend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := serviceOf(t, Options{}, "d.yaml", hitsConfig)
		r := rlreq("d", desc("a=1"))
		r.HitsAddend = 4
		resp := decide(t, s, r)
		if got := resp.Statuses[0].LimitRemaining; got != 6 {
			t.Fatalf("hits_addend 4: %d left, want 6", got)
		}
		// A descriptor's own hits_addend; another's from the request.
		r = rlreq("d", withHits(desc("a=1"), 3), desc("b=1"))
		r.HitsAddend = 2
		resp = decide(t, s, r)
		if a, b := resp.Statuses[0].LimitRemaining, resp.Statuses[1].LimitRemaining; a != 3 || b != 8 {
			t.Fatalf("hits 3 and 2: %d and %d left, want 3 and 8", a, b)
		}
		// 0: checked, not charged.
		resp = decide(t, s, rlreq("d", withHits(desc("a=1"), 0)))
		if st := resp.Statuses[0]; st.Code != pb.RateLimitResponse_OK || st.CurrentLimit.GetRequestsPerUnit() != 10 {
			t.Fatalf("hits 0: %v, want OK with the limit", st)
		}
		// The same limit twice in one request: charged twice.
		resp = decide(t, s, rlreq("d", desc("a=1"), desc("a=1")))
		if got := codesOf(resp); got != "OK OK" {
			t.Fatalf("a repeated: %s", got)
		}
		if got := decide(t, s, rlreq("d", desc("a=1"))).Statuses[0].LimitRemaining; got != 0 {
			t.Fatalf("after 4, 3, and 1 twice: %d left, want 0", got)
		}
		// Over the limit: more than the burst at once.
		r = rlreq("d", desc("b=2"))
		r.HitsAddend = 11
		if got := codesOf(decide(t, s, r)); got != "OVER_LIMIT" {
			t.Fatalf("hits 11 against a burst of 10: %s, want OVER_LIMIT", got)
		}
	})
}

// TestRefusedChargesNothing checks that a request refused by one limit
// costs the others nothing, whichever order its descriptors come in.
func TestRefusedChargesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := serviceOf(t, Options{}, "d.yaml", hitsConfig)
		for range 10 {
			decide(t, s, rlreq("d", desc("b=x")))
		}
		for range 5 {
			if got := codesOf(decide(t, s, rlreq("d", desc("a=x"), desc("b=x")))); got != "OK OVER_LIMIT" {
				t.Fatalf("a then b: %s, want OK OVER_LIMIT", got)
			}
			if got := codesOf(decide(t, s, rlreq("d", desc("b=x"), desc("a=x")))); got != "OVER_LIMIT OK" {
				t.Fatalf("b then a: %s, want OVER_LIMIT OK", got)
			}
		}
		if got := decide(t, s, rlreq("d", desc("a=x"))).Statuses[0].LimitRemaining; got != 9 {
			t.Fatalf("a after 10 refused requests: %d left, want 9", got)
		}
	})
}

// TestInvalidRequests checks the answers to requests without a domain or
// descriptors, and to an unknown domain.
func TestInvalidRequests(t *testing.T) {
	s, _ := serviceOf(t, Options{}, "d.yaml", hitsConfig)
	for _, r := range []*pb.RateLimitRequest{{Descriptors: rlreq("d", desc("a=1")).Descriptors}, {Domain: "d"}} {
		if _, err := s.ShouldRateLimit(context.Background(), r); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%v: error %v, want InvalidArgument", r, err)
		}
	}
	resp := decide(t, s, rlreq("nope", desc("a=1"), desc("b=1")))
	if got := codesOf(resp); got != "OK OK" || resp.Statuses[0].CurrentLimit != nil {
		t.Fatalf("an unknown domain: %s %v, want OK OK with no limits", got, resp.Statuses)
	}
}

// TestHeaders checks the draft-10 fields in response_headers_to_add, of
// an allowed request and of a refused one.
func TestHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := serviceOf(t, Options{Headers: "ietf"}, "d.yaml", hitsConfig)
		resp := decide(t, s, rlreq("d", desc("a=1")))
		got := map[string]string{}
		for _, h := range resp.ResponseHeadersToAdd {
			got[h.Key] = h.Value
		}
		if got["RateLimit-Policy"] != `"d.a";q=10;w=3600` || got["RateLimit"] != `"d.a";r=9;t=360` || len(got) != 2 {
			t.Fatalf("allowed: headers %v", got)
		}
		for range 9 {
			decide(t, s, rlreq("d", desc("a=1")))
		}
		resp = decide(t, s, rlreq("d", desc("a=1")))
		got = map[string]string{}
		for _, h := range resp.ResponseHeadersToAdd {
			got[h.Key] = h.Value
		}
		if got["RateLimit"] != `"d.a";r=0;t=360` {
			t.Fatalf("refused: headers %v", got)
		}
		if d := resp.Statuses[0].DurationUntilReset.AsDuration(); d != 6*time.Minute {
			t.Fatalf("refused: retry in %v, want 6m", d)
		}
		s, _ = serviceOf(t, Options{}, "d.yaml", hitsConfig)
		if h := decide(t, s, rlreq("d", desc("a=1"))).ResponseHeadersToAdd; len(h) != 0 {
			t.Fatalf("no headers asked for: %v", h)
		}
	})
}

// TestGRPC checks the service through a real gRPC client over loopback:
// the README's second example, and the health service.
func TestGRPC(t *testing.T) {
	s := readmeService(t, Options{}, "example2.yaml", "example5.yaml")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(srv, s)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(l)
	defer srv.Stop()
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewRateLimitServiceClient(conn)
	ctx := context.Background()
	both := rlreq("messaging", desc("message_type=marketing", "to_number=2061111111"), desc("to_number=2061111111"))
	for i := range 6 {
		resp, err := c.ShouldRateLimit(ctx, both)
		if err != nil {
			t.Fatal(err)
		}
		want := "OK OK"
		if i == 5 {
			want = "OVER_LIMIT OK"
		}
		if got := codesOf(resp); got != want {
			t.Fatalf("message %d: %s, want %s", i+1, got, want)
		}
		if i == 0 {
			st := resp.Statuses[0]
			if st.CurrentLimit.GetRequestsPerUnit() != 5 || st.CurrentLimit.GetUnit() != pb.RateLimitResponse_RateLimit_DAY || st.LimitRemaining != 4 || st.DurationUntilReset == nil {
				t.Fatalf("first status: %v", st)
			}
		}
	}
	resp, err := c.ShouldRateLimit(ctx, rlreq("internal", desc("ldap=a")))
	if err != nil || resp.Statuses[0].LimitRemaining != 1<<32-1 {
		t.Fatalf("unlimited over gRPC: %v, %v", resp, err)
	}
	if _, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no domain over gRPC: %v", err)
	}
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", h, err)
	}
}

// TestReloadKeepsState checks that a load keeps each key's state: a key
// that used its burst stays refused under the same limit, waits longer
// under a stricter one and gets no fresh burst under a looser one; a
// limit removed and counters keep counting.
func TestReloadKeepsState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		conf := func(rpu, burst int) string {
			return fmt.Sprintf("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: %d, burst: %d}\n", rpu, burst)
		}
		s, dir := serviceOf(t, Options{}, "d.yaml", conf(10, 10))
		a := rlreq("d", desc("a=1"))
		if n := allowedOf(t, s, a, 12); n != 10 {
			t.Fatalf("%d of 12 allowed, want 10", n)
		}
		writeFiles(t, dir, "d.yaml", conf(10, 10), "other.yaml", "domain: o\ndescriptors:\n  - key: x\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
		if err := s.LoadDir(dir); err != nil {
			t.Fatal(err)
		}
		if n := allowedOf(t, s, a, 5); n != 0 {
			t.Fatalf("after a reload: %d allowed, want 0 (the key's state kept)", n)
		}
		// A looser limit: no fresh burst, only the room it adds. The key
		// owes the minute its 10 requests took; 20 a minute in bursts of
		// 40 tolerates two minutes, and the minute left holds 20.
		writeFiles(t, dir, "d.yaml", conf(20, 40))
		if err := s.LoadDir(dir); err != nil {
			t.Fatal(err)
		}
		if n := allowedOf(t, s, a, 50); n != 20 {
			t.Fatalf("at 20 a minute in bursts of 40 after 10 used: %d allowed, want the 20 the new burst adds", n)
		}
		// A stricter one: the key waits longer.
		writeFiles(t, dir, "d.yaml", conf(2, 2))
		if err := s.LoadDir(dir); err != nil {
			t.Fatal(err)
		}
		resp := decide(t, s, a)
		if resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].DurationUntilReset.AsDuration() <= 30*time.Second {
			t.Fatalf("at 2 a minute: %v, want refused for more than 30s", resp.Statuses[0])
		}
		var allowed uint64
		for _, p := range s.Stats().Policies {
			if p.Name == "d.a" {
				allowed = p.Requests[admit.Allowed]
			}
		}
		if allowed != 30 {
			t.Fatalf("policy d.a counted %d allowed across reloads, want 30", allowed)
		}
	})
}

// TestWatch checks that Watch loads a changed directory, and keeps the
// configuration in force when the change cannot be loaded; a symbolic
// link swapped to another directory is a change.
func TestWatch(t *testing.T) {
	root := t.TempDir()
	v1, v2 := filepath.Join(root, "v1"), filepath.Join(root, "v2")
	for _, d := range []string{v1, v2} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFiles(t, v1, "d.yaml", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	writeFiles(t, v2, "d.yaml", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 3}\n")
	current := filepath.Join(root, "current")
	if err := os.Symlink(v1, current); err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.LoadDir(current); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Watch(ctx, current, 10*time.Millisecond)
	waitFor := func(what string, f func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !f(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s within 30s", what)
			}
		}
	}
	// The link swapped, as envoyproxy/ratelimit's runtime layout does.
	tmp := filepath.Join(root, "next")
	if err := os.Symlink(v2, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, current); err != nil {
		t.Fatal(err)
	}
	waitFor("load of v2", func() bool { return strings.Contains(s.Config(), "3 per hour") })
	// A file edited in place into something invalid: refused and counted.
	writeFiles(t, v2, "d.yaml", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: aeon, requests_per_unit: 3}\n")
	waitFor("failed load", func() bool { return s.n.loadErrors.Load() >= 1 })
	if !strings.Contains(s.Config(), "3 per hour") {
		t.Fatalf("after a failed load: %s", s.Config())
	}
}

// TestReloadUnderLoad checks that loads while requests are decided give
// each request one configuration or the other: never an error, never
// more admitted than the stricter limit's GCRA and the looser's allow
// together.
func TestReloadUnderLoad(t *testing.T) {
	conf := func(rpu int) string {
		return fmt.Sprintf("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: %d}\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n", rpu)
	}
	s, dir := serviceOf(t, Options{}, "d.yaml", conf(100))
	var ok, over atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rlreq("d", desc("b=x"), desc("a=1"))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := s.ShouldRateLimit(context.Background(), r)
				if err != nil {
					t.Errorf("goroutine %d: %v", g, err)
					return
				}
				if resp.OverallCode == pb.RateLimitResponse_OK {
					ok.Add(1)
				} else {
					over.Add(1)
				}
			}
		}()
	}
	for i := range 50 {
		writeFiles(t, dir, "d.yaml", conf(100+i%2*100))
		if err := s.LoadDir(dir); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	// At most the burst of the looser limit (200) and what an hour's
	// rate brings in the test's time, which is far below 1.
	if ok.Load() > 201 {
		t.Fatalf("%d allowed across reloads between 100 and 200 an hour, want at most 201", ok.Load())
	}
	if ok.Load() < 100 || over.Load() == 0 {
		t.Fatalf("%d allowed, %d over: want the burst allowed and the rest refused", ok.Load(), over.Load())
	}
	if n := s.n.loads.Load(); n != 51 {
		t.Fatalf("%d loads counted, want 51", n)
	}
}

// TestMetrics checks the Prometheus series: by policy (the configuration's
// names), near the limit, and the Service's own.
func TestMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, _ := serviceOf(t, Options{}, "d.yaml", hitsConfig)
		for range 12 {
			decide(t, s, rlreq("d", desc("a=secret-value")))
		}
		decide(t, s, rlreq("d", desc("zzz=1")))
		reg := prometheus.NewRegistry()
		if err := limitsprom.Register(reg, "rls", s); err != nil {
			t.Fatal(err)
		}
		exp := `
# HELP limits_ratelimit_near_limit_total Hits allowed that left their key with at most the share 1-NearLimitRatio of its burst, by limit.
# TYPE limits_ratelimit_near_limit_total counter
limits_ratelimit_near_limit_total{name="rls",policy="d.a"} 2
limits_ratelimit_near_limit_total{name="rls",policy="d.b"} 0
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "limits_ratelimit_near_limit_total"); err != nil {
			t.Fatal(err)
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, mf := range mfs {
			seen[mf.GetName()] = true
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if strings.Contains(l.GetValue(), "secret") {
						t.Fatalf("%s carries a descriptor's value: %v", mf.GetName(), m)
					}
				}
			}
		}
		for _, name := range []string{"limits_ratelimit_policy_requests_total", "limits_ratelimit_descriptors_total",
			"limits_ratelimit_errors_total", "limits_ratelimit_config_loads_total", "limits_ratelimit_calls_total"} {
			if !seen[name] {
				t.Errorf("no %s", name)
			}
		}
	})
}

// TestLimitOverride checks a descriptor that gives its own limit
// (RateLimitDescriptor.limit, from Envoy's rate limit override): it
// applies in place of the configuration's, per descriptor, and survives a
// reload.
func TestLimitOverride(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, dir := serviceOf(t, Options{}, "d.yaml", hitsConfig)
		over := func(value string) *pb.RateLimitRequest {
			d := desc("a=" + value)
			d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: typev3.RateLimitUnit_MINUTE}
			return rlreq("d", d)
		}
		if n := allowedOf(t, s, over("x"), 5); n != 3 {
			t.Fatalf("overridden to 3 a minute: %d of 5 allowed", n)
		}
		resp := decide(t, s, over("x"))
		if l := resp.Statuses[0].CurrentLimit; l.GetRequestsPerUnit() != 3 || l.GetUnit() != pb.RateLimitResponse_RateLimit_MINUTE {
			t.Fatalf("limit reported: %v", l)
		}
		if n := allowedOf(t, s, over("y"), 5); n != 3 {
			t.Fatalf("another value: %d of 5 allowed, want its own 3", n)
		}
		if err := s.LoadDir(dir); err != nil {
			t.Fatal(err)
		}
		if n := allowedOf(t, s, over("x"), 2); n != 0 {
			t.Fatalf("after a reload: %d allowed, want 0 (its state kept)", n)
		}
		if n := allowedOf(t, s, rlreq("d", desc("a=x")), 12); n != 10 {
			t.Fatalf("the configured limit of the same descriptor: %d of 12 allowed, want its own 10", n)
		}
	})
}
