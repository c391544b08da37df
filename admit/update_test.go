package admit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/quota"
)

// retryOf returns how long r, refused as rate_limited, must wait, or a
// negative duration for an admitted request.
func retryOf(t *testing.T, e *admit.Engine, r admit.Request) time.Duration {
	t.Helper()
	var tk admit.Ticket
	err := e.Admit(ctx, &r, &tk)
	if err == nil {
		tk.Done(adaptive.Success)
		return -1
	}
	var ref *admit.Refusal
	if !errors.As(err, &ref) || ref.Reason != limits.ReasonRateLimited {
		t.Fatalf("%v", err)
	}
	return ref.RetryAfter
}

// TestUpdateKeepsState checks the rule an update keeps: a key keeps its
// TAT, so no change hands out a fresh burst and under a stricter limit a
// key waits longer; counters keep counting.
func TestUpdateKeepsState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := admit.Config{Rate: limits.Limit{Events: 10, Period: time.Hour}}
		e := mustNew(t, cfg)
		a := admit.Request{Peer: "192.0.2.1:1"}
		for range 10 {
			if retryOf(t, e, a) >= 0 {
				t.Fatal("refused within the burst")
			}
		}
		// 20 an hour: the key owes an hour, all of the new burst; the next
		// request waits one new interval, 3 minutes: no fresh burst.
		cfg.Rate.Events = 20
		if err := e.Update(cfg); err != nil {
			t.Fatal(err)
		}
		if got := retryOf(t, e, a); got != 3*time.Minute {
			t.Errorf("after a looser limit: retry after %v, want 3m", got)
		}
		// 5 an hour: the key owes an hour, the whole new burst; one new
		// interval, 12 minutes.
		cfg.Rate.Events = 5
		if err := e.Update(cfg); err != nil {
			t.Fatal(err)
		}
		if got := retryOf(t, e, a); got != 12*time.Minute {
			t.Errorf("after a stricter limit: retry after %v, want 12m", got)
		}
		// A new client gets the new burst.
		n := 0
		for retryOf(t, e, admit.Request{Peer: "192.0.2.2:1"}) < 0 {
			n++
		}
		if n != 5 {
			t.Errorf("a new client: %d allowed, want 5", n)
		}
		s := e.Stats()
		if s.Requests[admit.Allowed] != 15 || s.Requests[limits.ReasonRateLimited] != 3 || s.Policies[0].Requests[admit.Allowed] != 15 {
			t.Errorf("counts across updates: %v, policy %v", s.Requests, s.Policies[0].Requests)
		}
	})
}

