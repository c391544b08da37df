package redislimit

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/internal/gcra"
	"github.com/limitsgo/limits/redislimit/redistest"
	"github.com/redis/go-redis/v9"
)

// keyModel is what a key's decisions must be, by the arithmetic of
// limits.GCRA, at the time of each decision, the server's (its At): the
// key's TAT, exact, as the script keeps it.
type keyModel struct {
	t   *testing.T
	tat gcra.Time
}

// check checks d, the decision on a request of cost n, 0 <= n <= burst,
// against p at d.At, and charges the model as d was charged.
func (m *keyModel) check(what string, p *gcra.Policy, n int, d limits.Decision) {
	m.t.Helper()
	now := gcra.Time{NS: d.At.UnixNano()}
	allowed, after := p.Judge(p.Sub(m.tat, now), n, true)
	r := p.Report(allowed, after, n)
	want := limits.Decision{
		Allowed: allowed, Limit: p.Limit, Period: p.Period, Burst: p.Burst, Cost: n,
		Remaining: r.Remaining, RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter, At: d.At,
	}
	if !allowed {
		want.Reason = limits.ReasonRateLimited
	}
	if d != want {
		m.t.Errorf("%s: %+v,\nwant %+v", what, d, want)
	}
	if allowed && n > 0 {
		m.tat = p.Add(now, after)
	}
}

// TestSetLimit is limits' TestGCRASetLimit against Redis: at 100 a second
// in bursts of 100, a key spends its burst and owes a second; under 10 a
// second in bursts of 5 it is refused until it owes 400ms, with a
// RetryAfter of exactly its TAT + 100ms - 500ms from the decision's time,
// the server's; a new key gets the new burst, no more; a looser limit
// afterwards gives only the room it adds; a refund across the change gives
// back what the decision charged. Every decision is checked, field by
// field, against the arithmetic of limits.GCRA at the decision's At: the
// TATs are whole nanoseconds and the server's times whole microseconds,
// so nothing is left to tolerance.
func TestSetLimit(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	ctx := context.Background()
	fallback := limits.NewGCRA(100, time.Second)
	g := must(New(c, 100, time.Second, WithPrefix(freshPrefix()), WithFallback(fallback)))
	take := func(key string, n int) limits.Decision {
		t.Helper()
		d, err := g.AllowN(ctx, key, n)
		if err != nil {
			t.Fatalf("AllowN(%s, %d): %v", key, n, err)
		}
		return d
	}
	p0 := must2(gcra.New(100, time.Second, 100)) // T 10ms, D 1s
	k, j, fresh := &keyModel{t: t}, &keyModel{t: t}, &keyModel{t: t}
	k.check("k spends its burst", &p0, 100, take("k", 100))
	j.check("j spends half its burst", &p0, 50, take("j", 50))
	early := take("j", 50) // to refund after the change
	j.check("j spends the other half", &p0, 50, early)

	if err := g.SetLimit(10, time.Second, 5); err != nil { // T 100ms, D 500ms
		t.Fatal(err)
	}
	if g.Limit() != 10 || g.Period() != time.Second || g.Burst() != 5 || g.EmissionInterval() != 100*time.Millisecond {
		t.Errorf("limit %d/%v burst %d, T %v", g.Limit(), g.Period(), g.Burst(), g.EmissionInterval())
	}
	if fallback.Limit() != 10 || fallback.Burst() != 5 {
		t.Errorf("the fallback's limit %d burst %d, want the same change", fallback.Limit(), fallback.Burst())
	}
	p1 := must2(gcra.New(10, time.Second, 5))
	p1.Lead = p0.D // keys charged at 100 a second may owe up to a second

	// j's refund of its charge of 50 at 10ms gives back 500ms, all of it
	// while the charge is still ahead, though the charge is above the new
	// burst and 50 requests cost 5s now.
	if err := g.Refund(ctx, "j", early); err != nil {
		t.Fatal(err)
	}
	clock := c.Time(ctx).Val() // after the refund
	cur := parseTAT(t, c.Get(ctx, g.Key("j")).Val())
	if want := p1.Sub(j.tat, gcra.Time{NS: 500 * int64(time.Millisecond)}); clock.UnixNano() < want.NS {
		if cur != want {
			t.Errorf("j after the refund across the change: TAT %+v, want %+v, 500ms less than %+v", cur, want, j.tat)
		}
	} else {
		t.Logf("the refund came %v after j's charge: the part of it given back is not checked", clock.Sub(early.At))
	}
	j.tat = cur

	// k owes 1s, twice the new burst: it waits until it owes 400ms.
	d := take("k", 1)
	k.check("k after a stricter limit", &p1, 1, d)
	if want := time.Duration(k.tat.NS + int64(100*time.Millisecond) - int64(500*time.Millisecond) - d.At.UnixNano()); d.Allowed || d.RetryAfter != want {
		t.Fatalf("k after a stricter limit: %+v, want refused for %v", d, want)
	}
	// A look, a cost of 0 and one above the new burst leave the TAT kept.
	k.check("a look at k", &p1, 0, take("k", 0))
	if d := take("k", 6); d.Reason != limits.ReasonCostAboveBurst || d.ResetAfter != time.Duration(k.tat.NS-d.At.UnixNano()) {
		t.Errorf("k, a cost above the new burst: %+v", d)
	}
	time.Sleep(d.RetryAfter)
	k.check("k once it owes the new burst less one", &p1, 1, take("k", 1))

	// A new key gets the new burst, no more.
	fresh.check("a new key's burst", &p1, 5, take("new", 5))
	fresh.check("a new key, beyond its burst", &p1, 1, take("new", 1))

	// A looser limit gives only the room it adds: k owes about 500ms; at
	// 100 a second in bursts of 100 (D 1s) that leaves about 50 requests,
	// not 100.
	if err := g.SetLimit(100, time.Second, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		k.check(fmt.Sprintf("k after a looser limit, %d", i), &p0, 25, take("k", 25))
	}
	k.check("k after a looser limit, a full burst", &p0, 100, take("k", 100))
	for _, bad := range [][3]int{{0, 1, 1}, {1, 0, 1}, {1, 1, -1}} {
		if err := g.SetLimit(bad[0], time.Duration(bad[1])*time.Second, bad[2]); err == nil {
			t.Errorf("SetLimit(%v) accepted", bad)
		}
	}
	if g.Limit() != 100 || g.Burst() != 100 || fallback.Limit() != 100 {
		t.Errorf("a refused SetLimit changed the limit to %d burst %d (fallback %d)", g.Limit(), g.Burst(), fallback.Limit())
	}
}

