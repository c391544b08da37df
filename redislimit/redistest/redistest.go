// Package redistest runs a throwaway redis-server for tests: one process on
// a free loopback port, with persistence off, stopped when the test ends,
// that a test can kill, restart and pause to see how its code copes. On
// Linux a server also ends with the test process when that ends without
// its cleanup, as after a panic.
//
// Start skips the test when no redis-server binary is found, unless the
// environment variable LIMITSTEST_REQUIRE_REDIS is 1 (as in continuous
// integration), which makes a missing binary a failure instead.
package redistest

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RequireEnv is the environment variable that, set to 1, turns a missing
// redis-server into a test failure instead of a skip.
const RequireEnv = "LIMITSTEST_REQUIRE_REDIS"

// startTimeout bounds the wait for a server to accept connections.
const startTimeout = 10 * time.Second

// Server is a redis-server process owned by one test. Its methods are safe
// for concurrent use, but the state changes (Kill, Restart, Pause, Resume)
// are meant to be made from the test's own goroutine.
type Server struct {
	tb    testing.TB
	bin   string
	dir   string
	port  int
	extra []string // more configuration, as command-line arguments

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	log    *syncBuffer
}

// Binary returns the path of redis-server, from PATH or /usr/bin, or "" if
// there is none.
func Binary() string {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/redis-server"); err == nil {
		return "/usr/bin/redis-server"
	}
	return ""
}

// Start starts a redis-server on a free loopback port, with no RDB
// snapshots and no append-only file, waits until it answers PING, and
// stops it when tb's test ends. Without a redis-server binary it skips tb,
// or fails it if LIMITSTEST_REQUIRE_REDIS=1.
func Start(tb testing.TB) *Server {
	tb.Helper()
	return start(tb)
}

// start is Start with more configuration.
func start(tb testing.TB, extra ...string) *Server {
	tb.Helper()
	bin := Binary()
	if bin == "" {
		msg := "redistest: redis-server not found in PATH or /usr/bin (install it, e.g. apt-get install redis-server)"
		if os.Getenv(RequireEnv) == "1" {
			tb.Fatal(msg + "; " + RequireEnv + "=1 requires it")
		}
		tb.Skip(msg + "; skipping")
	}
	s := &Server{tb: tb, bin: bin, dir: tb.TempDir(), extra: extra}
	tb.Cleanup(s.stop)
	var err error
	for range 5 { // another process may take the port between our pick and the server's bind
		if s.port, err = freePort(); err != nil {
			continue
		}
		if err = s.start(); err == nil {
			return s
		}
	}
	tb.Fatalf("redistest: cannot start redis-server: %v", err)
	return nil
}

// Main runs a test binary's tests, examples included, with a redis-server
// started for the whole run, whose address it puts in the environment
// variable env, such as "REDIS_ADDR", so that examples can reach it. It is
// meant for TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(redistest.Main(m, "REDIS_ADDR")) }
//
// Without a redis-server binary it fails the run if LIMITSTEST_REQUIRE_REDIS=1,
// and otherwise runs the tests with the examples skipped: tests that need
// a server skip themselves through Start. It returns the exit code.
func Main(m *testing.M, env string) int {
	if Binary() == "" {
		if os.Getenv(RequireEnv) == "1" {
			fmt.Fprintln(os.Stderr, "redistest: redis-server not found in PATH or /usr/bin; "+RequireEnv+"=1 requires it")
			return 1
		}
		flag.Parse()
		flag.Set("test.skip", "^Example")
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "redistest")
	if err != nil {
		fmt.Fprintln(os.Stderr, "redistest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	s := &Server{bin: Binary(), dir: dir}
	for range 5 {
		if s.port, err = freePort(); err != nil {
			continue
		}
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "redistest: cannot start redis-server:", err)
		return 1
	}
	defer s.stop()
	os.Setenv(env, s.Addr())
	return m.Run()
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs the server on s.port and waits until it answers.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("already running")
	}
	log := &syncBuffer{}
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--logfile", "",
	}
	cmd := exec.Command(s.bin, append(args, s.extra...)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = childAttr()
	// The server is started, and waited for, by a goroutine locked to its
	// thread: on Linux the server is killed when the thread that started
	// it ends (childAttr), so that thread lives as long as the server.
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		err := cmd.Start()
		started <- err
		if err == nil {
			_ = cmd.Wait()
			close(exited)
		}
	}()
	if err := <-started; err != nil {
		return err
	}
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-exited:
			return fmt.Errorf("redis-server exited at start:\n%s", log.String())
		default:
		}
		if ping(s.Addr()) == nil {
			break
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("redis-server did not answer within %v:\n%s", startTimeout, log.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.cmd, s.exited, s.log = cmd, exited, log
	return nil
}

// ping sends PING to addr and checks the answer.
func ping(addr string) error {
	reply, err := Command(addr, "PING")
	if err == nil && reply != "PONG" {
		err = fmt.Errorf("PING answered %q", reply)
	}
	return err
}

// Addr returns the server's address, "127.0.0.1:port". It stays the same
// across Kill and Restart.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Kill ends the server at once with SIGKILL, as a crash would, and waits
// until it is gone. Its data is lost: persistence is off.
func (s *Server) Kill() {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.tb.Fatal("redistest: Kill: the server is not running")
	}
	_ = s.cmd.Process.Kill() // SIGKILL also ends a stopped process
	<-s.exited
	s.cmd = nil
}

// Restart starts the server again on the same port after Kill, empty, and
// waits until it answers.
func (s *Server) Restart() {
	s.tb.Helper()
	if err := s.start(); err != nil {
		s.tb.Fatalf("redistest: Restart: %v", err)
	}
}

// Pause stops the server with SIGSTOP: it keeps its port and its
// connections but answers nothing, like a server stuck in a long command,
// until Resume.
func (s *Server) Pause() { s.signal("Pause", syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() { s.signal("Resume", syscall.SIGCONT) }

func (s *Server) signal(name string, sig syscall.Signal) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.tb.Fatalf("redistest: %s: the server is not running", name)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.tb.Fatalf("redistest: %s: %v", name, err)
	}
}

// stop kills the server if it runs; it is registered with tb.Cleanup.
func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
	if s.tb != nil && s.tb.Failed() {
		s.tb.Logf("redistest: redis-server log:\n%s", s.log.String())
	}
}

// syncBuffer is a bytes.Buffer safe for the writes of a process's output
// and concurrent reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