// TestUpdateParts changes every part of a configuration in turn while it
// serves: policies added and removed, routes, exemptions, shadow mode,
// tiers, the gate's size and reserves.
func TestUpdateParts(t *testing.T) {
	hour := func(n int) limits.Limit { return limits.Limit{Events: n, Period: time.Hour} }
	cfg := admit.Config{MaxInFlight: 2, Rate: hour(100)}
	e := mustNew(t, cfg)
	a := admit.Request{Peer: "192.0.2.1:1", Route: "/login"}

	// A login policy, tried in shadow mode first: it refuses nothing, but
	// counts what it would refuse, and shows in no field.
	cfg.Policies = []admit.Policy{{Name: "login", Routes: []string{"/login"}, Rate: hour(1)}}
	cfg.Shadow = []string{"login"}
	if err := e.Update(cfg); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		var tk admit.Ticket
		if err := e.Admit(ctx, &a, &tk); err != nil {
			t.Fatalf("a policy in shadow mode refused: %v", err)
		}
		if f := fieldsOf(&tk); strings.Contains(f["Ratelimit-Policy"], "login") {
			t.Errorf("a policy in shadow mode in the fields: %q", f)
		}
		tk.Done(adaptive.Success)
	}
	s := e.Stats()
	if s.Shadow[limits.ReasonRateLimited] != 2 || s.Policies[1].Shadow[limits.ReasonRateLimited] != 2 {
		t.Errorf("shadow counts: %v, policy %+v", s.Shadow, s.Policies[1])
	}
	// Enforced: the key's state was kept in shadow mode (its one request).
	cfg.Shadow = nil
	if err := e.Update(cfg); err != nil {
		t.Fatal(err)
	}
	if got := outcome(t, e, a); got != "rate_limited/login" {
		t.Errorf("enforced: %s", got)
	}
	// Removed, and the route exempt.
	cfg.Policies, cfg.Exempt = nil, []string{"/login"}
	if err := e.Update(cfg); err != nil {
		t.Fatal(err)
	}
	var tk admit.Ticket
	if err := e.Admit(ctx, &a, &tk); err != nil || !tk.Exempt() {
		t.Errorf("exempt after the update: %v", err)
	}
	// The gate: 2 places, one held; resized to 1, then with a reserve.
	var held admit.Ticket
	if err := e.Admit(ctx, &admit.Request{Peer: "192.0.2.9:1"}, &held); err != nil {
		t.Fatal(err)
	}
	gate := e.Gate()
	cfg.MaxInFlight = 1
	if err := e.Update(cfg); err != nil {
		t.Fatal(err)
	}
	if e.Gate() != gate {
		t.Error("the update made a new gate")
	}
	if got := outcome(t, e, admit.Request{Peer: "192.0.2.8:1"}); got != "server_busy/" {
		t.Errorf("a gate of 1 with 1 inside: %s", got)
	}
	held.Done(adaptive.Success)
	cfg.MaxInFlight, cfg.Reserve = 3, map[limits.Priority]int{limits.PriorityCritical: 2}
	if err := e.Update(cfg); err != nil {
		t.Fatal(err)
	}
	if g := e.Stats().Gate; g.Max != 3 || g.Classes[1].Limit != 1 {
		t.Errorf("gate after a resize with a reserve: %+v", g)
	}
	// What cannot change, or is wrong, changes nothing.
	for _, bad := range []admit.Config{
		{MaxInFlight: 3, Rate: hour(100), MaxKeys: 10},
		{MaxInFlight: 3, Rate: hour(100), Adaptive: &adaptive.Config{}},
		{MaxInFlight: 3, Rate: hour(100), Shadow: []string{"nope"}},
		{MaxInFlight: 3, Rate: hour(100), Policies: []admit.Policy{{Name: "x"}}},
	} {
		if err := e.Update(bad); err == nil {
			t.Errorf("Update(%+v) accepted", bad)
		}
	}
	if g := e.Stats().Gate; g.Max != 3 {
		t.Errorf("a refused update changed the gate: %+v", g)
	}
}

// TestUpdateTiers checks tiers and overrides: each tier's limit in a
// table of its own, named in the fields as policy/tier, and a key's
// override before its tier.
func TestUpdateTiers(t *testing.T) {
	min := func(n int) limits.Limit { return limits.Limit{Events: n, Period: time.Minute} }
	e := mustNew(t, admit.Config{
		Rate:      min(1000),
		CallerKey: "key",
		Tier:      "plan",
		Policies: []admit.Policy{{
			Name: "api", Key: "key", Rate: min(2),
			Tiers:     map[string]admit.Policy{"free": {Rate: min(3)}, "pro": {Rate: min(6)}},
			Overrides: map[string]admit.Policy{"vip": {Rate: min(10)}},
		}},
	})
	for _, c := range []struct {
		key, tier, name string
		n               int
	}{
		{"k1", "free", "api/free", 3},
		{"k2", "pro", "api/pro", 6},
		{"k3", "", "api", 2},
		{"k4", "gold", "api", 2}, // a tier of no limit of its own
		{"vip", "free", "api", 10},
	} {
		n := 0
		for {
			var tk admit.Ticket
			err := e.Admit(ctx, &admit.Request{Peer: "192.0.2.1:1", Key: c.key, Tier: c.tier}, &tk)
			if err != nil {
				var ref *admit.Refusal
				if !errors.As(err, &ref) || ref.Policy != c.name {
					t.Errorf("%s (%s): refused by %v, want %s", c.key, c.tier, err, c.name)
				}
				break
			}
			if f := fieldsOf(&tk); !strings.Contains(f["Ratelimit-Policy"], `"`+c.name+`";q=`) {
				t.Errorf("%s: fields %q", c.key, f)
			}
			n++
		}
		if n != c.n {
			t.Errorf("%s (%s): %d allowed, want %d", c.key, c.tier, n, c.n)
		}
	}
	var names []string
	for _, p := range e.Stats().Policies {
		names = append(names, fmt.Sprintf("%s:%s:%d", p.Name, p.Tier, p.Requests[admit.Allowed]))
	}
	if got := strings.Join(names, " "); got != "address::28 default::28 keyless::0 api::14 api/free:free:3 api/pro:pro:6" {
		t.Errorf("policies: %s", got)
	}
}

