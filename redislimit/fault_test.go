package redislimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// hangGuard bounds calls that must end at a deadline of milliseconds; it
// only catches calls that hang (the client's own timeouts are 5s).
const hangGuard = 3 * time.Second

// down describes what a policy answers while Redis is down, for a GCRA of
// 10 an hour in bursts of 3 whose fallback, if any, allows bursts of 2.
type down struct {
	name    string
	opt     func(local *limits.GCRA) Option
	unit    []limits.Decision // three unit requests in a row
	above   limits.Decision   // a request of cost 4
	peek    limits.Decision   // Peek after the unit requests
	wantErr bool
}

func policyCases() []down {
	const h = time.Hour
	return []down{
		{
			name: "FailClosed", opt: func(*limits.GCRA) Option { return OnError(FailClosed) }, wantErr: true,
			unit: []limits.Decision{
				{Reason: limits.ReasonUnavailable, Limit: 10, Period: h, Burst: 3, Cost: 1},
				{Reason: limits.ReasonUnavailable, Limit: 10, Period: h, Burst: 3, Cost: 1},
				{Reason: limits.ReasonUnavailable, Limit: 10, Period: h, Burst: 3, Cost: 1},
			},
			above: limits.Decision{Reason: limits.ReasonCostAboveBurst, Limit: 10, Period: h, Burst: 3, Cost: 4},
			peek:  limits.Decision{Reason: limits.ReasonUnavailable, Limit: 10, Period: h, Burst: 3, Cost: 1},
		},
		{
			name: "FailOpen", opt: func(*limits.GCRA) Option { return OnError(FailOpen) },
			unit: []limits.Decision{
				{Allowed: true, Limit: 10, Period: h, Burst: 3, Cost: 1},
				{Allowed: true, Limit: 10, Period: h, Burst: 3, Cost: 1},
				{Allowed: true, Limit: 10, Period: h, Burst: 3, Cost: 1},
			},
			above: limits.Decision{Reason: limits.ReasonCostAboveBurst, Limit: 10, Period: h, Burst: 3, Cost: 4},
			peek:  limits.Decision{Allowed: true, Limit: 10, Period: h, Burst: 3, Cost: 1},
		},
		{
			name: "Fallback", opt: WithFallback,
			unit: []limits.Decision{
				{Allowed: true, Limit: 10, Period: h, Burst: 2, Cost: 1, Remaining: 1, ResetAfter: 6 * time.Minute},
				{Allowed: true, Limit: 10, Period: h, Burst: 2, Cost: 1, Remaining: 0, ResetAfter: 12 * time.Minute},
				{Reason: limits.ReasonRateLimited, Limit: 10, Period: h, Burst: 2, Cost: 1, RetryAfter: 6 * time.Minute, ResetAfter: 12 * time.Minute},
			},
			above: limits.Decision{Reason: limits.ReasonCostAboveBurst, Limit: 10, Period: h, Burst: 2, Cost: 4, ResetAfter: 12 * time.Minute},
			peek:  limits.Decision{Reason: limits.ReasonRateLimited, Limit: 10, Period: h, Burst: 2, Cost: 1, RetryAfter: 6 * time.Minute, ResetAfter: 12 * time.Minute},
		},
	}
}

// roughly returns d's exported fields with its durations rounded to
// minutes and no At, so that a local GCRA's decisions can be compared while
// its clock runs.
func roughly(d limits.Decision) limits.Decision {
	d = public(d)
	d.RetryAfter = d.RetryAfter.Round(time.Minute)
	d.ResetAfter = d.ResetAfter.Round(time.Minute)
	d.At = time.Time{}
	return d
}

