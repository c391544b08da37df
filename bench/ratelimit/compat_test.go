// Package ratelimit measures the rate limit service of module
// github.com/limitsgo/limits/ratelimit against envoyproxy/ratelimit, both
// built from the module proxy, and checks that the one reads the other's
// configuration and answers its client.
package ratelimit

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/limitsgo/limits/ratelimit"
)

const envoyModule = "github.com/envoyproxy/ratelimit"

// TestEnvoyConfigs loads the configuration files of envoyproxy/ratelimit's
// own repository, from the module proxy: its example configuration, and
// the files of its configuration tests, each accepted or refused as those
// tests expect.
func TestEnvoyConfigs(t *testing.T) {
	dir := moduleDir(t, envoyModule)
	if _, err := ratelimit.LoadDir(filepath.Join(dir, "examples", "ratelimit", "config"), ratelimit.LoadOptions{}); err != nil {
		t.Fatalf("the example configuration: %v", err)
	}
	refused := map[string]bool{
		"bad_limit_unit.yaml": true, "bad_yaml.yaml": true, "duplicate_key.yaml": true, "empty_domain.yaml": true,
		"empty_key.yaml": true, "misspelled_key.yaml": true, "misspelled_key2.yaml": true, "non_map_list.yaml": true,
		"non_string_key.yaml": true, "replaces_empty.yaml": true, "replaces_self.yaml": true, "unlimited_with_unit.yaml": true,
	}
	files, err := filepath.Glob(filepath.Join(dir, "test", "config", "*.yaml"))
	if err != nil || len(files) < 15 {
		t.Fatalf("%d configuration files of envoyproxy/ratelimit's tests: %v", len(files), err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d, err := ratelimit.ParseDomain(name, b)
		switch {
		case refused[name] && err == nil:
			t.Errorf("%s: accepted, which envoyproxy/ratelimit refuses", name)
		case refused[name]:
			t.Logf("%s: refused: %v", name, err)
		case err != nil:
			t.Errorf("%s: %v, which envoyproxy/ratelimit accepts", name, err)
		default:
			s, err := ratelimit.New(ratelimit.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Load([]*ratelimit.Domain{d}); err != nil {
				t.Errorf("%s: parsed, then refused: %v", name, err)
			}
		}
	}
	// Two files of one domain: refused, unless merged.
	for _, merge := range []bool{false, true} {
		tmp := t.TempDir()
		for _, name := range []string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"} {
			b, _ := os.ReadFile(filepath.Join(dir, "test", "config", name))
			os.WriteFile(filepath.Join(tmp, name), b, 0o644)
		}
		_, err := ratelimit.LoadDir(tmp, ratelimit.LoadOptions{MergeDomains: merge})
		if (err == nil) != merge {
			t.Errorf("one domain in two files, merging %v: %v", merge, err)
		}
	}
}

// TestEnvoyClient runs envoyproxy/ratelimit's own client command
// (src/client_cmd, built from the module proxy) against this service,
// loaded with envoyproxy/ratelimit's example configuration, and reads
// its answers.
func TestEnvoyClient(t *testing.T) {
	client := build(t, envoyModule+"/src/client_cmd")
	s, err := ratelimit.New(ratelimit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.LoadDir(filepath.Join(moduleDir(t, envoyModule), "examples", "ratelimit", "config")); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(srv, s)
	go srv.Serve(l)
	defer srv.Stop()
	ask := func(domain string, descriptors ...string) string {
		t.Helper()
		args := []string{"-dial_string", l.Addr().String(), "-domain", domain}
		for _, d := range descriptors {
			args = append(args, "-descriptors", d)
		}
		out, err := exec.Command(client, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("client %v: %v\n%s", args, err, out)
		}
		_, resp, ok := strings.Cut(string(out), "response: ")
		if !ok {
			t.Fatalf("client %v: no response in\n%s", args, out)
		}
		return strings.Join(strings.Fields(resp), " ")
	}
	// foo: 2 a minute; the third is over the limit.
	for i, want := range []string{"overall_code:OK", "overall_code:OK", "overall_code:OVER_LIMIT"} {
		if got := ask("rl", "foo=x"); !strings.HasPrefix(got, want) || !strings.Contains(got, "requests_per_unit:2 unit:MINUTE") {
			t.Fatalf("foo=x, call %d: %s; want %s with 2 a MINUTE", i+1, got, want)
		}
	}
	// bar=banned: requests_per_unit 0, refused always.
	if got := ask("rl", "foo=y,bar=banned"); !strings.HasPrefix(got, "overall_code:OVER_LIMIT") {
		t.Fatalf("foo=y,bar=banned: %s", got)
	}
	// baz=shady: in shadow mode, never refused.
	for range 5 {
		if got := ask("rl", "foo=z,baz=shady"); !strings.HasPrefix(got, "overall_code:OK") {
			t.Fatalf("foo=z,baz=shady (shadow mode): %s", got)
		}
	}
	// qux: unlimited.
	if got := ask("rl", "qux=a"); !strings.Contains(got, "limit_remaining:4294967295") {
		t.Fatalf("qux=a (unlimited): %s", got)
	}
	// Two descriptors, the first replacing the second's limit (bkthomps):
	// the first's limit applies, the second's is dropped.
	if got := ask("rl", "source_cluster=proxy,destination_cluster=bkthomps", "foo=w,bar=bkthomps"); !strings.HasPrefix(got, "overall_code:OK") {
		t.Fatalf("replaces: %s", got)
	}
	// The other domain of the example directory.
	if got := ask("mongo_cps", "database=users"); !strings.Contains(got, "requests_per_unit:500 unit:SECOND") {
		t.Fatalf("mongo_cps: %s", got)
	}
}
