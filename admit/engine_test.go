package admit_test

import (
	"context"
	"encoding/json"
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
)

func mustNew(t *testing.T, cfg admit.Config) *admit.Engine {
	t.Helper()
	e, err := admit.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

var ctx = context.Background()

// outcome admits r and returns how it went: "ok", or the refusal's reason
// and policy ("rate_limited/default"). An admitted request is done at
// once.
func outcome(t *testing.T, e *admit.Engine, r admit.Request) string {
	t.Helper()
	var tk admit.Ticket
	err := e.Admit(ctx, &r, &tk)
	if err == nil {
		tk.Done(adaptive.Success)
		return "ok"
	}
	var ref *admit.Refusal
	if !errors.As(err, &ref) {
		t.Fatalf("Admit: %v, want a *Refusal", err)
	}
	return ref.Reason.String() + "/" + ref.Policy
}

// fieldsOf returns the rate limit fields of a ticket or a refusal, by name.
func fieldsOf(f interface {
	Fields([]byte, func(string, string))
}) map[string]string {
	m := map[string]string{}
	f.Fields(nil, func(name, v string) { m[name] = v })
	return m
}

// TestAdmitAllOrNothing checks that a request refused by the caller key's
// bucket gives back what the address bucket charged, that a request
// without a key takes the keyless bucket, and that a key gets a bucket
// only for requests its address allowed.
func TestAdmitAllOrNothing(t *testing.T) {
	e := mustNew(t, admit.Config{Rate: limits.Limit{Events: 1, Period: time.Hour}, CallerKey: "key", AddressMultiplier: 3})
	a := "192.0.2.1:1000"
	steps := []struct {
		key, want string
	}{
		{"k1", "ok"},                   // address 2 left, k1 none
		{"k1", "rate_limited/default"}, // the address's charge is given back
		{"k2", "ok"},                   // address 1 left
		{"k3", "ok"},                   // address none: the refusal above cost nothing
		{"k4", "rate_limited/address"}, // refused before k4 gets a bucket
		{"", "rate_limited/address"},   // keyless, refused by the address too
		{"k5", "rate_limited/address"}, // still
	}
	for i, s := range steps {
		if got := outcome(t, e, admit.Request{Peer: a, Key: s.key}); got != s.want {
			t.Fatalf("step %d (key %q): %s, want %s", i, s.key, got, s.want)
		}
	}
	// From another address, k4 has its whole bucket: the refusal above did
	// not charge it.
	if got := outcome(t, e, admit.Request{Peer: "192.0.2.2:1", Key: "k4"}); got != "ok" {
		t.Errorf("k4 from another address: %s", got)
	}
	// Without a key: one bucket at Rate per address.
	b := "198.51.100.1:1"
	if got := outcome(t, e, admit.Request{Peer: b}); got != "ok" {
		t.Errorf("keyless: %s", got)
	}
	if got := outcome(t, e, admit.Request{Peer: b}); got != "rate_limited/keyless" {
		t.Errorf("keyless again: %s", got)
	}
	s := e.Stats()
	if s.Requests[admit.Allowed] != 5 || s.Requests[limits.ReasonRateLimited] != 5 {
		t.Errorf("Stats: %d allowed, %d rate limited; want 5 and 5", s.Requests[admit.Allowed], s.Requests[limits.ReasonRateLimited])
	}
	var names []string
	for _, p := range s.Policies {
		names = append(names, fmt.Sprintf("%s:%d/%d", p.Name, p.Requests[admit.Allowed], p.Requests[limits.ReasonRateLimited]))
	}
	// The address bucket counts the requests it allowed and charged, even
	// those refused later (and given back).
	if got := strings.Join(names, " "); got != "address:7/3 default:4/1 keyless:1/1" {
		t.Errorf("policies %s", got)
	}
}

// broken is a limiter that fails.
type broken struct{}

func (broken) Take(context.Context, string, int) (limits.Decision, error) {
	return limits.Decision{}, errors.New("down")
}
func (broken) Refund(context.Context, string, limits.Decision) error { return nil }

func TestAdmitFailurePolicy(t *testing.T) {
	for _, open := range []bool{false, true} {
		e := mustNew(t, admit.Config{Limiters: map[string]limits.Limiter{"remote": broken{}}, Limiter: "remote",
			Rate: limits.Limit{Events: 2, Period: time.Hour}, FailOpen: open})
		var tk admit.Ticket
		err := e.Admit(ctx, &admit.Request{Peer: "192.0.2.1:1"}, &tk)
		var ref *admit.Refusal
		switch {
		case open && err != nil:
			t.Errorf("fail open: %v", err)
		case !open && (!errors.As(err, &ref) || ref.Reason != admit.LimiterError || ref.Err == nil || ref.Class() != admit.Failed || ref.RetryAfter != time.Second):
			t.Errorf("fail closed: %v", err)
		}
		tk.Done(adaptive.Success)
		// Failing open, the local limiter in front keeps counting: the
		// third request is refused by it.
		outcome(t, e, admit.Request{Peer: "192.0.2.1:1"})
		got := outcome(t, e, admit.Request{Peer: "192.0.2.1:1"})
		if want := map[bool]string{true: "rate_limited/default", false: "limiter_error/default"}[open]; got != want {
			t.Errorf("fail open %v, third request: %s, want %s", open, got, want)
		}
		if n := e.Stats().Requests[admit.LimiterError]; n != map[bool]uint64{true: 2, false: 3}[open] {
			t.Errorf("fail open %v: %d limiter errors counted", open, n)
		}
	}
}

func TestAdmitRoutes(t *testing.T) {
	e := mustNew(t, admit.Config{
		Rate: limits.Limit{Events: 10, Period: time.Hour},
		Policies: []admit.Policy{
			{Name: "login", Routes: []string{"POST /login"}, Rate: limits.Limit{Events: 1, Period: time.Hour}},
			{Name: "export", Routes: []string{"/export/"}, Rate: limits.Limit{Events: 10, Period: time.Hour}, Cost: 4},
			{Name: "all", Rate: limits.Limit{Events: 100, Period: time.Hour}},
		},
		Exempt: []string{"/healthz"},
	})
	a := "192.0.2.1:1"
	for i, s := range []struct{ method, route, want string }{
		{"POST", "/login", "ok"},
		{"POST", "/login", "rate_limited/login"},
		{"GET", "/login", "ok"}, // another method: not the route
		{"GET", "/export/a", "ok"},
		{"GET", "/export/b", "ok"},
		{"GET", "/export/c", "rate_limited/export"}, // 4 each, 10 in all
		{"GET", "/healthz", "ok"},
	} {
		if got := outcome(t, e, admit.Request{Peer: a, Method: s.method, Route: s.route}); got != s.want {
			t.Fatalf("step %d (%s %s): %s, want %s", i, s.method, s.route, got, s.want)
		}
	}
	// 4 requests charged the default bucket: the two refused gave back
	// theirs, the exempt one took none.
	var tk admit.Ticket
	if err := e.Admit(ctx, &admit.Request{Peer: a, Route: "/"}, &tk); err != nil {
		t.Fatal(err)
	}
	if f := fieldsOf(&tk); f["Ratelimit"] != `"default";r=5;t=1800, "all";r=95;t=180` {
		t.Errorf("fields %q", f)
	}
	if f := fieldsOf(&tk); f["Ratelimit-Policy"] != `"default";q=10;w=3600, "all";q=100;w=3600` {
		t.Errorf("fields %q", f)
	}
	tk.Done(adaptive.Success)
	var routes []string
	for _, r := range e.Stats().Routes {
		routes = append(routes, fmt.Sprintf("%s:%d/%d/%d", r.Route, r.Requests[admit.Allowed], r.Requests[limits.ReasonRateLimited], r.Requests[admit.Exempt]))
	}
	if got := strings.Join(routes, " "); got != "POST /login:1/1/0 /export/:2/1/0 /healthz:0/0/1 other:2/0/0" {
		t.Errorf("routes %s", got)
	}
}

func TestAdmitGate(t *testing.T) {
	e := mustNew(t, admit.Config{MaxInFlight: 1, BusyRetryAfter: 1500 * time.Millisecond})
	var a, b admit.Ticket
	if err := e.Admit(ctx, &admit.Request{}, &a); err != nil {
		t.Fatal(err)
	}
	err := e.Admit(ctx, &admit.Request{}, &b)
	var ref *admit.Refusal
	if !errors.As(err, &ref) || ref.Reason != admit.ServerBusy || ref.Class() != admit.Busy || ref.RetryAfter != 1500*time.Millisecond {
		t.Fatalf("second request: %v", err)
	}
	if g := e.Gate(); g == nil || g.InFlight() != 1 {
		t.Fatalf("gate %v", g)
	}
	a.Leave(adaptive.Success)
	a.Leave(adaptive.Success)
	if e.Gate().InFlight() != 0 {
		t.Errorf("Leave did not give the place back")
	}
	if err := e.Admit(ctx, &admit.Request{}, &b); err != nil {
		t.Errorf("after Leave: %v", err)
	}
	a.Done(adaptive.Success) // the place is given back once only
	if e.Gate().InFlight() != 1 {
		t.Errorf("Done after Leave gave back another place: %d in flight", e.Gate().InFlight())
	}
	b.Done(adaptive.Success)
	b.Done(adaptive.Success)
	if e.Gate().InFlight() != 0 {
		t.Errorf("%d in flight after Done", e.Gate().InFlight())
	}
}

// TestAdmitGateShared checks that two engines given one gate share its
// places and its classes' reserves.
func TestAdmitGateShared(t *testing.T) {
	g, err := limits.NewGate(3, limits.WithReserve(limits.PriorityCritical, 1))
	if err != nil {
		t.Fatal(err)
	}
	e1 := mustNew(t, admit.Config{Gate: g})
	e2 := mustNew(t, admit.Config{Gate: g})
	var t1, t2, t3, t4 admit.Ticket
	if e1.Admit(ctx, &admit.Request{}, &t1) != nil || e2.Admit(ctx, &admit.Request{}, &t2) != nil {
		t.Fatal("refused with room")
	}
	if err := e1.Admit(ctx, &admit.Request{}, &t3); err == nil {
		t.Error("a default request took the place kept for critical ones")
	}
	if err := e2.Admit(ctx, &admit.Request{Priority: limits.PriorityCritical}, &t4); err != nil {
		t.Errorf("a critical request: %v", err)
	}
	if s := e1.Stats(); !s.SharedGate || s.Gate.InFlight != 3 {
		t.Errorf("stats of a shared gate: %+v", s.Gate)
	}
	for _, tk := range []*admit.Ticket{&t1, &t2, &t4} {
		tk.Done(adaptive.Success)
	}
	if g.InFlight() != 0 {
		t.Errorf("%d in flight", g.InFlight())
	}
	if _, err := admit.New(admit.Config{Gate: g, MaxInFlight: 4}); err == nil || !strings.Contains(err.Error(), "MaxInFlight") {
		t.Errorf("a shared gate and MaxInFlight: %v", err)
	}
}

// TestAdmitConcurrency checks that a request refused for its client's
// concurrency gives back its rate charge, and that a stream counts in its
// own table.
func TestAdmitConcurrency(t *testing.T) {
	e := mustNew(t, admit.Config{Rate: limits.Limit{Events: 3, Period: time.Hour}, MaxInFlightPerClient: 1, MaxStreamsPerClient: 1})
	a := admit.Request{Peer: "192.0.2.1:1"}
	var held, stream admit.Ticket
	if err := e.Admit(ctx, &a, &held); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		var tk admit.Ticket
		err := e.Admit(ctx, &a, &tk)
		var ref *admit.Refusal
		if !errors.As(err, &ref) || ref.Reason != admit.ConcurrencyLimited || ref.Class() != admit.Limited {
			t.Fatalf("while one is in progress: %v", err)
		}
	}
	s := a
	s.Stream = true
	if err := e.Admit(ctx, &s, &stream); err != nil {
		t.Fatalf("a stream beside a request: %v", err)
	}
	held.Done(adaptive.Success)
	// The five refusals cost nothing: one request of the three is left.
	if got := outcome(t, e, a); got != "ok" {
		t.Errorf("after: %s", got)
	}
	if got := outcome(t, e, a); got != "rate_limited/default" {
		t.Errorf("the fourth: %s", got)
	}
	stream.Done(adaptive.Success)
}