// TestUpdateNeverMixes changes two policies' limits again and again while
// many goroutines are admitted, under -race: every admitted request's
// fields carry the limits of one configuration, never one of each.
func TestUpdateNeverMixes(t *testing.T) {
	cfgOf := func(n int) admit.Config {
		return admit.Config{Policies: []admit.Policy{
			{Name: "a", Rate: limits.Limit{Events: n, Period: time.Hour}},
			{Name: "b", Rate: limits.Limit{Events: 2 * n, Period: time.Hour}},
		}, Rate: limits.Limit{Events: 1 << 30, Period: time.Hour}}
	}
	e := mustNew(t, cfgOf(1000))
	var stop atomic.Bool
	var wg, workers sync.WaitGroup
	var updates atomic.Int64
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			if err := e.Update(cfgOf(1000 + i%2*1000)); err != nil {
				t.Error(err)
				return
			}
			updates.Add(1)
		}
	})
	var checked atomic.Int64
	for w := range 8 {
		workers.Go(func() {
			for i := range 3000 {
				var tk admit.Ticket
				if err := e.Admit(ctx, &admit.Request{Peer: fmt.Sprintf("10.0.%d.%d:1", w, i%250)}, &tk); err != nil {
					continue
				}
				f := fieldsOf(&tk)["Ratelimit-Policy"]
				tk.Done(adaptive.Success)
				ok := strings.Contains(f, `"a";q=1000;`) && strings.Contains(f, `"b";q=2000;`) ||
					strings.Contains(f, `"a";q=2000;`) && strings.Contains(f, `"b";q=4000;`)
				if !ok {
					t.Errorf("a request of two configurations: %q", f)
					return
				}
				checked.Add(1)
			}
		})
	}
	workers.Wait()
	stop.Store(true)
	wg.Wait()
	t.Logf("%d requests checked across %d updates", checked.Load(), updates.Load())
}

// TestQuotaPolicy checks a daily quota as a policy: 3 calls a day per API
// key on a route, refused until midnight in the policy's time zone, the
// refusal charging nothing in the other policies.
func TestQuotaPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := mustNew(t, admit.Config{Rate: limits.Limit{Events: 100, Period: time.Minute}, CallerKey: "key",
			Policies: []admit.Policy{{Name: "daily", Routes: []string{"/report"}, Key: "key", Quota: "3/day", Location: "Asia/Tokyo"}}})
		tokyo, _ := time.LoadLocation("Asia/Tokyo")
		time.Sleep(time.Until(time.Date(2026, 12, 7, 23, 0, 0, 0, tokyo)))
		r := admit.Request{Peer: "192.0.2.1:1", Key: "k", Route: "/report"}
		for range 3 {
			if got := outcome(t, e, r); got != "ok" {
				t.Fatal(got)
			}
		}
		if got := retryOf(t, e, r); got != time.Hour {
			t.Errorf("over the daily quota: retry after %v, want an hour, until midnight in Tokyo", got)
		}
		var tk admit.Ticket
		e.Admit(ctx, &admit.Request{Peer: "192.0.2.1:1"}, &tk)
		if f := fieldsOf(&tk)["Ratelimit"]; !strings.HasPrefix(f, `"address";r=396;`) {
			t.Errorf("the refusal charged the address bucket: %q", f)
		}
		time.Sleep(time.Hour)
		if got := outcome(t, e, r); got != "ok" {
			t.Errorf("the next day: %s", got)
		}
		for _, bad := range []admit.Policy{
			{Name: "q", Quota: "3/fortnight"}, {Name: "q", Quota: "0/day"}, {Name: "q", Quota: "3/day", Location: "Mars/Base"},
			{Name: "q", Quota: "3/day", Rate: limits.Limit{Events: 1, Period: time.Second}}, {Name: "q", Rate: limits.Limit{Events: 1, Period: time.Second}, Location: "UTC"},
		} {
			if _, err := admit.New(admit.Config{Policies: []admit.Policy{bad}}); err == nil {
				t.Errorf("%+v accepted", bad)
			}
		}
	})
}

