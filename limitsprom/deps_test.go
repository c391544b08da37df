package limitsprom_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The modules whose packages the exporters link, or must not.
const (
	goRedis    = "github.com/redis/go-redis/v9"
	redisLimit = "github.com/limitsgo/limits/redislimit"
	grpc       = "google.golang.org/grpc"
	grpcLimit  = "github.com/limitsgo/limits/grpclimit"
	promClient = "github.com/prometheus/client_golang"
	otel       = "go.opentelemetry.io/otel"
)

// TestDeps checks, with go list -deps, that each package links what it
// exports with and nothing else: limitsprom and limitsotel link neither a
// Redis client nor gRPC, whatever components they take, and neither links
// the other's metrics library. That each package does link the one it
// needs shows that the test can see a dependency at all.
func TestDeps(t *testing.T) {
	for _, c := range []struct {
		dir        string
		need, deny []string
	}{
		{".", []string{promClient}, []string{goRedis, redisLimit, grpc, grpcLimit, otel}},
		{"./limitsotel", []string{otel}, []string{goRedis, redisLimit, grpc, grpcLimit, promClient}},
	} {
		t.Run(strings.TrimPrefix(c.dir, "./"), func(t *testing.T) {
			// limitsotel is a module of its own: list it from its
			// directory.
			deps := goList(t, c.dir, "list", "-deps", "-f", "{{.ImportPath}}", ".")
			check(t, c.dir+": go list -deps", deps, c.need, c.deny)
		})
	}
}

// TestModuleGraph checks, with go list -m all, that the module graphs of
// limitsprom and limitsotel, tests included, hold no module of gRPC or of
// a Redis client, and not our grpclimit or redislimit: a user of either
// gets none of them in its own graph.
func TestModuleGraph(t *testing.T) {
	for _, c := range []struct {
		dir        string
		need, deny []string
	}{
		{".", []string{promClient}, []string{goRedis, redisLimit, grpc, grpcLimit, otel}},
		{"./limitsotel", []string{otel}, []string{goRedis, redisLimit, grpc, grpcLimit, promClient}},
	} {
		t.Run(strings.TrimPrefix(c.dir, "./"), func(t *testing.T) {
			mods := goList(t, c.dir, "list", "-m", "-f", "{{.Path}}", "all")
			check(t, c.dir+": go list -m all", mods, c.need, c.deny)
		})
	}
}

// goList runs the go command with args in dir and returns the fields of
// its output.
func goList(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command:", err)
	}
	cmd := exec.Command(goCmd, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, ee.Stderr)
		}
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	return strings.Fields(string(out))
}

// check checks that list holds a path of each module of need and none of
// deny.
func check(t *testing.T, what string, list, need, deny []string) {
	t.Helper()
	in := func(mod string) []string {
		var found []string
		for _, d := range list {
			if d == mod || strings.HasPrefix(d, mod+"/") {
				found = append(found, d)
			}
		}
		return found
	}
	for _, mod := range need {
		if len(in(mod)) == 0 {
			t.Errorf("%s: no %s, which it needs", what, mod)
		}
	}
	for _, mod := range deny {
		if found := in(mod); len(found) > 0 {
			t.Errorf("%s: %s: %d, such as %s", what, mod, len(found), found[len(found)-1])
		}
	}
}