// TestAdmitDeadline checks that a request whose deadline passes while a
// limiter decides it is refused, with its charges given back.
func TestAdmitDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var slow sleepy
		e := mustNew(t, admit.Config{Timeout: 50 * time.Millisecond, LimiterTimeout: time.Second, FailOpen: true,
			Rate: limits.Limit{Events: 1, Period: time.Hour}, Limiters: map[string]limits.Limiter{"slow": &slow}, Limiter: "slow"})
		slow.delay.Store(int64(100 * time.Millisecond))
		var tk admit.Ticket
		err := e.Admit(ctx, &admit.Request{Peer: "192.0.2.1:1"}, &tk)
		var ref *admit.Refusal
		if !errors.As(err, &ref) || ref.Reason != admit.RequestTimeout {
			t.Fatalf("past the deadline: %v", err)
		}
		// The local limiter's charge was given back.
		slow.delay.Store(0)
		if err := e.Admit(ctx, &admit.Request{Peer: "192.0.2.1:1"}, &tk); err != nil {
			t.Fatalf("in time: %v", err)
		}
		if d, ok := tk.Deadline(); !ok || d != time.Now().Add(50*time.Millisecond) {
			t.Errorf("deadline %v, %v", d, ok)
		}
		tk.Done(adaptive.Success)
		time.Sleep(time.Second)
		synctest.Wait()
	})
}

