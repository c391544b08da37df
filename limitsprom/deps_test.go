package limitsprom_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The modules that only some packages of this module may link.
const (
	goRedis    = "github.com/redis/go-redis/v9"
	redisLimit = "github.com/limitsgo/limits/redislimit"
	grpc       = "google.golang.org/grpc"
	grpcLimit  = "github.com/limitsgo/limits/grpclimit"
	promClient = "github.com/prometheus/client_golang"
	otel       = "go.opentelemetry.io/otel"
)

// TestDeps checks, with go list -deps, that each package links what it
// exports and nothing it does not: limitsprom and limitsotel link neither
// a Redis client nor gRPC, the Redis packages no gRPC, the gRPC packages
// no Redis client, and the Prometheus packages no OpenTelemetry (and the
// reverse). That each package does link the one it needs shows that the
// test can see a dependency at all.
func TestDeps(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	for _, c := range []struct {
		pkg        string
		need, deny []string
	}{
		{".", []string{promClient}, []string{goRedis, redisLimit, grpc, grpcLimit, otel}},
		{"./limitsotel", []string{otel}, []string{goRedis, redisLimit, grpc, grpcLimit, promClient}},
		{"./redislimitprom", []string{goRedis, promClient}, []string{grpc, grpcLimit, otel}},
		{"./grpclimitprom", []string{grpc, promClient}, []string{goRedis, redisLimit, otel}},
		{"./limitsotel/redislimitotel", []string{goRedis, otel}, []string{grpc, grpcLimit, promClient}},
		{"./limitsotel/grpclimitotel", []string{grpc, otel}, []string{goRedis, redisLimit, promClient}},
	} {
		t.Run(strings.TrimPrefix(c.pkg, "./"), func(t *testing.T) {
			// Each exporter is a module of its own: list it from its
			// directory.
			cmd := exec.Command(goCmd, "list", "-deps", "-f", "{{.ImportPath}}", ".")
			cmd.Dir = c.pkg
			out, err := cmd.Output()
			if err != nil {
				if ee, ok := err.(*exec.ExitError); ok {
					t.Fatalf("go list -deps %s: %v\n%s", c.pkg, err, ee.Stderr)
				}
				t.Fatalf("go list -deps %s: %v", c.pkg, err)
			}
			deps := strings.Fields(string(out))
			in := func(mod string) []string {
				var found []string
				for _, d := range deps {
					if d == mod || strings.HasPrefix(d, mod+"/") {
						found = append(found, d)
					}
				}
				return found
			}
			for _, mod := range c.need {
				if len(in(mod)) == 0 {
					t.Errorf("%s does not link %s, which it needs", c.pkg, mod)
				}
			}
			for _, mod := range c.deny {
				if found := in(mod); len(found) > 0 {
					t.Errorf("%s links %s: %d packages, such as %s", c.pkg, mod, len(found), found[len(found)-1])
				}
			}
		})
	}
}
