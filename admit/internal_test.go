package admit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
)

// slow is a limiter that answers after a delay, ignoring its context, and
// records the refunds it is asked for.
type slow struct {
	delay    time.Duration
	mu       sync.Mutex
	refunded []limits.Decision
}

func (s *slow) Take(_ context.Context, key string, n int) (limits.Decision, error) {
	time.Sleep(s.delay)
	return limits.Decision{Allowed: true, Cost: n}, nil
}

func (s *slow) Refund(_ context.Context, key string, d limits.Decision) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refunded = append(s.refunded, d)
	return nil
}

func TestLimiterTakeBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &slow{delay: time.Second}
		lim := &limiter{remote: l, timeout: 100 * time.Millisecond}
		start := time.Now()
		_, err := lim.take(context.Background(), "k", 2, time.Time{})
		if !errors.Is(err, errLimiterTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("take of a limiter past its timeout: %v", err)
		}
		if d := time.Since(start); d != 100*time.Millisecond {
			t.Errorf("take returned after %v, want the 100ms timeout", d)
		}
		// The limiter allowed the request after the caller gave up: its
		// charge is given back.
		time.Sleep(time.Second)
		synctest.Wait()
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.refunded) != 1 || l.refunded[0].Cost != 2 {
			t.Errorf("refunds after a late answer: %+v, want the one charge of 2", l.refunded)
		}
	})
}

func TestLimiterTakeDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &slow{delay: time.Second}
		lim := &limiter{remote: l, timeout: time.Hour}
		start := time.Now()
		// The request's deadline comes before the limiter's timeout.
		if _, err := lim.take(context.Background(), "k", 1, start.Add(30*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("take past the request's deadline: %v", err)
		}
		if d := time.Since(start); d != 30*time.Millisecond {
			t.Errorf("take returned after %v, want the deadline's 30ms", d)
		}
		time.Sleep(time.Second)
		synctest.Wait()
	})
}

func TestLimiterTakeInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &slow{delay: 10 * time.Millisecond}
		lim := &limiter{remote: l, timeout: defaultLimiterTimeout}
		c, err := lim.take(context.Background(), "k", 1, time.Time{})
		if err != nil || !c.dec.Allowed {
			t.Errorf("take: %+v, %v", c.dec, err)
		}
		synctest.Wait()
		if len(l.refunded) != 0 {
			t.Errorf("an answer in time was refunded: %+v", l.refunded)
		}
		// The caller's own context ends first.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := lim.take(ctx, "k", 1, time.Time{}); !errors.Is(err, context.Canceled) {
			t.Errorf("take with a cancelled context: %v", err)
		}
		time.Sleep(time.Second) // until the abandoned call returns
		synctest.Wait()
		if len(l.refunded) != 1 {
			t.Errorf("refunds after an abandoned call: %+v", l.refunded)
		}
	})
}

// counting is a Limiter that counts the calls of Take.
type counting struct {
	limits.Limiter
	mu sync.Mutex
	n  int
}

func (c *counting) Take(ctx context.Context, key string, n int) (limits.Decision, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.Limiter.Take(ctx, key, n)
}

// TestLimiterLocalInFront checks the local limiter in front of a remote
// one: a request it refuses never reaches the other, and what it charged
// is given back when the other refuses, or by a refund. A GCRA of this
// process behind a local one is asked directly.
func TestLimiterLocalInFront(t *testing.T) {
	ctx := context.Background()
	for _, direct := range []bool{false, true} {
		shared := limits.NewGCRA(3, time.Hour)
		calls := &counting{Limiter: shared}
		lim := &limiter{remote: calls, local: limits.NewGCRA(2, time.Hour), timeout: time.Second}
		if direct {
			lim.remote = shared
		}
		for i, want := range []bool{true, true, false, false} {
			c, err := lim.take(ctx, "k", 1, time.Time{})
			if err != nil || c.dec.Allowed != want {
				t.Fatalf("direct %v, request %d: %+v, %v", direct, i, c.dec, err)
			}
		}
		if !direct && calls.n != 2 {
			t.Errorf("the shared limiter was asked %d times, want 2: the local one refused the rest", calls.n)
		}
		// The shared limiter refuses: the local charge is given back.
		shared.AllowN("j", 3)
		if c, _ := lim.take(ctx, "j", 1, time.Time{}); c.dec.Allowed {
			t.Fatalf("direct %v, shared refusal: %+v", direct, c.dec)
		}
		if p := lim.local.Peek("j"); p.Remaining != 2 {
			t.Errorf("direct %v, local bucket after a shared refusal: %+v, want it whole", direct, p)
		}
		// A refund gives back both charges.
		c, _ := lim.take(ctx, "m", 2, time.Time{})
		c.refund(ctx)
		if p, q := lim.local.Peek("m"), shared.Peek("m"); p.Remaining != 2 || q.Remaining != 3 {
			t.Errorf("direct %v, after a refund: local %d, shared %d remaining", direct, p.Remaining, q.Remaining)
		}
	}
}