// sleepy allows every request, after a delay.
type sleepy struct{ delay atomic.Int64 }

func (s *sleepy) Take(_ context.Context, _ string, n int) (limits.Decision, error) {
	time.Sleep(time.Duration(s.delay.Load()))
	return limits.Decision{Allowed: true, Cost: n, Limit: 1, Period: time.Hour, Burst: 1, At: time.Now()}, nil
}
func (s *sleepy) Refund(context.Context, string, limits.Decision) error { return nil }

func TestAdmitExempt(t *testing.T) {
	e := mustNew(t, admit.Config{MaxInFlight: 1, Rate: limits.Limit{Events: 1, Period: time.Hour}, Exempt: []string{"/healthz", "/static/"}})
	var busy admit.Ticket
	if err := e.Admit(ctx, &admit.Request{Peer: "192.0.2.1:1"}, &busy); err != nil {
		t.Fatal(err)
	}
	for _, r := range []admit.Request{{Route: "/healthz"}, {Route: "/static/app.js"}, {Route: "/x", Exempt: true}} {
		var tk admit.Ticket
		if err := e.Admit(ctx, &r, &tk); err != nil || !tk.Exempt() {
			t.Errorf("%+v: %v, exempt %v", r, err, tk.Exempt())
		}
		tk.Done(adaptive.Success)
	}
	busy.Done(adaptive.Success)
	if n := e.Stats().Requests[admit.Exempt]; n != 3 {
		t.Errorf("%d exempt", n)
	}
}