// TestPolicies checks each failure policy with Redis down at the start, then
// back, then killed in the middle of the run, then back again: while it is
// down every call gets what the policy's doc says and is counted, and once
// it is back decisions come from Redis again.
func TestPolicies(t *testing.T) {
	for _, contextTimeout := range []bool{false, true} {
		for _, pc := range policyCases() {
			t.Run(fmt.Sprintf("%s/contextTimeout=%v", pc.name, contextTimeout), func(t *testing.T) {
				srv := redistest.Start(t)
				// A client that gives up on a refused connection at once,
				// rather than at the timeout after retries, for speed.
				c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: contextTimeout, MaxRetries: -1, DialerRetries: 1})
				t.Cleanup(func() { c.Close() })
				ctx := context.Background()
				var handled atomic.Int64
				local := limits.NewGCRA(10, time.Hour, limits.WithBurst(2))
				g := must(New(c, 10, time.Hour, WithBurst(3), WithPrefix(freshPrefix()), pc.opt(local),
					WithTimeout(200*time.Millisecond),
					WithErrorHandler(func(err error) {
						if !errors.Is(err, ErrUnavailable) {
							t.Errorf("handler got %v", err)
						}
						handled.Add(1)
					})))
				var wantStats Stats

				checkDown := func(stage, key string) {
					t.Helper()
					start := time.Now()
					for i, want := range pc.unit {
						d, err := g.Allow(ctx, key)
						checkPolicy(t, fmt.Sprintf("%s: request %d", stage, i), d, err, want, pc.wantErr)
					}
					d, err := g.AllowN(ctx, key, 4)
					checkPolicy(t, stage+": cost 4", d, err, pc.above, pc.wantErr)
					d, err = g.Peek(ctx, key)
					checkPolicy(t, stage+": Peek", d, err, pc.peek, pc.wantErr)
					if elapsed := time.Since(start); elapsed > hangGuard {
						t.Errorf("%s: five calls took %v", stage, elapsed)
					}
					wantStats.Errors += 5
					if pc.name == "Fallback" {
						wantStats.Fallbacks += 5
					}
					if got := g.Stats(); got != wantStats {
						t.Errorf("%s: Stats %+v, want %+v", stage, got, wantStats)
					}
					if got := handled.Load(); got != int64(wantStats.Errors) {
						t.Errorf("%s: error handler called %d times, want %d", stage, got, wantStats.Errors)
					}
				}
				checkUp := func(stage string, remaining int) {
					t.Helper()
					d, err := g.Allow(ctx, "k")
					if err != nil || !d.Allowed || d.Remaining != remaining || d.Burst != 3 {
						t.Errorf("%s: %+v, %v; want allowed by Redis with %d remaining", stage, d, err, remaining)
					}
					wantStats.Answered++
					if got := g.Stats(); got != wantStats {
						t.Errorf("%s: Stats %+v, want %+v", stage, got, wantStats)
					}
				}

				srv.Kill()
				checkDown("down at start", "k")
				srv.Restart()
				checkUp("back", 2)
				checkUp("back", 1)
				srv.Kill()
				checkDown("killed mid-run", "m") // a key the fallback has not seen
				srv.Restart()
				checkUp("back again", 2) // the restart lost the state
			})
		}
	}
}

// checkPolicy compares a decision made without Redis with the policy's:
// only a fallback GCRA's decisions read a clock and have an At.
func checkPolicy(t *testing.T, what string, d limits.Decision, err error, want limits.Decision, wantErr bool) {
	t.Helper()
	if wantErr != (err != nil) || (err != nil && !errors.Is(err, ErrUnavailable)) {
		t.Errorf("%s: error %v, want one wrapping ErrUnavailable: %v", what, err, wantErr)
	}
	if roughly(d) != want {
		t.Errorf("%s: %+v\nwant %+v", what, roughly(d), want)
	}
	if local := want.Burst == 2; d.At.IsZero() == local {
		t.Errorf("%s: At %v", what, d.At)
	}
}

// TestSlowServer pauses the server and checks that calls end at the
// deadline, the timeout's or the caller's, with an error saying so, with
// either kind of client; and that decisions resume once the server does.
func TestSlowServer(t *testing.T) {
	for _, contextTimeout := range []bool{false, true} {
		t.Run(fmt.Sprintf("contextTimeout=%v", contextTimeout), func(t *testing.T) {
			srv := redistest.Start(t)
			c := newClient(t, srv.Addr(), contextTimeout)
			prefix := freshPrefix()
			short := must(New(c, 10, time.Hour, WithPrefix(prefix), WithTimeout(50*time.Millisecond)))
			long := must(New(c, 10, time.Hour, WithPrefix(prefix), WithTimeout(time.Hour)))
			if _, err := long.Allow(context.Background(), "warm"); err != nil { // a connection in the pool
				t.Fatal(err)
			}
			srv.Pause()
			paused := true
			defer func() {
				if paused {
					srv.Resume()
				}
			}()
			for i := range 3 { // the pooled connection, then new ones
				start := time.Now()
				_, err := short.Allow(context.Background(), "k")
				elapsed := time.Since(start)
				if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("call %d with a 50ms timeout: error %v", i, err)
				}
				if elapsed > hangGuard {
					t.Errorf("call %d with a 50ms timeout took %v", i, elapsed)
				}

				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				start = time.Now()
				_, err = long.Allow(ctx, "k")
				elapsed = time.Since(start)
				cancel()
				if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("call %d with a 50ms context: error %v", i, err)
				}
				if elapsed > hangGuard {
					t.Errorf("call %d with a 50ms context took %v", i, elapsed)
				}
			}
			// A context already ended gets no decision either.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if _, err := long.Allow(ctx, "k"); !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.Canceled) {
				t.Errorf("canceled context: error %v", err)
			}
			srv.Resume()
			paused = false
			d, err := long.Allow(context.Background(), "after")
			if err != nil || !d.Allowed {
				t.Errorf("after Resume: %+v, %v", d, err)
			}
			if s := short.Stats(); s.Errors != 3 {
				t.Errorf("short: Stats %+v, want 3 errors", s)
			}
		})
	}
}