// refusedAtDeadline is a limiter with a timeout of its own, as a remote
// one has, whose store refuses connections: it keeps trying until its
// deadline, then returns the cause.
type refusedAtDeadline struct{ timeout time.Duration }

func (l refusedAtDeadline) Take(ctx context.Context, _ string, _ int) (limits.Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	<-ctx.Done()
	return limits.Decision{}, fmt.Errorf("store unavailable: %w, connecting failed: dial tcp 127.0.0.1:6379: %w", ctx.Err(), syscall.ECONNREFUSED)
}

func (refusedAtDeadline) Refund(context.Context, string, limits.Decision) error { return nil }

// TestLimiterTakeKeepsCause checks that when the bound of a limiter call
// and the limiter's own timeout end together, the error is the limiter's,
// with its cause, not the bound's.
func TestLimiterTakeKeepsCause(t *testing.T) {
	for _, timeout := range []time.Duration{100 * time.Millisecond, time.Millisecond, time.Second} {
		synctest.Test(t, func(t *testing.T) {
			lim := &limiter{remote: refusedAtDeadline{timeout}, timeout: timeout}
			for i := range 50 {
				start := time.Now()
				_, err := lim.take(context.Background(), "k", 1, time.Time{})
				if !errors.Is(err, syscall.ECONNREFUSED) || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("timeout %v, call %d: %v, want the limiter's error", timeout, i, err)
				}
				if d := time.Since(start); d > timeout {
					t.Fatalf("timeout %v, call %d: returned after %v", timeout, i, d)
				}
			}
		})
	}
}

func TestSlots(t *testing.T) {
	s := newSlots(2, 3)
	for _, k := range []string{"a", "a", "b", "c"} {
		if r := s.acquire(k); r != Allowed {
			t.Fatalf("acquire(%s): %v", k, r)
		}
	}
	if r := s.acquire("a"); r != ConcurrencyLimited {
		t.Errorf("a third for a: %v", r)
	}
	if r := s.acquire("d"); r != ConcurrencyTableFull {
		t.Errorf("a fourth client: %v", r)
	}
	s.release("c")
	if r := s.acquire("d"); r != Allowed || s.len() != 3 {
		t.Errorf("after c left: %v, %d clients", r, s.len())
	}
	s.release("a")
	s.release("a")
	s.release("a") // one too many: nothing to give back
	if s.len() != 2 {
		t.Errorf("%d clients after a left", s.len())
	}
	// Lower caps: a client over them keeps what it has, and gets no more
	// until it is under them.
	s.set(1, 3)
	if r := s.acquire("b"); r != ConcurrencyLimited {
		t.Errorf("b at the lowered cap: %v", r)
	}
}

// TestSlotsConcurrent checks the counts against a locked model, with many
// goroutines acquiring and releasing over few clients under -race.
func TestSlotsConcurrent(t *testing.T) {
	const max = 3
	s := newSlots(max, 1000)
	var mu sync.Mutex
	held := map[string]int{}
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 2000 {
				k := fmt.Sprint(i % 5)
				if s.acquire(k) != Allowed {
					continue
				}
				mu.Lock()
				held[k]++
				if held[k] > max {
					t.Errorf("worker %d: %s holds %d, more than %d", w, k, held[k], max)
				}
				held[k]--
				mu.Unlock()
				s.release(k)
			}
		})
	}
	wg.Wait()
	if s.len() != 0 {
		t.Errorf("%d clients left holding requests", s.len())
	}
}

// values is Fields over a map.
type values map[string][]string

func (v values) Field(name string) string {
	if vs := v[name]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}
func (v values) FieldValues(name string) []string { return v[name] }