// TestCharge checks that a stream's message is charged to the rate
// policies alone, with nothing held, and that a refusal gives back every
// charge.
func TestCharge(t *testing.T) {
	e := mustNew(t, admit.Config{Rate: limits.Limit{Events: 3, Period: time.Hour}, MaxInFlight: 1, MaxInFlightPerClient: 1,
		Policies: []admit.Policy{{Name: "svc", Routes: []string{"/svc/"}, Rate: limits.Limit{Events: 2, Period: time.Hour}}}})
	r := admit.Request{Peer: "192.0.2.1:1", Route: "/svc/Chat"}
	var stream admit.Ticket
	if err := e.Admit(ctx, &r, &stream); err != nil {
		t.Fatal(err)
	}
	if err := e.Charge(ctx, &r); err != nil {
		t.Fatalf("the first message: %v", err)
	}
	err := e.Charge(ctx, &r)
	var ref *admit.Refusal
	if !errors.As(err, &ref) || ref.Policy != "svc" {
		t.Fatalf("the second message: %v", err)
	}
	stream.Done(adaptive.Success)
	// The default bucket: 2 charged, the refused message's given back.
	if got := outcome(t, e, admit.Request{Peer: "192.0.2.1:1"}); got != "ok" {
		t.Errorf("a request after: %s", got)
	}
	if got := outcome(t, e, admit.Request{Peer: "192.0.2.1:1"}); got != "rate_limited/default" {
		t.Errorf("and another: %s", got)
	}
}

