package ratelimit

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// moduleDir returns the directory of module path in the module cache, as
// this module requires it.
func moduleDir(t testing.TB, path string) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", path).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", path, err)
	}
	return strings.TrimSpace(string(out))
}

var (
	buildMu sync.Mutex
	built   = map[string]string{}
	binDir  string
)

// build builds the command pkg, from the module proxy or this repository
// as this module requires it, once per test binary, and returns the
// executable's path.
func build(t testing.TB, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p := built[pkg]; p != "" {
		return p
	}
	if binDir == "" {
		var err error
		if binDir, err = os.MkdirTemp("", "limits-bench-rls-"); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(binDir, strconv.Itoa(len(built))+"-"+filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	built[pkg] = out
	return out
}

// TestMain removes the executables built.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// freePort returns a free loopback port.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startRedis starts a redis-server of the test's own on a loopback port,
// stopped when the test ends, and returns its address and process id;
// without redis-server the test is skipped, or fails if
// LIMITSTEST_REQUIRE_REDIS=1.
func startRedis(t testing.TB) (string, int) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("LIMITSTEST_REQUIRE_REDIS") == "1" {
			t.Fatal("no redis-server, and LIMITSTEST_REQUIRE_REDIS=1")
		}
		t.Skip("no redis-server")
	}
	port := freePort(t)
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for i := 0; c.Ping(context.Background()).Err() != nil; i++ {
		if i == 500 {
			t.Fatal("redis-server did not answer within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return addr, cmd.Process.Pid
}