// TestUpdateAdaptiveReserve changes the reserves of an adaptive gate while
// it serves: they change, scaled to the limit the controller set, which
// stays.
func TestUpdateAdaptiveReserve(t *testing.T) {
	cfg := admit.Config{MaxInFlight: 10, Adaptive: &adaptive.Config{}}
	e := mustNew(t, cfg)
	e.Gate().SetMax(6) // as the controller would
	cfg.Reserve = map[limits.Priority]int{limits.PriorityCritical: 3}
	if err := e.Update(cfg); err != nil {
		t.Fatal(err)
	}
	// 3 of 10 reserved, scaled to 6: 2 kept for critical requests.
	if g := e.Stats().Gate; g.Max != 6 || g.Classes[1].Limit != 4 || g.Classes[2].Limit != 6 {
		t.Errorf("gate after a change of reserves: %+v", g)
	}
}

// fleetQuota stands for a quota shared by a fleet, such as
// redislimit.Quota: a limiter whose limit, period and time zone the
// engine reads.
type fleetQuota struct {
	*quota.Quota
	per quota.Calendar
	loc *time.Location
}

func (q *fleetQuota) Per() quota.Calendar      { return q.per }
func (q *fleetQuota) Location() *time.Location { return q.loc }

// TestQuotaPolicyLimiter checks a Quota decided by a Limiter: the
// Limiter's limit follows the policy's through an update, and a Limiter
// counting over another period or in another time zone is refused.
func TestQuotaPolicyLimiter(t *testing.T) {
	q, err := quota.New(quota.Config{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	shared := &fleetQuota{Quota: q, per: quota.Day, loc: time.UTC}
	cfg := admit.Config{Policies: []admit.Policy{{Name: "daily", Quota: "3/day", Limiter: "q"}},
		Limiters: map[string]limits.Limiter{"q": shared}}
	e := mustNew(t, cfg)
	cfg.Policies[0].Quota = "5/day"
	if err := e.Update(cfg); err != nil {
		t.Fatal(err)
	}
	if q.Limit() != 5 {
		t.Errorf("the Limiter's limit after an update to 5/day: %d", q.Limit())
	}
	for _, c := range []struct {
		per   quota.Calendar
		where string
	}{{quota.Week, ""}, {quota.Day, "Europe/Paris"}} {
		shared.per = c.per
		cfg.Policies[0].Location = c.where
		if _, err := admit.New(cfg); err == nil || !strings.Contains(err.Error(), `its Limiter "q" counts per`) {
			t.Errorf("a %v quota in %q over a Limiter per %v in UTC: %v", quota.Day, c.where, c.per, err)
		}
	}
}

// TestUpdateKeepsStateAcrossNames renames Config's own policy and adds a
// caller key to a configuration by address: the address bucket keeps its
// state through both, and hands out no fresh burst.
func TestUpdateKeepsStateAcrossNames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := admit.Config{Rate: limits.Limit{Events: 3, Period: time.Minute}}
		e := mustNew(t, cfg)
		r := admit.Request{Peer: "192.0.2.1:1"}
		for range 3 {
			if got := outcome(t, e, r); got != "ok" {
				t.Fatal(got)
			}
		}
		cfg.PolicyName = "web"
		if err := e.Update(cfg); err != nil {
			t.Fatal(err)
		}
		if got := outcome(t, e, r); got != "rate_limited/web" {
			t.Errorf("after a rename: %s, want rate_limited/web", got)
		}
		cfg.CallerKey = "key"
		if err := e.Update(cfg); err != nil {
			t.Fatal(err)
		}
		if got := outcome(t, e, r); got != "rate_limited/address" {
			t.Errorf("after a caller key was added: %s, want rate_limited/address", got)
		}
	})
}