func TestConfigErrors(t *testing.T) {
	l := limits.Limit{Events: 1, Period: time.Second}
	for _, tt := range []struct {
		cfg  admit.Config
		want string
	}{
		{admit.Config{MaxInFlight: -1}, "MaxInFlight must not be negative"},
		{admit.Config{QueueWait: -1}, "QueueWait"},
		{admit.Config{Rate: limits.Limit{Events: 0, Period: time.Second}}, "Rate"},
		{admit.Config{CallerKey: "k"}, "CallerKey needs Rate or CallerLimiter"},
		{admit.Config{Limiter: "nope"}, `no limiter named "nope"`},
		{admit.Config{Adaptive: &adaptive.Config{}}, "Adaptive needs MaxInFlight"},
		{admit.Config{Reserve: map[limits.Priority]int{limits.PriorityCritical: 1}}, "Reserve needs MaxInFlight"},
		{admit.Config{MaxInFlight: 2, Reserve: map[limits.Priority]int{limits.PriorityCritical: 2}}, "Reserve"},
		{admit.Config{MaxInFlight: 2, Reserve: map[limits.Priority]int{limits.PrioritySheddable: 1}}, "Reserve"},
		{admit.Config{IPv4Prefix: 33}, "IPv4Prefix"},
		{admit.Config{ForwardedHeader: "Via"}, "ForwardedHeader"},
		{admit.Config{Headers: "all"}, "Headers"},
		{admit.Config{PolicyName: "é"}, "PolicyName"},
		{admit.Config{Policies: []admit.Policy{{Rate: l}}}, "Policies[0]"},
		{admit.Config{Policies: []admit.Policy{{Name: "x"}}}, `Policies[0] ("x"): needs Rate, Quota or Limiter`},
		{admit.Config{Rate: l, Policies: []admit.Policy{{Name: "default", Rate: l}}}, "already"},
		{admit.Config{Policies: []admit.Policy{{Name: "k", Key: "X-Key", Rate: l}}}, "address bucket"},
		{admit.Config{Policies: []admit.Policy{{Name: "r", Routes: []string{"login"}, Rate: l}}}, `Policies[0] ("r").Routes`},
		{admit.Config{Exempt: []string{"/a/{}"}}, "Exempt[0]"},
		{admit.Config{Policies: []admit.Policy{{Name: "c", Cost: -1, Rate: l}}}, "Cost"},
	} {
		_, err := admit.New(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want an error with %q", tt.cfg, err, tt.want)
		}
	}
}