// TestKillUnderLoad kills and restarts the server while goroutines keep
// deciding, and checks that every call either gets Redis's decision or the
// fail-closed answer, with no panic, and that decisions resume.
func TestKillUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	g := must(New(c, 1000, time.Second, WithPrefix(freshPrefix())))
	var stop atomic.Bool
	var answered, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for !stop.Load() {
				d, err := g.Allow(context.Background(), fmt.Sprint("k", w))
				switch {
				case err == nil:
					answered.Add(1)
				case errors.Is(err, ErrUnavailable) && !d.Allowed && d.Reason == limits.ReasonUnavailable:
					failed.Add(1)
				default:
					t.Errorf("%+v, %v", d, err)
					return
				}
			}
		})
	}
	wait := func(what string, counter *atomic.Int64) {
		t.Helper()
		for start := counter.Load(); counter.Load() < start+20; {
			if t.Failed() {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	wait("answers", &answered)
	srv.Kill()
	wait("failures", &failed)
	srv.Restart()
	wait("answers after the restart", &answered)
	stop.Store(true)
	wg.Wait()
	s := g.Stats()
	if s.Answered != uint64(answered.Load()) || s.Errors != uint64(failed.Load()) {
		t.Errorf("Stats %+v, counted %d answered and %d failed", s, answered.Load(), failed.Load())
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestUnreachableSaysWhy checks that when nothing listens at Redis's
// address, the error says that the connection was refused, not only that
// the deadline passed, with either kind of client, for decisions and
// refunds, from the first call on.
func TestUnreachableSaysWhy(t *testing.T) {
	for _, contextTimeout := range []bool{false, true} {
		t.Run(fmt.Sprintf("contextTimeout=%v", contextTimeout), func(t *testing.T) {
			c := newClient(t, closedAddr(t), contextTimeout)
			g := must(New(c, 10, time.Second))
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "connection refused") {
					t.Errorf("%s: error %v, want one saying that the connection was refused", what, err)
				}
			}
			for i := range 3 {
				start := time.Now()
				_, err := g.Allow(context.Background(), "k")
				check(fmt.Sprintf("Allow %d", i), err)
				if i == 0 {
					t.Log(err)
				}
				if elapsed := time.Since(start); elapsed > hangGuard {
					t.Errorf("Allow %d took %v", i, elapsed)
				}
			}
			d := limits.Decision{Allowed: true, Limit: 10, Period: time.Second, Burst: 10, Cost: 1, ResetAfter: 100 * time.Millisecond, At: time.Now().Round(0)}
			check("Refund", g.Refund(context.Background(), "k", d))
		})
	}
}

// TestDialWatchShared checks that a client gets one dial hook however many
// GCRAs use it, and each client its own.
func TestDialWatchShared(t *testing.T) {
	addr := closedAddr(t)
	a, b := newClient(t, addr, true), newClient(t, addr, true)
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}})
	t.Cleanup(func() { cluster.Close() })
	ga1, ga2, gb := must(New(a, 1, time.Second)), must(New(a, 2, time.Second)), must(New(b, 1, time.Second))
	gc1, gc2 := must(New(cluster, 1, time.Second)), must(New(cluster, 1, time.Second))
	if ga1.dials == nil || ga1.dials != ga2.dials || gb.dials == ga1.dials {
		t.Errorf("watches %p %p %p: want one per client", ga1.dials, ga2.dials, gb.dials)
	}
	if gc1.dials == nil || gc1.dials != gc2.dials {
		t.Errorf("cluster watches %p %p: want one", gc1.dials, gc2.dials)
	}
}

// TestDialWatchesFreed checks that a client given to New is garbage once
// its user drops it, with or without client-side caching (whose clients'
// clones, as the bound client is, refer back to them), and that its entry
// in watches goes with it.
func TestDialWatchesFreed(t *testing.T) {
	srv := redistest.Start(t)
	for _, csc := range []bool{false, true} {
		var freed atomic.Int64
		func() {
			for range 10 {
				o := &redis.Options{Addr: srv.Addr(), Protocol: 3}
				if csc {
					o.ClientSideCacheConfig = &redis.ClientSideCacheConfig{}
				}
				c := redis.NewClient(o)
				runtime.AddCleanup(c, func(*atomic.Int64) { freed.Add(1) }, &freed)
				g := must(New(c, 10, time.Hour, WithPrefix(freshPrefix())))
				if _, err := g.Take(context.Background(), "k", 1); err != nil {
					t.Fatal(err)
				}
				c.Close()
			}
		}()
		for i := 0; i < 50 && freed.Load() < 10; i++ {
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
		if n := freed.Load(); n < 10 {
			t.Errorf("client-side caching %v: %d of 10 clients freed after they were dropped", csc, n)
		}
	}
	stale := func() (n int) {
		watches.Lock()
		defer watches.Unlock()
		for _, w := range watches.m {
			if w.Value() == nil {
				n++
			}
		}
		return n
	}
	for i := 0; i < 50 && stale() > 0; i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if n := stale(); n > 0 {
		t.Errorf("watches holds %d entries whose clients are garbage", n)
	}
}