func key(id *identity, peer string, fwd []string) string {
	var f Fields
	if fwd != nil {
		f = values{id.header: fwd}
	}
	return string(id.appendKey(nil, peer, netip.Addr{}, f))
}

func TestIdentity(t *testing.T) {
	id := identity{proxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, v4: 24, v6: 48, header: "X-Forwarded-For"}
	for _, tt := range []struct {
		peer string
		fwd  []string
		want string
	}{
		{"192.0.2.7:1", nil, "a:192.0.2.0/24"},
		{"192.0.2.7:1", []string{"203.0.113.1"}, "a:192.0.2.0/24"}, // not a trusted proxy
		{"10.1.1.1:1", []string{"198.51.100.9, 203.0.113.1, 10.2.2.2"}, "a:203.0.113.0/24"},
		{"10.1.1.1:1", []string{"198.51.100.9", "203.0.113.1, 10.2.2.2"}, "a:203.0.113.0/24"}, // two lines
		{"10.1.1.1:1", []string{"garbage, 10.2.2.2"}, "a:10.2.2.0/24"},                        // the nearest trusted hop answers
		{"[2001:db8:1:2::9]:1", nil, "a:2001:db8:1::/48"},
		{"garbage", nil, "a:invalid"},
	} {
		if got := key(&id, tt.peer, tt.fwd); got != tt.want {
			t.Errorf("key(%q, %q) = %q, want %q", tt.peer, tt.fwd, got, tt.want)
		}
	}
	fwd := identity{proxies: id.proxies, v4: 32, v6: 64, header: "Forwarded", rfc7239: true}
	if got := key(&fwd, "10.0.0.1:1", []string{`for="[2001:db8:cafe::17]:4711";proto=http`}); got != "a:2001:db8:cafe::/64" {
		t.Errorf("Forwarded: %q", got)
	}
	if p, ok := parsePrefix("192.0.2.1"); !ok || p.String() != "192.0.2.1/32" {
		t.Errorf("parsePrefix of an address: %v, %v", p, ok)
	}
	if _, ok := parsePrefix("nope"); ok {
		t.Error("parsePrefix accepted nonsense")
	}
	// A peer given parsed reads as the same given as text.
	for _, peer := range []string{"192.0.2.7", "10.1.1.1", "2001:db8:1:2::9", "::ffff:192.0.2.7", "fe80::1%eth0"} {
		f := values{"X-Forwarded-For": {"198.51.100.9, 203.0.113.1, 10.2.2.2"}}
		text := string(id.appendKey(nil, peer, netip.Addr{}, f))
		parsed := string(id.appendKey(nil, "", netip.MustParseAddr(peer), f))
		if text != parsed {
			t.Errorf("peer %s: %q as text, %q parsed", peer, text, parsed)
		}
	}
}

// TestKeyIPv4Text checks that the key of a peer given as text is the key
// of its address parsed by parseHost, where appendKey parses dotted IPv4
// itself and copies its text rather than format it: whatever it accepts,
// it reads as net/netip does, and the text it copies is the address's own.
func TestKeyIPv4Text(t *testing.T) {
	fwd := values{"X-Forwarded-For": {"203.0.113.9"}}
	for _, id := range []identity{
		{v4: 32, v6: 64, header: "X-Forwarded-For"},
		{proxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, v4: 32, v6: 64, header: "X-Forwarded-For"},
		{v4: 24, v6: 64, header: "X-Forwarded-For"},
	} {
		for _, peer := range []string{
			"192.0.2.7:1", "192.0.2.7", "0.0.0.0:0", "255.255.255.255:65535", "192.0.2.7:080",
			"[::ffff:192.0.2.7]:1", "::ffff:192.0.2.7", "10.1.1.1:1", "10.1.1.1",
			"01.2.3.4:1", "1.2.3.4:", "1.2.3.4:99999", "1.2.3.4:x", "1.2.3:4", "1.2.3.4.5:6", "[1.2.3.4]:5", ":1", "",
			"1.2.3.4:65535", "1.2.3.4:65536", "1.2.3.4:000080", "1.2.3.4:00080", "1.2.3.256:1", "1.2.3.4:-1", "1.2.3.4:+1",
			"1.2.3.4:1:2", "1.2.3.4 ", "1.2.3.4x", "1.2.3.1000", "1..3.4", ".1.2.3", "1.2.3.4.", "0.0.0.00", "192.0.2.7:1%eth0",
		} {
			got := string(id.appendKey(nil, peer, netip.Addr{}, fwd))
			want := "a:invalid"
			if a := parseHost(peer); a.IsValid() {
				want = string(id.appendKey(nil, "", a, fwd))
			}
			if got != want {
				t.Errorf("%v: key(%q) = %q, want %q", id.proxies, peer, got, want)
			}
		}
	}
	// Texts of digits, dots and colons, at random.
	rng := rand.New(rand.NewPCG(1, 2))
	id := identity{v4: 32, v6: 64}
	for range 20000 {
		b := make([]byte, rng.IntN(22))
		for i := range b {
			b[i] = "0123456789..::"[rng.IntN(14)]
		}
		peer := string(b)
		got := string(id.appendKey(nil, peer, netip.Addr{}, nil))
		want := "a:invalid"
		if a := parseHost(peer); a.IsValid() {
			want = string(id.appendKey(nil, "", a, nil))
		}
		if got != want {
			t.Fatalf("key(%q) = %q, want %q", peer, got, want)
		}
	}
}