func TestLoadEnv(t *testing.T) {
	vars := map[string]string{
		"APP_EXEMPT": "/healthz, /static/", "APP_MAX_INFLIGHT": "60", "APP_RESERVE_CRITICAL": "12", "APP_RESERVE_DEFAULT": "0",
		"APP_QUEUE_WAIT": "0", "APP_TIMEOUT": "2s", "APP_RATE": "5/s", "APP_BURST": "3",
		"APP_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.1", "APP_FORWARDED_HEADER": "forwarded", "APP_POLICY_NAME": " api ",
		"APP_CALLER_KEY": "X-API-Key", "APP_ON_LIMITER_ERROR": "FAIL_OPEN", "APP_HEADERS": "legacy",
		"APP_MAX_STREAMS_PER_CLIENT": "4", "APP_ADAPTIVE": "vegas", "APP_ADAPTIVE_MIN": "3",
		"APP_LOGIN_PAGE_RATE": "2/min",
	}
	cfg := admit.Config{QueueWait: time.Second, MaxKeys: 7, Policies: []admit.Policy{{Name: "login-page", Rate: limits.Limit{Events: 9, Period: time.Second}}}}
	if err := cfg.LoadEnv("APP_", func(k string) (string, bool) { v, ok := vars[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Exempt) != 2 || cfg.MaxInFlight != 60 || cfg.Reserve[limits.PriorityCritical] != 12 || len(cfg.Reserve) != 2 ||
		cfg.QueueWait != 0 || cfg.Timeout != 2*time.Second || cfg.Rate != (limits.Limit{Events: 5, Period: time.Second}) ||
		cfg.Burst != 3 || cfg.MaxKeys != 7 || len(cfg.TrustedProxies) != 2 || cfg.ForwardedHeader != "Forwarded" ||
		cfg.PolicyName != "api" || cfg.CallerKey != "X-API-Key" || !cfg.FailOpen || cfg.Headers != "legacy" ||
		cfg.MaxStreamsPerClient != 4 || cfg.Adaptive == nil || cfg.Adaptive.Min != 3 ||
		cfg.Policies[0].Rate != (limits.Limit{Events: 2, Period: time.Minute}) {
		t.Errorf("read: %+v", cfg)
	}
	// The gate read from the environment keeps its places: 48 for all, 12
	// more for critical requests.
	e := mustNew(t, admit.Config{MaxInFlight: cfg.MaxInFlight, Reserve: cfg.Reserve})
	n := 0
	for {
		var tk admit.Ticket
		if e.Admit(ctx, &admit.Request{Priority: limits.PrioritySheddable}, &tk) != nil {
			break
		}
		n++
	}
	if n != 48 {
		t.Errorf("sheddable requests admitted: %d, want 48", n)
	}
	for _, tt := range []struct{ name, v string }{
		{"LIMITS_BURST", "0"}, {"LIMITS_TIMEOUT", "0"}, {"LIMITS_QUEUE_WAIT", "-1s"}, {"LIMITS_RATE", "5"},
		{"LIMITS_TRUSTED_PROXIES", "10.0.0.0/8,x"}, {"LIMITS_FORWARDED_HEADER", "via"}, {"LIMITS_RESERVE_CRITICAL", "-1"},
		{"LIMITS_ADAPTIVE_MIN", "2"}, {"LIMITS_HEADERS", "all"}, {"LIMITS_CALLER_KEY", ""},
	} {
		var c admit.Config
		err := c.LoadEnv("", func(k string) (string, bool) { return tt.v, k == tt.name })
		if err == nil || !strings.Contains(err.Error(), tt.name) {
			t.Errorf("%s=%q: %v, want an error naming the variable", tt.name, tt.v, err)
		}
	}
}

// TestAdmitConcurrent admits and finishes requests from many goroutines
// under -race, through a gate, rate policies and per-client counts, and
// checks that every place is given back.
func TestAdmitConcurrent(t *testing.T) {
	e := mustNew(t, admit.Config{MaxInFlight: 8, QueueWait: time.Millisecond, Rate: limits.Limit{Events: 1000, Period: time.Second},
		CallerKey: "key", MaxInFlightPerClient: 2,
		Policies: []admit.Policy{{Name: "p", Routes: []string{"/p/"}, Rate: limits.Limit{Events: 50, Period: time.Second}}}})
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 300 {
				r := admit.Request{Peer: fmt.Sprintf("192.0.2.%d:1", w%4), Key: fmt.Sprint(i % 3), Route: []string{"/", "/p/x"}[i%2]}
				var tk admit.Ticket
				if e.Admit(ctx, &r, &tk) == nil {
					if i%7 == 0 {
						tk.Leave(adaptive.Success)
					}
					tk.Done(adaptive.Success)
				}
			}
		})
	}
	wg.Wait()
	s := e.Stats()
	if s.Gate.InFlight != 0 {
		t.Errorf("%d in flight", s.Gate.InFlight)
	}
	var total uint64
	for _, n := range s.Requests {
		total += n
	}
	if total != 16*300 {
		t.Errorf("%d outcomes counted, want %d", total, 16*300)
	}
}

