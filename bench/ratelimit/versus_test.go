package ratelimit

// The side-by-side measurement of this repository's rate limit service
// and envoyproxy/ratelimit, both built from their modules and run as
// processes of their own against one redis-server:
//
//	LIMITSTEST_BENCH_RLS=1 go test -run '^$' -bench VersusEnvoy -benchtime 1x -timeout 10m
//
// Without LIMITSTEST_BENCH_RLS=1 it is skipped, so that the benchmarks' run in
// CI stays short. LIMITSTEST_BENCH_RLS_OUT names a file to write the tables to,
// in Markdown.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// benchConfig is the configuration both servers read.
const benchConfig = `domain: bench
descriptors:
  - key: hot
    rate_limit: {unit: second, requests_per_unit: 10000000}
  - key: warm
    rate_limit: {unit: second, requests_per_unit: 100000}
  - key: cold
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: edge
    rate_limit: {unit: second, requests_per_unit: 100}
`

// server is a rate limit service running as a process of its own.
type server struct {
	name string
	addr string
	cmd  *exec.Cmd
	conn []*grpc.ClientConn
}

// start starts the server and waits until it answers.
func (s *server) start(t testing.TB, conns int) {
	t.Helper()
	if s.cmd.Stderr == nil {
		s.cmd.Stdout, s.cmd.Stderr = os.Stderr, os.Stderr
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.cmd.Process.Kill(); s.cmd.Wait() })
	for range conns {
		c, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		s.conn = append(s.conn, c)
	}
	cl := pb.NewRateLimitServiceClient(s.conn[0])
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cl.ShouldRateLimit(ctx, request("probe", "x"))
		cancel()
		if err == nil {
			return
		}
		if i == 600 {
			t.Fatalf("%s did not answer within a minute: %v", s.name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cpu returns the CPU time the process has used.
func cpu(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command's name, in parentheses: utime and stime
	// are the 12th and 13th, in clock ticks of 1/100 s.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// redisCalls returns the commands clients have sent Redis, but those of
// the measurement itself (INFO, PING, CLIENT, HELLO, COMMAND, CONFIG): a
// script call (EVALSHA) is one; the commands a script runs inside Redis
// (TIME, GET, SET, DEL in redislimit's scripts, which envoyproxy/ratelimit
// does not send) are not calls, and their cost is in Redis's CPU time.
func redisCalls(t testing.TB, rdb *redis.Client) int64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, rest, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		switch strings.SplitN(name, "|", 2)[0] {
		case "info", "ping", "client", "hello", "command", "config", "select", "time", "get", "set", "del":
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		v, _ := strconv.ParseInt(calls, 10, 64)
		n += v
	}
	return n
}

func request(key, value string) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: key, Value: value}}},
	}}
}

// result is one server's figures for one load.
type result struct {
	decisions           int64
	errors              int64
	wall, cpu, redisCPU time.Duration
	p50, p99            time.Duration
	redisCalls          int64
}