func TestRouteMatch(t *testing.T) {
	var rt router
	for _, p := range []string{"/login", "POST /login", "/api/", "/api/items/{id}", "/api/items/{id}/parts", "/files/{path...}", "/users/{id}/login", "/"} {
		if _, err := rt.add(p); err != nil {
			t.Fatalf("add(%q): %v", p, err)
		}
	}
	for _, tt := range []struct{ method, path, want string }{
		{"GET", "/login", "/login"},
		{"POST", "/login", "POST /login"},
		{"GET", "/login/", "/"},
		{"GET", "/api", "/"},
		{"GET", "/api/", "/api/"},
		{"GET", "/api/x", "/api/"},
		{"GET", "/api/items/7", "/api/items/{id}"},
		{"GET", "/api/items/7/", "/api/"},
		{"GET", "/api/items/7/parts", "/api/items/{id}/parts"},
		{"GET", "/api/items//parts", "/api/"},
		{"GET", "/files/", "/files/{path...}"},
		{"GET", "/files/a/b/c", "/files/{path...}"},
		{"GET", "/files", "/"},
		{"GET", "/users/ann/login", "/users/{id}/login"},
		{"GET", "/users/ann/logout", "/"},
		{"GET", "/other", "/"},
		{"GET", "/", "/"},
		{"GET", "", ""},
		{"GET", "no-slash", ""},
	} {
		got := ""
		var buf [maxMatch]*route
		if rs := rt.match(tt.method, tt.path, &buf); len(rs) > 0 {
			got = rs[len(rs)-1].pattern
		}
		if got != tt.want {
			t.Errorf("match(%s %q) = %q, want %q", tt.method, tt.path, got, tt.want)
		}
	}
	// Every route that matches, from the least specific to the most.
	for _, tt := range []struct{ method, path, want string }{
		{"GET", "/api/items/7/parts", "/ /api/ /api/items/{id}/parts"},
		{"POST", "/login", "/ /login POST /login"},
		{"GET", "/api/items/7", "/ /api/ /api/items/{id}"},
	} {
		var buf [maxMatch]*route
		var got []string
		for _, r := range rt.match(tt.method, tt.path, &buf) {
			got = append(got, r.pattern)
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("match(%s %q) = %q, want %q", tt.method, tt.path, got, tt.want)
		}
	}
	// Without "/", paths below no pattern match nothing.
	var small router
	small.add("/api/")
	small.add("/pkg.Svc/Method")
	for _, tt := range []struct{ path, want string }{{"/apix", ""}, {"/pkg.Svc/Method", "/pkg.Svc/Method"}, {"/pkg.Svc/Other", ""}} {
		got := ""
		var buf [maxMatch]*route
		if rs := small.match("", tt.path, &buf); len(rs) > 0 {
			got = rs[len(rs)-1].pattern
		}
		if got != tt.want {
			t.Errorf("match(%q) = %q, want %q", tt.path, got, tt.want)
		}
	}
	for _, bad := range []string{"", "login", "/a b", "/a//b", "/a/{}", "/a/{x...}/b", "/a/x{y}", " /x", "/{a}{b}", "/a/b\x00", "/a\tb", "GET\x7f /a", "get /a", "Post /a"} {
		if _, err := rt.add(bad); err == nil {
			t.Errorf("add(%q) accepted", bad)
		}
	}
	// A pattern given twice is one route.
	a, _ := rt.add("/api/")
	b, _ := rt.add("/api/")
	if a != b || len(rt.all) != 8 {
		t.Errorf("the same pattern twice: %p %p, %d routes", a, b, len(rt.all))
	}
}