func TestUnmarshalJSON(t *testing.T) {
	var cfg admit.Config
	err := json.Unmarshal([]byte(`{
		"exempt": ["/healthz"],
		"max_in_flight": 60, "reserve": {"critical": 12}, "queue_wait": "5ms", "timeout": 2000000000,
		"adaptive": {"law": "aimd", "min": 4},
		"rate": "100/min", "caller_key": "X-API-Key", "tier": "X-Plan",
		"trusted_proxies": ["10.0.0.0/8", "192.0.2.1"], "fail_open": true, "headers": "ietf_legacy",
		"policies": [
			{"name": "login", "routes": ["POST /login"], "rate": "5/min"},
			{"name": "api", "key": "X-API-Key", "rate": "60/min", "tiers": {"pro": {"rate": "600/min", "burst": 100}}}
		],
		"shadow": ["login"]
	}`), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxInFlight != 60 || cfg.Reserve[limits.PriorityCritical] != 12 || cfg.QueueWait != 5*time.Millisecond || cfg.Timeout != 2*time.Second ||
		cfg.Adaptive == nil || cfg.Adaptive.Min != 4 || cfg.Adaptive.ProbeEvery >= 0 || cfg.Rate != (limits.Limit{Events: 100, Period: time.Minute}) ||
		len(cfg.TrustedProxies) != 2 || cfg.TrustedProxies[1].Bits() != 32 || !cfg.FailOpen || cfg.Headers != "ietf_legacy" ||
		len(cfg.Policies) != 2 || cfg.Policies[1].Tiers["pro"].Burst != 100 || cfg.Shadow[0] != "login" || cfg.Tier != "X-Plan" {
		t.Errorf("read: %+v", cfg)
	}
	if _, err := admit.New(cfg); err != nil {
		t.Errorf("New of the configuration read: %v", err)
	}
	for _, tt := range []struct{ in, want string }{
		{`{"max_inflight": 5}`, "max_inflight: no such field"},
		{`{"rate": "100 per minute"}`, "rate: limits: invalid limit"},
		{`{"queue_wait": "soon"}`, `queue_wait: want a duration`},
		{`{"policies": [{"name": "x", "rte": "1/s"}]}`, "policies[0].rte: no such field"},
		{`{"policies": [{"name": "x", "tiers": {"pro": {"rate": 5}}}]}`, `policies[0].tiers["pro"].rate: want a string`},
		{`{"trusted_proxies": ["nope"]}`, `trusted_proxies[0]: "nope" is neither`},
		{`{"reserve": {"urgent": 1}}`, `reserve: limits: no class is named "urgent"`},
		{`{"adaptive": {"law": "magic"}}`, "adaptive.law: want gradient"},
		{`{"adaptive": {"mn": 1}}`, "adaptive.mn: no such field"},
		{`{"limiters": {}}`, "limiters: no such field"},
		{`{"max_in_flight": "many"}`, "max_in_flight: want a int"},
		{`[1]`, "want an object"},
	} {
		var c admit.Config
		err := json.Unmarshal([]byte(tt.in), &c)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error with %q", tt.in, err, tt.want)
		}
	}
}

// TestTrustedKeys checks policies keyed by fields a trusted party writes:
// no address bucket needed, and a request without a policy's field skips
// it.
func TestTrustedKeys(t *testing.T) {
	e := mustNew(t, admit.Config{TrustedKeys: true, Policies: []admit.Policy{
		{Name: "user", Key: "user", Rate: limits.Limit{Events: 1, Period: time.Hour}},
		{Name: "ip", Key: "ip", Rate: limits.Limit{Events: 2, Period: time.Hour}},
	}})
	req := func(user, ip string) admit.Request {
		f := values{}
		if user != "" {
			f["user"] = []string{user}
		}
		if ip != "" {
			f["ip"] = []string{ip}
		}
		return admit.Request{Fields: f}
	}
	for i, s := range []struct{ user, ip, want string }{
		{"ann", "", "ok"},
		{"ann", "", "rate_limited/user"},
		{"", "10.0.0.1", "ok"},
		{"bob", "10.0.0.1", "ok"},
		{"cid", "10.0.0.1", "rate_limited/ip"},
		{"", "", "ok"}, // no field: no policy
	} {
		if got := outcome(t, e, req(s.user, s.ip)); got != s.want {
			t.Errorf("step %d: %s, want %s", i, got, s.want)
		}
	}
	if _, err := admit.New(admit.Config{Policies: []admit.Policy{{Name: "k", Key: "k", Rate: limits.Limit{Events: 1, Period: time.Hour}}}}); err == nil {
		t.Error("a keyed policy without an address bucket or TrustedKeys accepted")
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
