package redistest

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// orphanEnv, set to 1, makes TestServerEndsWithTest the child process
// that starts a server and exits without its cleanup.
const orphanEnv = "REDISTEST_ORPHAN_CHILD"

// TestServerEndsWithTest checks that a server does not outlive a test
// process that ends without running its cleanup, as one that panics or
// calls os.Exit does: it runs this test again as a child that starts a
// server, prints its address and exits at once, and then expects the
// address to stop answering.
func TestServerEndsWithTest(t *testing.T) {
	if os.Getenv(orphanEnv) == "1" {
		s := Start(t)
		os.Stdout.WriteString("addr " + s.Addr() + "\n")
		os.Exit(3) // no cleanup, as after a panic
	}
	if runtime.GOOS != "linux" {
		t.Skip("a server outlives a process that ends without cleanup but on Linux")
	}
	if Binary() == "" {
		Start(t) // skips, or fails if required
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestServerEndsWithTest$", "-test.count=1")
	cmd.Env = append(os.Environ(), orphanEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := ""
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "addr "); ok {
			addr = a
		}
	}
	_ = cmd.Wait()
	if addr == "" {
		t.Fatal("the child printed no server address")
	}
	deadline := time.Now().Add(5 * time.Second)
	for ping(addr) == nil {
		if time.Now().After(deadline) {
			_, _ = Command(addr, "SHUTDOWN", "NOSAVE") // do not leave it running
			t.Fatalf("the server at %s still answers 5s after its test process ended", addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