// TestConfigDeadLimits checks that a configuration whose limit could
// never apply as written is an error: a fixed cost above the burst,
// exemptions that cover every request or every route of a policy,
// overrides by address that name no client.
func TestConfigDeadLimits(t *testing.T) {
	min := func(n int) limits.Limit { return limits.Limit{Events: n, Period: time.Minute} }
	for _, c := range []struct {
		cfg  admit.Config
		want string
	}{
		{admit.Config{Policies: []admit.Policy{{Name: "a", Rate: min(5), Cost: 10}}}, "Cost 10 is above the burst, 5"},
		{admit.Config{Policies: []admit.Policy{{Name: "a", Rate: min(50), Burst: 4, Cost: 5}}}, "Cost 5 is above the burst, 4"},
		{admit.Config{Policies: []admit.Policy{{Name: "a", Quota: "3/day", Cost: 5}}}, "Cost 5"},
		{admit.Config{Tier: "t", Rate: min(100), CallerKey: "k", Policies: []admit.Policy{{Name: "a", Key: "k", Rate: min(50), Cost: 5,
			Tiers: map[string]admit.Policy{"free": {Rate: min(2)}}}}}, `Tiers["free"]: Cost 5`},
		{admit.Config{Rate: min(5), Exempt: []string{"/"}}, "exempts every request"},
		{admit.Config{Rate: min(5), Exempt: []string{"/{p...}"}}, "exempts every request"},
		{admit.Config{Policies: []admit.Policy{{Name: "x", Rate: min(5)}}, Exempt: []string{"/"}}, "exempts every request"},
		{admit.Config{Policies: []admit.Policy{{Name: "x", Routes: []string{"/api/export", "POST /api/{id}"}, Rate: min(5)}},
			Exempt: []string{"/api/"}}, `("x"): Exempt exempts every route`},
		{admit.Config{Policies: []admit.Policy{{Name: "x", Routes: []string{"/files/{p...}"}, Rate: min(5)}},
			Exempt: []string{"/files/"}}, `("x"): Exempt exempts every route`},
		{admit.Config{Policies: []admit.Policy{{Name: "x", Routes: []string{"GET /a"}, Rate: min(5)}},
			Exempt: []string{"/a"}}, `("x"): Exempt exempts every route`},
		{admit.Config{Policies: []admit.Policy{{Name: "x", Rate: min(5), Overrides: map[string]admit.Policy{"not-an-ip": {Rate: min(9)}}}}}, "address or prefix"},
		{admit.Config{Policies: []admit.Policy{{Name: "x", Rate: min(5), Overrides: map[string]admit.Policy{"10.0.0.0/8": {Rate: min(9)}}}}}, "/32 (IPv4)"},
		{admit.Config{Policies: []admit.Policy{{Name: "x", Rate: min(5), Overrides: map[string]admit.Policy{"10.0.0.1": {Rate: min(9)},
			"10.0.0.1/32": {Rate: min(9)}}}}}, "another override"},
		{admit.Config{Rate: min(5), CallerKey: "k", Overrides: map[string]admit.Policy{"": {Rate: min(9)}}}, `Overrides[""]`},
	} {
		if _, err := admit.New(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want an error with %q", c.cfg, err, c.want)
		}
	}
	// What does apply stays valid: exemptions of some routes, a cost
	// within the burst, an override by address, in any form, applied.
	e := mustNew(t, admit.Config{Rate: min(5), Exempt: []string{"/healthz", "/api/{id}"},
		Policies: []admit.Policy{
			{Name: "x", Routes: []string{"/api/"}, Rate: min(5), Cost: 5},
			{Name: "y", Routes: []string{"/files/{p...}"}, Rate: min(2), Overrides: map[string]admit.Policy{
				"192.0.2.9": {Rate: min(100)}, "2001:db8:1:2::7": {Rate: min(100)}}},
		}})
	for _, peer := range []string{"192.0.2.9:1", "[2001:db8:1:2::8]:1"} {
		for i := range 4 {
			if got := outcome(t, e, admit.Request{Peer: peer, Route: "/files/a"}); got != "ok" {
				t.Errorf("%s, request %d, under its override: %s", peer, i+1, got)
			}
		}
	}
	if got := outcome(t, e, admit.Request{Peer: "192.0.2.1:1", Route: "/api/x/y"}); got != "ok" {
		t.Errorf("/api/x/y: %s", got)
	}
}

// TestRetryAfterEveryLayer checks that a refusal's RetryAfter is the time
// after which every layer of this process would allow the request, not
// only the one that refused: the request is refused a nanosecond before
// and admitted at it, and the layers after the refusing one are charged
// nothing by being asked.
func TestRetryAfterEveryLayer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		every := func(d time.Duration) limits.Limit { return limits.Limit{Events: 1, Period: d} }
		e := mustNew(t, admit.Config{Policies: []admit.Policy{
			{Name: "fast", Rate: every(10 * time.Second)},
			{Name: "slow", Rate: every(time.Minute)},
			{Name: "watch", Rate: every(time.Hour)},
		}, Shadow: []string{"watch"}})
		r := admit.Request{Peer: "192.0.2.1:1"}
		if got := outcome(t, e, r); got != "ok" {
			t.Fatal(got)
		}
		time.Sleep(5 * time.Second)
		if got := retryOf(t, e, r); got != 55*time.Second {
			t.Errorf("refused by fast with slow refusing too: retry after %v, want slow's 55s", got)
		}
		time.Sleep(55*time.Second - time.Nanosecond)
		if got := outcome(t, e, r); got != "rate_limited/slow" {
			t.Errorf("a nanosecond before: %s", got)
		}
		time.Sleep(time.Nanosecond)
		if got := outcome(t, e, r); got != "ok" {
			t.Errorf("at RetryAfter: %s", got)
		}
	})
}

