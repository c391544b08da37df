package redislimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// The lease fault tests use 100 a second in bursts of 100 (T = 10ms, a
// burst recovers in 1s) and leases of at most 32 slots.
const (
	faultLimit = 100
	faultBurst = 100
	faultSlots = 32
)

// leaser returns a GCRA in lease mode on its own client, as a process of
// its own, whose calls fail at once on a refused connection.
func leaser(t *testing.T, addr, prefix string, opts ...Option) *GCRA {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	opts = append([]Option{WithBurst(faultBurst), WithPrefix(prefix), WithLeases(faultSlots, 0), WithTimeout(200 * time.Millisecond)}, opts...)
	return must(New(c, faultLimit, time.Second, opts...))
}

// heat makes key hot in g: unit requests until g holds slots. It returns
// how many were allowed.
func heat(t *testing.T, g *GCRA, key string) int {
	t.Helper()
	allowed := 0
	for range 100 {
		d, err := g.Allow(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
		}
		if g.LeaseStats().Held > 0 {
			return allowed
		}
	}
	t.Fatalf("no lease after 100 requests: %+v", g.LeaseStats())
	return 0
}

// drain makes unit requests for key from g until one is refused or fails,
// and returns how many were allowed and the last error.
func drain(g *GCRA, key string) (int, error) {
	allowed := 0
	for range 10 * faultBurst {
		d, err := g.Allow(context.Background(), key)
		if err != nil || !d.Allowed {
			return allowed, err
		}
		allowed++
	}
	return allowed, nil
}

// TestLeaseCrash checks that a process that stops holding slots (a crash)
// costs the others only those slots, and only until their times pass,
// within burst*T; and that ReturnLeases gives them back at once instead.
func TestLeaseCrash(t *testing.T) {
	srv := redistest.Start(t)
	for _, give := range []bool{false, true} {
		t.Run(fmt.Sprintf("return=%v", give), func(t *testing.T) {
			prefix := freshPrefix()
			a, b := leaser(t, srv.Addr(), prefix), leaser(t, srv.Addr(), prefix)
			spent := heat(t, a, "k")
			held := int(a.LeaseStats().Held)
			if give {
				n, err := a.ReturnLeases(context.Background())
				if err != nil || n != held {
					t.Fatalf("ReturnLeases: %d, %v; want %d", n, err, held)
				}
				held = 0
			}
			// a is gone. b finds the key charged for what a spent and
			// holds, give or take the slots that came back since.
			start := time.Now()
			got, err := drain(b, "k")
			elapsed := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			refill := int(elapsed/(10*time.Millisecond)) + 2
			t.Logf("a spent %d and holds %d; b then got %d in %v", spent, held, got, elapsed)
			if got+spent+held < faultBurst || got+spent+held > faultBurst+refill {
				t.Errorf("b got %d, want %d - %d - %d, give or take %d", got, faultBurst, spent, held, refill)
			}
			// Within burst*T the key is back to its full burst: a's slots
			// have expired with their times, and b's first lease may skip
			// as many slots as it takes (see WithLeases).
			time.Sleep(time.Second + 20*time.Millisecond)
			if got, err := drain(b, "k"); err != nil || got < faultBurst-faultSlots {
				t.Errorf("after burst*T: b got %d, %v; want the full burst, %d, less at most a lease", got, err, faultBurst)
			}
		})
	}
}

// TestLeaseRedisDown checks that with Redis killed, the slots in hand are
// still spent, every one of them and no more, and that the failure policy
// then applies, at once for a refused connection; that decisions come
// back with Redis; and that a restart, which forgets the keys, forgives
// the debts, letting through at most a burst more than the slots in hand.
func TestLeaseRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	g := leaser(t, srv.Addr(), freshPrefix())
	heat(t, g, "k")
	held := int(g.LeaseStats().Held)
	srv.Kill()
	for i := range held {
		d, err := g.Allow(context.Background(), "k")
		if err != nil || !d.Allowed {
			t.Fatalf("Redis down, slot %d of %d in hand: %+v, %v", i, held, d, err)
		}
	}
	start := time.Now()
	d, err := g.Allow(context.Background(), "k")
	if !errors.Is(err, ErrUnavailable) || d.Allowed || d.Reason != limits.ReasonUnavailable {
		t.Errorf("Redis down, slots spent: %+v, %v; want the fail-closed answer", d, err)
	}
	if elapsed := time.Since(start); elapsed > hangGuard {
		t.Errorf("Redis down: the failure took %v", elapsed)
	}
	srv.Restart()
	// Redis forgot the key: a burst, with the slots in hand (none now).
	got, err := drain(g, "k")
	if err != nil {
		t.Fatal(err)
	}
	// The measured rate carries over, so the first call may lease;
	// whatever it does, the restart forgives one burst and no more.
	if got < faultBurst-faultSlots || got > faultBurst+5 {
		t.Errorf("after a restart: %d allowed, want about the burst, %d", got, faultBurst)
	}
}

