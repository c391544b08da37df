package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// env returns a lookup of the variables given as name=value.
func envOf(vars ...string) func(string) (string, bool) {
	m := map[string]string{}
	for _, v := range vars {
		k, val, _ := strings.Cut(v, "=")
		m[k] = val
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestRunsTheExample runs the command on the example configuration, as
// envoyproxy/ratelimit's environment gives it, and asks it over gRPC and
// HTTP.
func TestRunsTheExample(t *testing.T) {
	done := make(chan error, 1)
	type addrs struct {
		grpc, http string
		stop       context.CancelFunc
	}
	ready := make(chan addrs, 1)
	go func() {
		done <- run([]string{"-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0"},
			envOf("RUNTIME_ROOT=../..", "RUNTIME_SUBDIRECTORY=examples", "LIMIT_RESPONSE_HEADERS_ENABLED=true"), io.Discard,
			func(g, h string, stop context.CancelFunc) { ready <- addrs{g, h, stop} })
	}()
	var a addrs
	select {
	case a = <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(a.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	req := &pb.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.66"}}},
	}}
	resp, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
	if err != nil || resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the blocked address: %v, %v", resp, err)
	}
	req.Descriptors[0].Entries[0].Value = "192.0.2.1"
	resp, err = pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req)
	if err != nil || resp.OverallCode != pb.RateLimitResponse_OK || len(resp.ResponseHeadersToAdd) != 2 {
		t.Fatalf("another address: %v, %v; want OK with the RateLimit fields", resp, err)
	}
	if h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", h, err)
	}
	post, err := http.Post("http://"+a.http+"/json", "application/json",
		strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"192.0.2.66"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(post.Body)
	post.Body.Close()
	if post.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(body), `"OVER_LIMIT"`) {
		t.Fatalf("/json: %d %s", post.StatusCode, body)
	}
	for _, path := range []string{"/healthcheck", "/rlconfig", "/metrics"} {
		r, err := http.Get("http://" + a.http + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != http.StatusOK || len(b) == 0 {
			t.Fatalf("%s: %d %q", path, r.StatusCode, b)
		}
	}
	a.stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRefusesAtStart checks that the command stops at start on what it
// cannot do, naming it.
func TestRefusesAtStart(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  []string
		want string
	}{
		{nil, nil, "-config is required"},
		{[]string{"-config", "../../examples/config"}, []string{"BACKEND_TYPE=memcache"}, "BACKEND_TYPE=memcache"},
		{[]string{"-config", "../../examples/config"}, []string{"CONFIG_TYPE=GRPC_XDS_SOTW"}, "CONFIG_TYPE"},
		{[]string{"-config", "../../examples/config", "-headers", "all"}, nil, "Headers must be"},
		{[]string{"-config", "../../testdata/nope"}, nil, "loading the configuration"},
		{[]string{"-config", "../../examples/config", "-redis", "a:1,b:2"}, nil, "a single Redis has one address"},
	} {
		err := run(append(c.args, "-grpc", "127.0.0.1:0", "-http", ""), envOf(c.env...), io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: %v, want an error containing %q", c.args, c.env, err, c.want)
		}
	}
}