// drive sends requests from workers goroutines over the server's
// connections, for d or until next returns nil, and measures.
func drive(t testing.TB, s *server, rdb *redis.Client, redisPid, workers int, d time.Duration, next func(worker, i int) *pb.RateLimitRequest) result {
	t.Helper()
	var wg sync.WaitGroup
	lat := make([][]time.Duration, workers)
	var errs atomic.Int64
	cpu0, rcpu0, calls0 := cpu(s.cmd.Process.Pid), cpu(redisPid), redisCalls(t, rdb)
	start := time.Now()
	deadline := start.Add(d)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := pb.NewRateLimitServiceClient(s.conn[w%len(s.conn)])
			for i := 0; time.Now().Before(deadline); i++ {
				r := next(w, i)
				if r == nil {
					return
				}
				t0 := time.Now()
				_, err := cl.ShouldRateLimit(context.Background(), r)
				lat[w] = append(lat[w], time.Since(t0))
				if err != nil {
					errs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	res := result{wall: time.Since(start), errors: errs.Load()}
	res.cpu = cpu(s.cmd.Process.Pid) - cpu0
	res.redisCPU = cpu(redisPid) - rcpu0
	res.redisCalls = redisCalls(t, rdb) - calls0
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	res.decisions = int64(len(all))
	if len(all) > 0 {
		res.p50, res.p99 = all[len(all)/2], all[len(all)*99/100]
	}
	return res
}

// edge drives descriptor edge (100 a second) from idle, from 0.9 of a
// wall-clock second to 0.1 of the next (where envoyproxy/ratelimit's
// fixed windows turn), and returns the end time of each call allowed.
func edge(t testing.TB, s *server, value string) []time.Time {
	now := time.Now()
	at := now.Truncate(time.Second).Add(1900 * time.Millisecond)
	time.Sleep(time.Until(at))
	end := at.Add(200 * time.Millisecond)
	var mu sync.Mutex
	var allowed []time.Time
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := pb.NewRateLimitServiceClient(s.conn[w%len(s.conn)])
			r := request("edge", value)
			for time.Now().Before(end) {
				resp, err := cl.ShouldRateLimit(context.Background(), r)
				if err == nil && resp.OverallCode == pb.RateLimitResponse_OK {
					mu.Lock()
					allowed = append(allowed, time.Now())
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(allowed, func(a, b time.Time) int { return a.Compare(b) })
	return allowed
}

// most returns the most times within any interval of length d.
func most(ts []time.Time, d time.Duration) int {
	best, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) > d {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

// BenchmarkVersusEnvoy measures both services side by side, on one
// redis-server, each as a process of its own driven over loopback gRPC:
// decisions per second, the p50 and p99 of ShouldRateLimit, CPU time per
// decision (the server's, and Redis's), and Redis calls per 1,000
// decisions, for one hot descriptor, 1,000 warm ones and 100,000 cold
// ones; then what each admits around a window's edge. It runs once,
// whatever b.N, and only with LIMITSTEST_BENCH_RLS=1.
func BenchmarkVersusEnvoy(b *testing.B) {
	if os.Getenv("LIMITSTEST_BENCH_RLS") != "1" {
		b.Skip("the side-by-side measurement runs with LIMITSTEST_BENCH_RLS=1 (see the file's comment)")
	}
	for range b.N {
		versus(b)
	}
}

func versus(b *testing.B) {
	load0, _ := os.ReadFile("/proc/loadavg")
	envoyBin := build(b, envoyModule+"/src/service_cmd")
	oursBin := build(b, "github.com/limitsgo/limits/ratelimit/cmd/limits-ratelimit")
	redisAddr, redisPid := startRedis(b)
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()

	// envoyproxy/ratelimit reads RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config;
	// ours the same directory.
	root := b.TempDir()
	cfgDir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "bench.yaml"), []byte(benchConfig+"  - key: probe\n    rate_limit: {unit: second, requests_per_unit: 1000000}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	const conns = 2
	envoyPort, oursPort := freePort(b), freePort(b)
	envoy := &server{name: "envoyproxy/ratelimit", addr: "127.0.0.1:" + strconv.Itoa(envoyPort), cmd: exec.Command(envoyBin)}
	// Its stats are off: with USE_STATSD=false they are logged, which
	// would cost it more than its decisions.
	envoy.cmd.Stdout, envoy.cmd.Stderr = io.Discard, io.Discard
	envoy.cmd.Env = append(os.Environ(), "DISABLE_STATS=true", "USE_STATSD=false", "LOG_LEVEL=error", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr,
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_APPDIRECTORY=config", "RUNTIME_WATCH_ROOT=false",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(envoyPort), "HOST=127.0.0.1", "PORT="+strconv.Itoa(freePort(b)),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(freePort(b)))
	ours := &server{name: "limits-ratelimit", addr: "127.0.0.1:" + strconv.Itoa(oursPort),
		cmd: exec.Command(oursBin, "-config", cfgDir, "-grpc", "127.0.0.1:"+strconv.Itoa(oursPort), "-http", "",
			"-redis", redisAddr, "-log-level", "error", "-watch", "0")}
	envoy.start(b, conns)
	ours.start(b, conns)
	servers := []*server{envoy, ours}

	const workers = 16
	dur := 5 * time.Second
	if v := os.Getenv("LIMITSTEST_BENCH_RLS_SECONDS"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			dur = time.Duration(n) * time.Second
		}
	}
	var cold atomic.Int64
	loads := []struct {
		name string
		next func(w, i int) *pb.RateLimitRequest
	}{
		{"one hot descriptor", func(w, i int) *pb.RateLimitRequest { return request("hot", "h") }},
		{"1,000 warm descriptors", func(w, i int) *pb.RateLimitRequest {
			return request("warm", strconv.Itoa((w*7919+i)%1000))
		}},
		{"100,000 cold descriptors", func(w, i int) *pb.RateLimitRequest {
			n := cold.Add(1)
			if n > 100000 {
				return nil
			}
			return request("cold", "c"+strconv.FormatInt(n, 10))
		}},
	}
	var out strings.Builder
	fmt.Fprintf(&out, "| load | server | decisions/s | p50 | p99 | server CPU per decision | decisions per CPU-second | Redis CPU per decision | Redis calls per 1,000 decisions | errors |\n")
	fmt.Fprintf(&out, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, l := range loads {
		for _, s := range servers {
			cold.Store(0)
			// A second of warm-up at the load, not measured.
			if l.name != "100,000 cold descriptors" {
				drive(b, s, rdb, redisPid, workers, time.Second, l.next)
			}
			r := drive(b, s, rdb, redisPid, workers, dur, l.next)
			per := func(d time.Duration) string {
				if r.decisions == 0 {
					return "-"
				}
				return (d / time.Duration(r.decisions)).String()
			}
			perCPU := "-"
			if r.cpu > 0 {
				perCPU = strconv.FormatInt(int64(float64(r.decisions)/r.cpu.Seconds()), 10)
			}
			fmt.Fprintf(&out, "| %s | %s | %.0f | %v | %v | %s | %s | %s | %.1f | %d |\n", l.name, s.name,
				float64(r.decisions)/r.wall.Seconds(), r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond),
				per(r.cpu), perCPU, per(r.redisCPU), 1000*float64(r.redisCalls)/float64(max(r.decisions, 1)), r.errors)
		}
	}
	fmt.Fprintf(&out, "\nAround a window's edge: descriptor edge, 100 a second (a GCRA of burst 100), idle, then driven by 8 goroutines from 0.9 of a wall-clock second to 0.1 of the next. The most allowed in any interval of length d, against the GCRA's bound burst + d/T:\n\n")
	fmt.Fprintf(&out, "| server | allowed in all | d = 10ms | d = 50ms | d = 100ms | d = 200ms (bound 120) |\n| --- | ---: | ---: | ---: | ---: | ---: |\n")
	for i, s := range servers {
		ts := edge(b, s, "e"+strconv.Itoa(i))
		fmt.Fprintf(&out, "| %s | %d | %d (bound 101) | %d (bound 105) | %d (bound 110) | %d |\n", s.name, len(ts),
			most(ts, 10*time.Millisecond), most(ts, 50*time.Millisecond), most(ts, 100*time.Millisecond), most(ts, 200*time.Millisecond))
	}
	load1, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&out, "\n%d workers over %d connections per server, %v per load; load average %s before, %s after.\n",
		workers, conns, dur, strings.Join(strings.Fields(string(load0))[:3], " "), strings.Join(strings.Fields(string(load1))[:3], " "))
	fmt.Println(out.String())
	if f := os.Getenv("LIMITSTEST_BENCH_RLS_OUT"); f != "" {
		if err := os.WriteFile(f, []byte(out.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}