// must2 returns v, panicking on err.
func must2[V any](v V, err error) V {
	if err != nil {
		panic(err)
	}
	return v
}

// slotted is an allowed decision as the race test records it: the end of
// its part of the key's timeline, At + ResetAfter, which is the key's TAT
// just after a charge made by Redis and the time of the last slot spent
// for one made from a lease (exact here, T being whole nanoseconds); its
// weight, its cost times the emission interval of the limit it was made
// under, whose D is d; and when it was decided, on the test's clock.
type slotted struct {
	end, w, d     int64
	before, after int64
	refunded      bool
}

// TestSetLimitRace has goroutines decide and refund requests of costs 1
// to 3 for one hot key, in lease mode, while another changes the limit
// again and again, stricter and looser, under -race. Every admission
// takes a part of the key's timeline, (end - cost*T, end], at the T of
// the limit it was made under, and no two admissions may share one: not
// across a change, when slots of the old limit in hand go back to Redis
// and those leased in flight are given back, nor when keys charged under
// a larger burst are kept rather than taken at the new one. Over any
// window of the test's clock the admissions also weigh at most the
// window, widened by the longest decision, plus the largest D among them
// and one admission's weight: the limit in force, across changes. The
// lease counters add up.
func TestSetLimitRace(t *testing.T) {
	const (
		goroutines = 6
		run        = 2 * time.Second
	)
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	g := must(New(c, 1000, time.Second, WithBurst(100), WithPrefix(freshPrefix()), WithTimeout(5*time.Second), WithLeases(16, 0)))
	base := time.Now()
	clock := func() int64 { return int64(time.Since(base)) }
	choices := [][2]int{{1000, 100}, {250, 10}, {2000, 200}, {500, 5}, {1000, 20}, {4000, 50}} // T whole
	var mu sync.Mutex
	var admitted []slotted
	var wg sync.WaitGroup
	stop := make(chan struct{})
	changes := 0
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(7, 7))
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(2+rng.IntN(14)) * time.Millisecond):
			}
			l := choices[rng.IntN(len(choices))]
			if err := g.SetLimit(l[0], time.Second, l[1]); err != nil {
				t.Error(err)
				return
			}
			changes++
		}
	})
	for w := range goroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			var mine []slotted
			for {
				select {
				case <-stop:
					mu.Lock()
					admitted = append(admitted, mine...)
					mu.Unlock()
					return
				default:
				}
				n := 1 + rng.IntN(3)
				before := clock()
				d, err := g.AllowN(context.Background(), "hot", n)
				after := clock()
				if err != nil {
					t.Error(err)
					return
				}
				if d.Remaining > d.Burst || d.Allowed != (d.Reason == limits.Reason(0)) || d.Allowed && d.RetryAfter != 0 {
					t.Errorf("%+v", d)
				}
				if !d.Allowed {
					time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
					continue
				}
				tT := int64(d.Period) / int64(d.Limit)
				s := slotted{end: d.At.UnixNano() + int64(d.ResetAfter), w: int64(n) * tT, d: int64(d.Burst) * tT, before: before, after: after}
				if rng.IntN(8) == 0 {
					if err := g.Refund(context.Background(), "hot", d); err != nil {
						t.Error(err)
					}
					s.refunded = true // given back, or not: left out of the checks
				}
				mine = append(mine, s)
			}
		})
	}
	time.Sleep(run)
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}
	ls := g.LeaseStats()
	if ls.Slots != ls.Spent+ls.Expired+ls.Returned+ls.Held {
		t.Errorf("lease counters %+v do not add up", ls)
	}
	var kept []slotted
	for _, s := range admitted {
		if !s.refunded {
			kept = append(kept, s)
		}
	}
	t.Logf("%d changes of limit; %d admitted, %d refunded; %+v; %d calls", changes, len(admitted), len(admitted)-len(kept), ls, g.Stats().Answered)
	if changes < 10 || ls.Returned == 0 || ls.Local == 0 {
		t.Fatalf("%d changes, lease counters %+v: the test did not change limits with slots in hand", changes, ls)
	}
	// No two admissions share a part of the timeline.
	slices.SortFunc(kept, func(a, b slotted) int { return cmp.Compare(a.end, b.end) })
	for i := 1; i < len(kept); i++ {
		if a, b := kept[i-1], kept[i]; b.end-b.w < a.end {
			t.Fatalf("admissions share the key's timeline: (%d, %d] and (%d, %d], of weights %v and %v",
				a.end-a.w, a.end, b.end-b.w, b.end, time.Duration(a.w), time.Duration(b.w))
		}
	}
	// The weight of any window, on the test's clock.
	slices.SortFunc(kept, func(a, b slotted) int { return cmp.Compare(a.after, b.after) })
	var longest int64
	for _, s := range kept {
		longest = max(longest, s.after-s.before)
	}
	for _, win := range []int64{int64(5 * time.Millisecond), int64(50 * time.Millisecond), int64(500 * time.Millisecond)} {
		lo := 0
		var sum, maxD, maxW int64
		for hi, s := range kept {
			sum += s.w
			for kept[lo].after < s.after-win {
				sum -= kept[lo].w
				lo++
			}
			maxD, maxW = 0, 0
			for _, k := range kept[lo : hi+1] {
				maxD, maxW = max(maxD, k.d), max(maxW, k.w)
			}
			if bound := win + longest + maxD + maxW; sum > bound {
				t.Fatalf("admissions in a window of %v weigh %v, bound %v", time.Duration(win), time.Duration(sum), time.Duration(bound))
			}
		}
	}
}

