package redislimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

func TestLatencyBucket(t *testing.T) {
	const us = time.Microsecond
	tests := []struct {
		d    time.Duration
		want int
	}{
		{-time.Second, 0}, {0, 0}, {1, 0}, {25 * us, 0},
		{25*us + 1, 1}, {50 * us, 1}, {50*us + 1, 2}, {100 * us, 2},
		{time.Millisecond, 6}, // 800µs < 1ms <= 1.6ms
		{409600 * us, 14}, {409600*us + 1, 15}, {time.Hour, 15}, {1<<63 - 1, 15},
	}
	for _, tt := range tests {
		if got := bucket(tt.d); got != tt.want {
			t.Errorf("bucket(%v) = %d, want %d", tt.d, got, tt.want)
		}
	}
	var l Latency
	for i := range LatencyBuckets {
		b := l.Bound(i)
		if got := bucket(b); got != i {
			t.Errorf("bucket(Bound(%d) = %v) = %d", i, b, got)
		}
		if got := bucket(b + 1); got != i+1 {
			t.Errorf("bucket(Bound(%d)+1ns) = %d, want %d", i, got, i+1)
		}
	}
	if got, want := l.Bound(LatencyBuckets-1), 409600*us; got != want {
		t.Errorf("last bound %v, want %v", got, want)
	}
}

func TestLatencyBoundPanics(t *testing.T) {
	for _, i := range []int{-1, LatencyBuckets} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Bound(%d) did not panic", i)
				}
			}()
			Latency{}.Bound(i)
		}()
	}
}