// TestLeaseFlush checks that a FLUSHALL while a process holds slots
// forgives the key's debt, as without leases, and lets the slots in hand
// be spent too: at most burst + the slots in hand at once, nothing more.
func TestLeaseFlush(t *testing.T) {
	srv := redistest.Start(t)
	g := leaser(t, srv.Addr(), freshPrefix())
	spent := heat(t, g, "k")
	held := int(g.LeaseStats().Held)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	if err := c.FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got, err := drain(g, "k")
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	refill := int(elapsed/(10*time.Millisecond)) + 1
	t.Logf("spent %d, held %d at the flush; then %d allowed in %v", spent, held, got, elapsed)
	if got > faultBurst+held+refill {
		t.Errorf("after a flush: %d allowed, beyond burst %d + %d in hand + %d", got, faultBurst, held, refill)
	}
	if got < faultBurst {
		t.Errorf("after a flush: %d allowed: the debt was not forgiven", got)
	}
}

// TestLeaseRedisHung checks that with Redis paused, the slots in hand are
// spent without waiting, and that once they are, every decision fails by
// the policy at the timeout, also for goroutines that wait for a lease
// another one asked for.
func TestLeaseRedisHung(t *testing.T) {
	srv := redistest.Start(t)
	g := leaser(t, srv.Addr(), freshPrefix(), WithTimeout(50*time.Millisecond))
	heat(t, g, "k")
	held := int(g.LeaseStats().Held)
	srv.Pause()
	defer srv.Resume()
	for i := range held {
		d, err := g.Allow(context.Background(), "k")
		if err != nil || !d.Allowed {
			t.Fatalf("Redis hung, slot %d of %d in hand: %+v, %v", i, held, d, err)
		}
	}
	var wg sync.WaitGroup
	start := time.Now()
	for range 8 {
		wg.Go(func() {
			_, err := g.Allow(context.Background(), "k")
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Redis hung, slots spent: error %v, want the deadline's", err)
			}
		})
	}
	wg.Wait()
	if elapsed := time.Since(start); elapsed > hangGuard {
		t.Errorf("Redis hung: 8 decisions took %v", elapsed)
	}
}