// holdHook holds the first EVALSHA a client sends once armed, before it
// is sent, until release is closed; reached is closed when it holds it.
type holdHook struct {
	armed            atomic.Bool
	reached, release chan struct{}
}

func (h *holdHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" && h.armed.CompareAndSwap(true, false) {
			close(h.reached)
			<-h.release
		}
		return next(ctx, cmd)
	}
}

func (h *holdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestSetLimitInFlight checks that a call made with the arguments of the
// limit before a change to a larger burst never runs after a call of the
// new limit: the old call would take the TAT the new one wrote, further
// ahead than the old burst, as a foreign write, and lower it to the old
// burst, handing out what the new call charged. A request's call at 100
// a second in bursts of 5 is held before it is sent; SetLimit to bursts
// of 100 waits for it, and the new limit's charge of 50 comes after it,
// so that the key owes both.
func TestSetLimitInFlight(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	hold := &holdHook{reached: make(chan struct{}), release: make(chan struct{})}
	c.AddHook(hold)
	g := must(New(c, 100, time.Second, WithBurst(5), WithPrefix(freshPrefix()), WithTimeout(10*time.Second)))
	ctx := context.Background()
	hold.armed.Store(true)
	old := make(chan limits.Decision, 1)
	go func() {
		d, err := g.Allow(ctx, "k")
		if err != nil {
			t.Error(err)
		}
		old <- d
	}()
	<-hold.reached
	set := make(chan struct{})
	go func() {
		if err := g.SetLimit(100, time.Second, 100); err != nil {
			t.Error(err)
		}
		close(set)
	}()
	// Wait until SetLimit has changed the limit, or waits to.
	waiting := false
	for !waiting {
		select {
		case <-set:
		default:
			if g.callMu.TryRLock() {
				g.callMu.RUnlock()
				runtime.Gosched()
				continue
			}
			waiting = true
		}
		break
	}
	next := make(chan limits.Decision, 1)
	go func() {
		d, err := g.AllowN(ctx, "k", 50)
		if err != nil {
			t.Error(err)
		}
		next <- d
	}()
	var b limits.Decision
	if !waiting {
		b = <-next // the new limit's charge, before the old call is sent
	}
	close(hold.release)
	a := <-old
	<-set
	if waiting {
		b = <-next
	}
	if !a.Allowed || !b.Allowed || a.Burst != 5 || b.Burst != 100 {
		t.Fatalf("the old limit's decision %+v, the new one's %+v", a, b)
	}
	// The old call came first: the new charge of 50*10ms ends 500ms after
	// the old one's, and the key holds it.
	aEnd, bEnd := a.At.Add(a.ResetAfter), b.At.Add(b.ResetAfter)
	checkStored(t, c, g.Key("k"), gcra.Time{NS: bEnd.UnixNano()})
	if bEnd.Sub(aEnd) != 500*time.Millisecond {
		t.Errorf("the old limit's charge ends at %v, the new one's at %v: not one after the other", aEnd, bEnd)
	}
}

// TestSetLimitLeaseRefund checks SetLimit in lease mode against a real
// redis-server: the slots in hand, leased at the old limit, go back to
// Redis at the change, which leaves the key's TAT at the last slot spent;
// decisions made from them before the change and refunded after are given
// back in Redis, at the old emission interval, when nothing was charged
// for the key since (last in, first out), and stay charged otherwise; a
// decision Redis made before the change is given back so too, at the old
// emission interval.
func TestSetLimitLeaseRefund(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr(), true)
	g := leaser(t, srv.Addr(), freshPrefix()) // 100 a second: T 10ms
	ctx := context.Background()
	stored := func(key string) string {
		t.Helper()
		v, err := c.Get(ctx, g.Key(key)).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		return v
	}
	end := func(d limits.Decision) gcra.Time { return gcra.Time{NS: d.At.Add(d.ResetAfter).UnixNano()} }
	// Requests above a lease's slots: decided by Redis.
	var cold [2]limits.Decision
	var err error
	for i, n := range []int{50, 40} {
		if cold[i], err = g.AllowN(ctx, "cold", n); err != nil || !cold[i].Allowed || g.LeaseStats().Local != 0 {
			t.Fatalf("%+v, %v, %+v", cold[i], err, g.LeaseStats())
		}
	}
	heat(t, g, "k")
	if held := g.LeaseStats().Held; held < 4 {
		t.Fatalf("%d slots in hand, want at least 4", held)
	}
	local := g.LeaseStats().Local
	var ds [3]limits.Decision
	for i := range ds {
		if ds[i], err = g.Allow(ctx, "k"); err != nil || !ds[i].Allowed {
			t.Fatalf("%+v, %v", ds[i], err)
		}
	}
	if n := g.LeaseStats().Local - local; n != 3 {
		t.Fatalf("%d of 3 decisions made from the slots in hand", n)
	}
	for i := 1; i < len(ds); i++ {
		if d := end(ds[i]).NS - end(ds[i-1]).NS; d != int64(10*time.Millisecond) {
			t.Fatalf("decisions %d and %d took slots %v apart, not one after the other", i-1, i, time.Duration(d))
		}
	}
	before := g.LeaseStats()
	if err := g.SetLimit(25, time.Second, 10); err != nil { // T 40ms, D 400ms
		t.Fatal(err)
	}
	after := g.LeaseStats()
	if after.Held != 0 || after.Returned-before.Returned != before.Held {
		t.Errorf("lease counters before the change %+v, after %+v: want the %d slots in hand returned", before, after, before.Held)
	}
	if got, want := stored("k"), formatTAT(end(ds[2])); got != want {
		t.Fatalf("after the change the key holds %s, want %s, the last slot spent", got, want)
	}
	steps := []struct {
		d    limits.Decision
		want gcra.Time
	}{
		{ds[0], end(ds[2])}, // charged since: kept
		{ds[2], gcra.Time{NS: end(ds[2]).NS - int64(10*time.Millisecond)}}, // the last: given back, at 10ms
		{ds[1], gcra.Time{NS: end(ds[1]).NS - int64(10*time.Millisecond)}}, // then the one before
	}
	for i, s := range steps {
		if err := g.Refund(ctx, "k", s.d); err != nil {
			t.Fatal(err)
		}
		if got, want := stored("k"), formatTAT(s.want); got != want {
			t.Errorf("refund %d across the change: the key holds %s, want %s", i, got, want)
		}
	}
	// Redis's decision of cost 40 at 10ms is given back whole, 400ms, not
	// 40 at the new 40ms.
	if err := g.Refund(ctx, "cold", cold[1]); err != nil {
		t.Fatal(err)
	}
	if got, want := stored("cold"), formatTAT(end(cold[0])); got != want {
		t.Errorf("the cold key holds %s after the refund, want %s", got, want)
	}
}