func TestClassify(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	tests := []struct {
		name string
		err  error
		want kind
	}{
		{"deadline", fmt.Errorf("%w: %w", ErrUnavailable, context.DeadlineExceeded), kindTimeout},
		{"socket timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, kindTimeout},
		{"pool timeout", redis.ErrPoolTimeout, kindTimeout},
		{"late refund", errLate, kindTimeout},
		{"canceled", fmt.Errorf("%w: %w", context.Canceled, io.EOF), kindCanceled},
		{"refused", refused, kindConnection},
		{"deadline while connecting", &connectFailed{fmt.Errorf("%w, connecting failed: %w", context.DeadlineExceeded, refused)}, kindConnection},
		{"errno", syscall.ECONNRESET, kindConnection},
		{"eof", io.EOF, kindConnection},
		{"closed client", redis.ErrClosed, kindConnection},
		{"server error", fmt.Errorf("%w", redis.ErrNoScript), kindServer},
		{"bad reply", fmt.Errorf("%w: 3 values", errReply), kindServer},
		{"other", errors.New("something else"), kindOther},
	}
	for _, tt := range tests {
		if got := classify(tt.err); got != tt.want {
			t.Errorf("%s: classify(%v) = %d, want %d", tt.name, tt.err, got, tt.want)
		}
	}
}

func TestObserveAllocs(t *testing.T) {
	var c counters
	d := time.Duration(0)
	if n := testing.AllocsPerRun(1000, func() {
		c.observe(d)
		d += 7 * time.Microsecond
	}); n != 0 {
		t.Errorf("observe: %v allocations per call, want 0", n)
	}
}

// checkSums checks the invariants of g's snapshots, taken while no call
// runs: the failures by kind add up to the failed calls, and the latency
// buckets to the calls.
func checkSums(t *testing.T, g *GCRA) {
	t.Helper()
	s, cs := g.Stats(), g.CallStats()
	f := cs.Failures
	if sum := f.Timeout + f.Connection + f.Canceled + f.Server + f.Other; sum != s.Errors+s.RefundErrors {
		t.Errorf("Stats %+v: %d failures by kind, %d failed calls", s, sum, s.Errors+s.RefundErrors)
	}
	var n uint64
	for _, c := range cs.Latency.Counts {
		n += c
	}
	if n != cs.Latency.Count || n != s.Answered+s.Errors+s.Refunds+s.RefundErrors {
		t.Errorf("Stats %+v: %d calls in the buckets, Count %d, want %d", s, n, cs.Latency.Count,
			s.Answered+s.Errors+s.Refunds+s.RefundErrors)
	}
}

// TestStatsLatency checks that every call, answered or not, decision or
// refund, is timed once, in a bucket that holds its time.
func TestStatsLatency(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	g := must(New(c, 10, time.Hour, WithPrefix(freshPrefix())))
	var took time.Duration
	for i := range 5 {
		start := time.Now()
		d, err := g.Allow(ctx, "k")
		if err != nil || !d.Allowed {
			t.Fatalf("request %d: %+v, %v", i, d, err)
		}
		if i == 0 {
			if err := g.Refund(ctx, "k", d); err != nil {
				t.Fatal(err)
			}
		}
		took += time.Since(start)
	}
	s, cs := g.Stats(), g.CallStats()
	if s.Answered != 5 || s.Refunds != 1 || cs.Latency.Count != 6 {
		t.Errorf("Stats %+v, %+v: want 5 answered, 1 refund, 6 calls timed", s, cs)
	}
	if cs.Latency.Sum <= 0 || cs.Latency.Sum > took {
		t.Errorf("Latency.Sum %v, want within (0, %v]", cs.Latency.Sum, took)
	}
	checkSums(t, g)
}

// TestStatsFailures makes calls fail in each way the kinds tell apart and
// checks that each is counted once, under its kind, and timed, with
// either kind of client.
func TestStatsFailures(t *testing.T) {
	for _, contextTimeout := range []bool{false, true} {
		t.Run(fmt.Sprintf("contextTimeout=%v", contextTimeout), func(t *testing.T) { testStatsFailures(t, contextTimeout) })
	}
}

func testStatsFailures(t *testing.T, contextTimeout bool) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: contextTimeout, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	local := limits.NewGCRA(10, time.Hour)
	g := must(New(c, 10, time.Hour, WithPrefix(freshPrefix()), WithTimeout(50*time.Millisecond), WithFallback(local)))
	d, err := g.Allow(ctx, "k")
	if err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	want := Stats{Answered: 1}
	var wantF Failures
	check := func(stage string) {
		t.Helper()
		if got := g.Stats(); got != want {
			t.Errorf("%s: Stats %+v, want %+v", stage, got, want)
		}
		if got := g.CallStats().Failures; got != wantF {
			t.Errorf("%s: Failures %+v, want %+v", stage, got, wantF)
		}
		checkSums(t, g)
	}
	check("at the start")

	// A key holding a list: Redis answers with an error.
	c.RPush(ctx, g.Key("list"), "x")
	g.Allow(ctx, "list")
	want.Errors, want.Fallbacks, wantF.Server = 1, 1, 1
	check("a foreign value")

	// A paused server: the deadline passes, for a decision and a refund.
	srv.Pause()
	g.Allow(ctx, "k")
	if err := g.Refund(ctx, "k", d); err == nil {
		t.Error("Refund with the server paused: no error")
	}
	srv.Resume()
	want.Errors, want.Fallbacks, want.RefundErrors, wantF.Timeout = 2, 2, 1, 2
	check("a paused server")

	// A caller that gives up.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	g.Allow(canceled, "k")
	want.Errors, want.Fallbacks, wantF.Canceled = 3, 3, 1
	check("a canceled context")

	// No server at all.
	srv.Kill()
	g.Allow(ctx, "k")
	want.Errors, want.Fallbacks, wantF.Connection = 4, 4, 1
	check("a killed server")
	srv.Restart()
}

// BenchmarkObserve measures what timing a call costs it: the histogram's
// atomic additions, from one goroutine and from many.
func BenchmarkObserve(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		var c counters
		b.ReportAllocs()
		d := time.Duration(0)
		for b.Loop() {
			c.observe(d)
			d += 7 * time.Microsecond
		}
	})
	b.Run("parallel", func(b *testing.B) {
		var c counters
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			d := time.Duration(0)
			for pb.Next() {
				c.observe(d)
				d += 7 * time.Microsecond
			}
		})
	})
}

// With nothing listening at Redis's address, each call fails on the
// connection, and is timed.
func ExampleGCRA_CallStats() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // nothing listens there
	defer rdb.Close()
	g, _ := New(rdb, 10, time.Second)
	for range 2 {
		g.Allow(context.Background(), "alice")
	}
	s := g.CallStats()
	fmt.Printf("%+v\n", s.Failures)
	fmt.Println(s.Latency.Count, "calls timed; the first bucket holds calls of at most", s.Latency.Bound(0))
	// Output:
	// {Timeout:0 Connection:2 Canceled:0 Server:0 Other:0}
	// 2 calls timed; the first bucket holds calls of at most 25µs
}