// TestLimiterInProcessAlone checks a policy decided by a limiter of
// Limiters that decides in process, with no Rate of its own in front.
func TestLimiterInProcessAlone(t *testing.T) {
	q, err := quota.New(quota.Config{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	e := mustNew(t, admit.Config{Policies: []admit.Policy{{Name: "p", Limiter: "x"}}, Limiters: map[string]limits.Limiter{"x": q}})
	r := admit.Request{Peer: "192.0.2.1:1"}
	for i, want := range []string{"ok", "ok", "rate_limited/p"} {
		if got := outcome(t, e, r); got != want {
			t.Errorf("request %d: %s, want %s", i+1, got, want)
		}
	}
}

// failing is a limiter of this process that cannot decide: it refuses
// with limits.ReasonUnavailable and returns no error.
type failing struct{}

func (failing) AllowN(key string, n int) limits.Decision {
	return limits.Decision{Reason: limits.ReasonUnavailable, Cost: n}
}
func (f failing) Take(_ context.Context, key string, n int) (limits.Decision, error) {
	return f.AllowN(key, n), nil
}
func (failing) Refund(context.Context, string, limits.Decision) error { return nil }

// TestLimiterFailureInDecision checks that a refusal whose Decision says
// the limiter could not decide is a limiter failure: counted as
// limiter_error and subject to the failure policy, not a rate_limited.
func TestLimiterFailureInDecision(t *testing.T) {
	for _, open := range []bool{false, true} {
		e := mustNew(t, admit.Config{Policies: []admit.Policy{{Name: "p", Limiter: "x"}},
			Limiters: map[string]limits.Limiter{"x": failing{}}, FailOpen: open})
		got := outcome(t, e, admit.Request{Peer: "192.0.2.1:1"})
		want := "limiter_error/p"
		if open {
			want = "ok"
		}
		s := e.Stats()
		if got != want || s.Policies[0].Requests[admit.LimiterError] != 1 || s.Policies[0].Requests[limits.ReasonRateLimited] != 0 {
			t.Errorf("FailOpen %v: %s, policy counts %v; want %s, one limiter_error", open, got, s.Policies[0].Requests, want)
		}
	}
}

// TestShadowGate checks the gate in shadow mode: a request it would refuse
// goes on, counted as a would-be server_busy, and takes no place; enforced
// by an update, the gate refuses.
func TestShadowGate(t *testing.T) {
	cfg := admit.Config{MaxInFlight: 1, Shadow: []string{"gate"}}
	e := mustNew(t, cfg)
	var held, second admit.Ticket
	if err := e.Admit(ctx, &admit.Request{Peer: "192.0.2.1:1"}, &held); err != nil {
		t.Fatal(err)
	}
	if err := e.Admit(ctx, &admit.Request{Peer: "192.0.2.2:1"}, &second); err != nil {
		t.Fatalf("a gate in shadow mode refused: %v", err)
	}
	s := e.Stats()
	if s.Shadow[admit.ServerBusy] != 1 || s.Requests[admit.ServerBusy] != 0 || s.Gate.InFlight != 1 {
		t.Errorf("shadow %v, requests %v, in flight %d; want one would-be server_busy, one inside", s.Shadow, s.Requests, s.Gate.InFlight)
	}
	second.Done(adaptive.Success)
	if g := e.Stats().Gate; g.InFlight != 1 {
		t.Errorf("the request let through in shadow mode gave back a place: %d inside", g.InFlight)
	}
	cfg.Shadow = nil
	if err := e.Update(cfg); err != nil {
		t.Fatal(err)
	}
	if got := outcome(t, e, admit.Request{Peer: "192.0.2.3:1"}); got != "server_busy/" {
		t.Errorf("enforced: %s", got)
	}
	held.Done(adaptive.Success)
}