// TestLeaseAllocs checks that a decision from the slots in hand allocates
// nothing.
func TestLeaseAllocs(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	g := must(New(c, 1_000_000, time.Second, WithPrefix(freshPrefix()), WithLeases(4096, 0), WithTimeout(10*time.Second)))
	ctx := context.Background()
	for g.LeaseStats().Held < 1000 {
		if _, err := g.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	calls := g.Stats().Answered
	allocs := testing.AllocsPerRun(500, func() {
		if d, err := g.Allow(ctx, "k"); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
	})
	if g.Stats().Answered > calls+1 {
		// More than a lease taken ahead, on a goroutine of its own, whose
		// allocations are a few of 500 runs.
		t.Skip("the slots in hand ran out: the machine is too slow for this test") // only a call allocates
	}
	if allocs != 0 {
		t.Errorf("%v allocations a decision from the slots in hand, want 0", allocs)
	}
}

// TestLeaseAhead decides a key hot in two goroutines, paced so that a
// lease lasts many round trips, against a real redis-server: the next run
// is leased ahead while slots are in hand, every request is allowed, and
// the counters add up.
func TestLeaseAhead(t *testing.T) {
	srv := redistest.Start(t)
	g := must(New(newClient(t, srv.Addr(), true), 1_000_000, time.Second, WithPrefix(freshPrefix()), WithLeases(64, 0)))
	var wg sync.WaitGroup
	var refused, failed atomic.Int64
	for range 2 {
		wg.Go(func() {
			for range 1000 {
				d, err := g.Allow(context.Background(), "k")
				switch {
				case err != nil:
					failed.Add(1)
				case !d.Allowed:
					refused.Add(1)
				}
				time.Sleep(100 * time.Microsecond)
			}
		})
	}
	wg.Wait()
	s := g.LeaseStats()
	t.Logf("%+v; %d calls", s, g.Stats().Answered)
	if failed.Load() > 0 || refused.Load() > 0 {
		t.Errorf("%d failed, %d refused, at a key far below its limit", failed.Load(), refused.Load())
	}
	if s.Ahead == 0 {
		t.Error("no lease taken ahead at a key far below its limit, hot in the process")
	}
	if s.Slots != s.Spent+s.Expired+s.Returned+s.Held {
		t.Errorf("lease counters %+v do not add up", s)
	}
}

// TestLeaseAheadRedisHung hangs Redis under a key that is being leased
// ahead: the slots in hand are spent while the lease taken ahead hangs,
// every one of them allowed; then a request fails within the timeout,
// with the deadline's error, and once Redis answers again the key is
// decided again.
func TestLeaseAheadRedisHung(t *testing.T) {
	srv := redistest.Start(t)
	const timeout = time.Second // long enough that only a hung Redis fails a call
	var mu sync.Mutex
	var aheadErrs []error
	onError := func(err error) {
		if strings.Contains(err.Error(), "a lease taken ahead failed") {
			mu.Lock()
			aheadErrs = append(aheadErrs, err)
			mu.Unlock()
		}
	}
	g := must(New(newClient(t, srv.Addr(), true), 1_000_000, time.Second, WithPrefix(freshPrefix()), WithLeases(64, 0), WithTimeout(timeout), WithErrorHandler(onError)))
	ctx := context.Background()
	allow := func() (limits.Decision, time.Duration, error) {
		start := time.Now()
		d, err := g.Allow(ctx, "k")
		took := time.Since(start)
		time.Sleep(100 * time.Microsecond)
		return d, took, err
	}
	// Redis hangs as a lease is taken ahead, so that one is in flight,
	// however fast the calls go.
	tab := g.lim.Load().leases
	var armed atomic.Bool
	paused := make(chan struct{})
	async := tab.async
	tab.async = func(f func()) {
		if armed.Load() {
			select {
			case <-paused:
			default:
				srv.Pause()
				close(paused)
			}
		}
		async(f)
	}
	for g.LeaseStats().Ahead < 2 {
		if d, _, err := allow(); err != nil || !d.Allowed {
			t.Fatalf("before Redis hung: %+v, %v", d, err)
		}
		if g.Stats().Answered > 200 {
			t.Fatalf("no lease taken ahead in %d calls: %+v", g.Stats().Answered, g.LeaseStats())
		}
	}
	armed.Store(true)
	served := 0
	for hung := false; !hung; {
		select {
		case <-paused:
			hung = true
			continue
		default:
		}
		if d, _, err := allow(); err != nil || !d.Allowed {
			t.Fatalf("before Redis hung: %+v, %v", d, err)
		}
		if served++; served > 10_000 {
			t.Fatalf("no lease taken ahead in 10000 more calls: %+v", g.LeaseStats())
		}
	}
	served = 0
	for {
		d, took, err := allow()
		if err != nil {
			if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Redis hung, slots spent: error %v, want the deadline's", err)
			}
			if took > timeout+hangGuard {
				t.Errorf("Redis hung, slots spent: the failure took %v, timeout %v", took, timeout)
			}
			break
		}
		if !d.Allowed {
			t.Fatalf("Redis hung, %d served: refused %+v", served, d)
		}
		if served++; served > 1000 {
			t.Fatal("1000 decisions with Redis hung and no failure: leases of 64 slots")
		}
	}
	if served == 0 {
		t.Error("no decision from the slots in hand once Redis hung")
	}
	t.Logf("%d decisions served from the slots in hand with Redis hung", served)
	// The lease taken ahead fails within its timeout, but its goroutine
	// may report it after the decision that failed: wait for it, on a
	// machine however busy.
	for wait := time.Now(); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		n := len(aheadErrs)
		mu.Unlock()
		if n > 0 || time.Since(wait) > 10*time.Second {
			break
		}
	}
	mu.Lock()
	if len(aheadErrs) != 1 || !errors.Is(aheadErrs[0], ErrUnavailable) || !errors.Is(aheadErrs[0], context.DeadlineExceeded) {
		t.Errorf("the error handler saw %v for the lease taken ahead, want one error of the deadline's", aheadErrs)
	}
	mu.Unlock()
	// The lease taken ahead decided nothing: the failures count the one
	// decision that failed.
	if s, f := g.Stats(), g.CallStats().Failures; s.Errors != 1 || f != (Failures{Timeout: 1}) {
		t.Errorf("Redis hung: Stats %+v, Failures %+v; want the one decision that failed, a timeout", s, f)
	}
	srv.Resume()
	deadline := time.Now().Add(5 * time.Second)
	for {
		d, _, err := allow()
		if err == nil && d.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis answers again, the key is not decided: %+v, %v", d, err)
		}
	}
	if s := g.LeaseStats(); s.Slots != s.Spent+s.Expired+s.Returned+s.Held {
		t.Errorf("lease counters %+v do not add up", s)
	}
}

