package ratelimit

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// readmeService returns a Service loaded with the README example file
// name of testdata/readme.
func readmeService(t *testing.T, opts Options, names ...string) *Service {
	t.Helper()
	dir := t.TempDir()
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join("testdata", "readme", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.LoadDir(dir); err != nil {
		t.Fatal(err)
	}
	return s
}

// desc returns a descriptor of the key=value entries given.
func desc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for _, e := range kv {
		k, v, _ := strings.Cut(e, "=")
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

// withHits returns d with its own hits_addend.
func withHits(d *rlcommon.RateLimitDescriptor, n uint64) *rlcommon.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// rlreq returns a request of domain for descriptors.
func rlreq(domain string, ds ...*rlcommon.RateLimitDescriptor) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// decide calls ShouldRateLimit and fails the test on an error.
func decide(t *testing.T, s *Service, r *pb.RateLimitRequest) *pb.RateLimitResponse {
	t.Helper()
	resp, err := s.ShouldRateLimit(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Statuses) != len(r.Descriptors) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(r.Descriptors))
	}
	return resp
}

// codesOf returns the codes of resp's statuses, as a string such as
// "OK OVER_LIMIT".
func codesOf(resp *pb.RateLimitResponse) string {
	var out []string
	for _, s := range resp.Statuses {
		out = append(out, s.Code.String())
	}
	return strings.Join(out, " ")
}

// allowedOf sends r n times and returns how many were answered OK.
func allowedOf(t *testing.T, s *Service, r *pb.RateLimitRequest, n int) int {
	t.Helper()
	ok := 0
	for range n {
		if decide(t, s, r).OverallCode == pb.RateLimitResponse_OK {
			ok++
		}
	}
	return ok
}