// TestCapacityAdaptiveWaits checks that a request finding an adaptive
// gate full waits the controller's wait for a place, rather than being
// refused at once; that one with a QueueWait waits that; and that
// Adaptive.Wait < 0 refuses at once.
func TestCapacityAdaptiveWaits(t *testing.T) {
	for _, c := range []struct {
		name  string
		wait  time.Duration // QueueWait
		aWait time.Duration // Adaptive.Wait
		in    bool          // the second request gets in
	}{
		{"controller's wait", 0, 0, true},
		{"QueueWait", 20 * time.Millisecond, 0, true},
		{"QueueWait too short", 2 * time.Millisecond, 0, false},
		{"no wait", 0, -1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				capa, err := newCapacity(&Config{MaxInFlight: 4, QueueWait: c.wait, Adaptive: &adaptive.Config{Initial: 1, ProbeEvery: -1, Wait: c.aWait}}, nil)
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				// One request of 10ms: the controller's wait is then
				// twice 10ms over a limit of 1, at most 10ms.
				var first held
				if !capa.enter(ctx, &first, limits.PriorityDefault) {
					t.Fatal("first request refused")
				}
				time.Sleep(10 * time.Millisecond)
				first.leave(adaptive.Success)
				if got, want := capa.ctrl.Wait(), map[bool]time.Duration{true: 0, false: 10 * time.Millisecond}[c.aWait < 0]; got != want {
					t.Fatalf("controller's wait %v, want %v", got, want)
				}
				// A request holds the only place for 5ms; one more comes.
				var a, b held
				if !capa.enter(ctx, &a, limits.PriorityDefault) {
					t.Fatal("request refused with the gate empty")
				}
				left := make(chan struct{})
				go func() {
					time.Sleep(5 * time.Millisecond)
					a.leave(adaptive.Success)
					close(left)
				}()
				start := time.Now()
				in := capa.enter(ctx, &b, limits.PriorityDefault)
				waited := time.Since(start)
				<-left
				if in {
					b.leave(adaptive.Success)
				}
				if in != c.in {
					t.Errorf("second request let in: %v after %v, want %v", in, waited, c.in)
				}
				if !c.in && c.wait == 0 && waited != 0 {
					t.Errorf("refused after %v, want at once", waited)
				}
			})
		})
	}
}

// TestWindow checks the quota and window the rate limit fields announce:
// never a rate above the limit's, never a window shorter than the time the
// burst takes to come back, and the limit and period themselves when the
// burst is the limit and the period whole seconds.
func TestWindow(t *testing.T) {
	for _, c := range []struct {
		limit  int
		period time.Duration
		burst  int
		q, w   int64
	}{
		{100, time.Minute, 100, 100, 60},
		{100, time.Minute, 0, 100, 60},
		{1, time.Second, 5, 5, 5},
		{10, 100 * time.Millisecond, 10, 100, 1},
		{7, 1500 * time.Millisecond, 7, 9, 2},
		{3, 23 * time.Hour, 3, 3, 82800},
		{60, time.Minute, 10, 10, 10},
		{1, time.Duration(math.MaxInt64), 1, 1, math.MaxInt64/int64(time.Second) + 1},
	} {
		if q, w := window(c.limit, c.period, c.burst); q != c.q || w != c.w {
			t.Errorf("window(%d, %v, %d) = q=%d;w=%d, want q=%d;w=%d", c.limit, c.period, c.burst, q, w, c.q, c.w)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10_000 {
		limit, burst := 1+r.IntN(1000), 1+r.IntN(1000)
		period := time.Duration(1 + r.Int64N(int64(48*time.Hour)))
		q, w := window(limit, period, burst)
		// q/w <= limit/period, and w*1s >= burst*period/limit.
		rate := float64(limit) / period.Seconds()
		if float64(q) > rate*float64(w)*(1+1e-9) || float64(w) < float64(burst)/rate*(1-1e-9) || q < int64(burst) || w < 1 {
			t.Fatalf("window(%d, %v, %d) = q=%d;w=%d", limit, period, burst, q, w)
		}
	}
}