// TestLeaseFailuresAddUp stops Redis (SIGSTOP) under a key hot in the
// process whose slots in hand have expired, and makes 3 decisions on
// each of 4 goroutines, then of 32: every one fails, most of them by
// sharing the failure of a lease another goroutine asked for, and the
// failures by kind count each decision that failed, adding up to Errors.
func TestLeaseFailuresAddUp(t *testing.T) {
	srv := redistest.Start(t)
	for _, goroutines := range []int{4, 32} {
		t.Run(fmt.Sprint(goroutines), func(t *testing.T) {
			g := leaser(t, srv.Addr(), freshPrefix(), WithLeases(16, 0), WithTimeout(50*time.Millisecond))
			ctx := context.Background()
			heat(t, g, "k")
			for g.LeaseStats().Held > 0 { // the slots in hand expire within burst*T
				time.Sleep(10 * time.Millisecond)
				if _, err := g.Peek(ctx, "k"); err != nil {
					t.Fatal(err)
				}
			}
			srv.Pause()
			defer srv.Resume()
			var wg sync.WaitGroup
			var failed atomic.Uint64
			for range goroutines {
				wg.Go(func() {
					for range 3 {
						if _, err := g.Allow(ctx, "k"); errors.Is(err, ErrUnavailable) {
							failed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			s, f := g.Stats(), g.CallStats().Failures
			t.Logf("%+v; %+v; %+v", s, f, g.LeaseStats())
			if want := uint64(3 * goroutines); failed.Load() != want || s.Errors != want {
				t.Errorf("Redis stopped: %d decisions failed, Stats.Errors %d; want %d", failed.Load(), s.Errors, want)
			}
			if sum := f.Timeout + f.Connection + f.Canceled + f.Server + f.Other; sum != s.Errors+s.RefundErrors || f.Timeout != s.Errors {
				t.Errorf("Failures %+v add up to %d, want Errors + RefundErrors = %d, all timeouts", f, sum, s.Errors+s.RefundErrors)
			}
		})
	}
}

// TestLeaseAheadFailureCounted kills Redis under a key that is being
// leased ahead: the lease taken ahead fails at once, on a refused
// connection, while slots are in hand, and decides nothing: it counts in
// LeaseStats.AheadErrors; the request that fails once the slots are spent
// is the one failure of the failures by kind, which add up to Errors.
func TestLeaseAheadFailureCounted(t *testing.T) {
	srv := redistest.Start(t)
	// Whether a lease is taken ahead after the kill depends on how the
	// run's pace compares with the calls' time: on a machine so busy that
	// none is, try again.
	for range 10 {
		if aheadFailureCounted(t, srv) {
			return
		}
	}
	t.Skip("no lease taken ahead failed in 10 runs: the machine is too slow for this test")
}

// aheadFailureCounted runs TestLeaseAheadFailureCounted once, on a GCRA of
// its own, and reports false, having checked only the counters' sums, if
// no lease taken ahead failed.
func aheadFailureCounted(t *testing.T, srv *redistest.Server) bool {
	var aheadErrs atomic.Uint64
	onError := func(err error) {
		if strings.Contains(err.Error(), "a lease taken ahead failed") {
			aheadErrs.Add(1)
		}
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	g := must(New(c, 1_000_000, time.Second, WithPrefix(freshPrefix()), WithLeases(64, 0), WithErrorHandler(onError)))
	ctx := context.Background()
	allow := func() (limits.Decision, error) {
		d, err := g.Allow(ctx, "k")
		time.Sleep(100 * time.Microsecond)
		return d, err
	}
	for g.LeaseStats().Ahead < 2 {
		if d, err := allow(); err != nil || !d.Allowed {
			t.Fatalf("before Redis went down: %+v, %v", d, err)
		}
		if g.Stats().Answered > 200 {
			t.Fatalf("no lease taken ahead in %d calls: %+v", g.Stats().Answered, g.LeaseStats())
		}
	}
	srv.Kill()
	defer srv.Restart()
	for served := 0; ; served++ {
		d, err := allow()
		if err != nil {
			break
		}
		if !d.Allowed {
			t.Fatalf("Redis down, %d served: refused %+v", served, d)
		}
		if served > 1000 {
			t.Fatal("1000 decisions with Redis down and no failure: leases of 64 slots")
		}
	}
	s, f, ls := g.Stats(), g.CallStats().Failures, g.LeaseStats()
	t.Logf("%+v; %+v; %+v; %d failures of leases taken ahead reported", s, f, ls, aheadErrs.Load())
	if sum := f.Timeout + f.Connection + f.Canceled + f.Server + f.Other; s.Errors != 1 || sum != s.Errors+s.RefundErrors {
		t.Errorf("Redis down: Stats %+v, Failures %+v add up to %d; want the one decision that failed", s, f, sum)
	}
	if ls.AheadErrors != aheadErrs.Load() {
		t.Errorf("LeaseStats.AheadErrors %d, %d failures of leases taken ahead reported", ls.AheadErrors, aheadErrs.Load())
	}
	return aheadErrs.Load() > 0
}
