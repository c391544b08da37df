package grpclimit

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
)

// counts returns the Counts of allowed and rate_limited requests given.
func counts(allowed, rateLimited uint64) admit.Counts {
	var c admit.Counts
	c[admit.Allowed], c[limits.ReasonRateLimited] = allowed, rateLimited
	return c
}

// routeStats returns the Routes of it's Stats as "route allowed/refused"
// strings, for messages and comparisons.
func routeStats(it *Interceptor) []string {
	var out []string
	for _, r := range it.Stats().Routes {
		out = append(out, fmt.Sprintf("%s %d/%d", r.Route, r.Requests[admit.Allowed], r.Requests[limits.ReasonRateLimited]))
	}
	return out
}

// policyStats returns the Policies of it's Stats by name.
func policyStats(it *Interceptor) map[string]admit.PolicyStats {
	pol := map[string]admit.PolicyStats{}
	for _, p := range it.Stats().Policies {
		pol[p.Name] = p
	}
	return pol
}

// TestMethodPolicy is the case of a login method limited to 2 an hour
// under a service limit of 10 an hour per client: the method's refusals
// give back what the service-wide layer charged, so the client's other
// methods still get the 8 calls left of its 10, and each layer and each
// route counts what it decided, once.
func TestMethodPolicy(t *testing.T) {
	hour := time.Hour
	it := mustNew(t, Config{Limits: admit.Config{
		Rate:     limits.Limit{Events: 10, Period: hour},
		Policies: []admit.Policy{{Name: "login", Routes: []string{methodSay}, Rate: limits.Limit{Events: 2, Period: hour}}},
	}})
	conn := newServer(t, it, &echo{}).dial("192.0.2.1:1")
	ok, refused := 0, 0
	for range 10 {
		_, trailer, err := say(conn, "pw")
		switch got := describe(err, trailer); {
		case err == nil:
			ok++
		case got.reason == limits.ReasonRateLimited && got.policy == "login" && got.quota:
			refused++
		default:
			t.Fatalf("login refused for %v", got)
		}
	}
	if ok != 2 || refused != 8 {
		t.Fatalf("login: %d served, %d refused; want 2 and 8", ok, refused)
	}
	// The service-wide bucket holds 8 more: the login refusals cost
	// nothing there.
	for i := range 9 {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		cs, err := openChat(ctx, conn)
		if err == nil {
			_, err = chatOnce(cs, "hi")
		}
		cancel()
		switch {
		case i < 8 && err != nil:
			t.Fatalf("chat %d after the logins: %v", i+1, err)
		case i == 8 && ReasonOf(err) != limits.ReasonRateLimited:
			t.Fatalf("chat 9, past the service limit: %v, want rate_limited", err)
		}
	}
	s := it.Stats()
	if s.Requests[admit.Allowed] != 10 || s.Requests[limits.ReasonRateLimited] != 9 {
		t.Errorf("Stats: %d allowed, %d rate limited; want 10 and 9", s.Requests[admit.Allowed], s.Requests[limits.ReasonRateLimited])
	}
	pol := policyStats(it)
	if d, l := pol["default"], pol["login"]; d.Requests != counts(18, 1) || l.Requests != counts(2, 8) {
		t.Errorf("policies: %+v", s.Policies)
	}
	want := []admit.RouteStats{{Route: methodSay, Requests: counts(2, 8)}, {Route: "other", Requests: counts(8, 1)}}
	if len(s.Routes) != len(want) || s.Routes[0] != want[0] || s.Routes[1] != want[1] {
		t.Errorf("Routes %v, want %+v", routeStats(it), want)
	}
}

// TestServicePolicy checks a service's policy and a method's in it: a
// call takes the policies of every route it matches, after Config's, the
// service's before the method's, each once; a refusal by its method's
// policy gives back the others; and the service's policy reaches every
// method of the service, those with policies of their own too.
func TestServicePolicy(t *testing.T) {
	hour := time.Hour
	it := mustNew(t, Config{Limits: admit.Config{
		Rate: limits.Limit{Events: 100, Period: hour},
		Policies: []admit.Policy{
			{Name: "echo", Routes: []string{"/test.Echo/", methodSay}, Rate: limits.Limit{Events: 3, Period: hour}},
			{Name: "say", Routes: []string{methodSay}, Rate: limits.Limit{Events: 1, Period: hour}},
			{Name: "watch", Routes: []string{methodWatch}, Rate: limits.Limit{Events: 100, Period: hour}},
		},
	}})
	conn := newServer(t, it, &echo{}).dial("192.0.2.1:1")
	mustSay(t, conn, "1")
	for range 3 {
		if _, trailer, err := say(conn, "2"); describe(err, trailer).policy != "say" {
			t.Fatalf("a second Say: %v, want a refusal by say", describe(err, trailer))
		}
	}
	// echo charged 1 of 3: two chats pass, the third is refused by echo.
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		cs, err := openChat(ctx, conn)
		if err == nil {
			_, err = chatOnce(cs, "hi")
		}
		cancel()
		if i < 2 && err != nil || i == 2 && (status.Code(err) != codes.ResourceExhausted || ReasonOf(err) != limits.ReasonRateLimited) {
			t.Fatalf("chat %d: %v", i+1, err)
		}
	}
	// Watch has a route of its own, and is of the service: echo, spent,
	// refuses it.
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	for i := range 2 {
		ws, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, methodWatch)
		if err == nil {
			ws.SendMsg(wrapperspb.String("w"))
			ws.CloseSend()
			err = ws.RecvMsg(new(wrapperspb.StringValue))
		}
		if status.Code(err) != codes.ResourceExhausted || ReasonOf(err) != limits.ReasonRateLimited {
			t.Fatalf("watch %d, with echo spent: %v, want a refusal by echo", i+1, err)
		}
	}
	pol := policyStats(it)
	if d, e, s, w := pol["default"], pol["echo"], pol["say"], pol["watch"]; d.Requests != counts(9, 0) ||
		e.Requests != counts(6, 3) || s.Requests != counts(1, 3) || w.Requests != counts(0, 0) {
		t.Errorf("policies: %+v", it.Stats().Policies)
	}
	if got, want := routeStats(it), []string{"/test.Echo/ 2/1", methodSay + " 1/3", methodWatch + " 0/2", "other 0/0"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Routes %q, want %q", got, want)
	}
}

// TestMethodConcurrent makes calls of a method limited to 50 an hour
// from 32 goroutines, under a service limit of 1,000 an hour that charges
// every call first: exactly 50 are served, and every layer and the
// route's counters agree with a locked count of the outcomes the clients
// saw.
func TestMethodConcurrent(t *testing.T) {
	const limit, service, workers, each = 50, 1000, 32, 10
	hour := time.Hour
	it := mustNew(t, Config{Limits: admit.Config{
		Rate:     limits.Limit{Events: service, Period: hour},
		Policies: []admit.Policy{{Name: "login", Routes: []string{methodSay}, Rate: limits.Limit{Events: limit, Period: hour}}},
	}})
	conn := newServer(t, it, &echo{}).dial("192.0.2.1:1")
	var mu sync.Mutex
	served, refused := 0, 0
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				_, _, err := say(conn, "x")
				mu.Lock()
				switch {
				case err == nil:
					served++
				case ReasonOf(err) == limits.ReasonRateLimited:
					refused++
				default:
					t.Error(err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if served != limit || refused != workers*each-limit {
		t.Fatalf("%d served, %d refused; want %d and %d", served, refused, limit, workers*each-limit)
	}
	s := it.Stats()
	want := []admit.RouteStats{{Route: methodSay, Requests: counts(uint64(served), uint64(refused))}, {Route: "other"}}
	if len(s.Routes) != 2 || s.Routes[0] != want[0] || s.Routes[1] != want[1] {
		t.Errorf("Routes %v, want %+v and nothing else", routeStats(it), want)
	}
	if p := s.Policies; len(p) != 2 || p[0].Requests != counts(workers*each, 0) || p[1].Requests != counts(limit, uint64(refused)) {
		t.Errorf("Policies %+v", p)
	}
}

// TestPolicyErrors checks what New refuses in Limits.Policies, naming the
// policy.
func TestPolicyErrors(t *testing.T) {
	rate := limits.Limit{Events: 1, Period: time.Second}
	login := admit.Policy{Name: "login", Routes: []string{methodSay}, Rate: rate}
	for _, tt := range []struct {
		cfg  admit.Config
		want string
	}{
		{admit.Config{Rate: rate, Policies: []admit.Policy{{Name: "x", Routes: []string{""}, Rate: rate}}}, `Policies[0] ("x").Routes[0]`},
		{admit.Config{Rate: rate, Policies: []admit.Policy{{Name: "x", Routes: []string{"/test.Echo"}, Rate: rate}}}, `Policies[0] ("x").Routes[0]`},
		{admit.Config{Rate: rate, Policies: []admit.Policy{{Name: "x", Routes: []string{methodSay, "/test.Echo/Say/More"}, Rate: rate}}}, `Policies[0] ("x").Routes[1]`},
		{admit.Config{Rate: rate, Policies: []admit.Policy{login, {Name: "x", Routes: []string{"test.Echo/Say"}, Rate: rate}}}, `Policies[1] ("x").Routes[0]`},
		{admit.Config{Rate: rate, Policies: []admit.Policy{{Name: "x", Routes: []string{"other"}, Rate: rate}}}, `Policies[0] ("x").Routes[0]`},
		{admit.Config{Rate: rate, Policies: []admit.Policy{login, {Name: "login", Routes: []string{methodChat}, Rate: rate}}}, "already is a policy of that name"},
		{admit.Config{Rate: rate, Policies: []admit.Policy{{Name: "default", Routes: []string{methodChat}, Rate: rate}}}, "already is a policy of that name"},
		{admit.Config{Rate: rate, Policies: []admit.Policy{{Routes: []string{methodChat}, Rate: rate}}}, "needs a Name"},
		{admit.Config{Rate: rate, Policies: []admit.Policy{{Name: "x", Routes: []string{methodChat}}}}, "needs Rate, Quota or Limiter"},
		{admit.Config{Rate: rate, Policies: []admit.Policy{{Name: "x", Routes: []string{methodChat}, Rate: rate, Burst: -1}}}, "must not be negative"},
		{admit.Config{Rate: rate, Policies: []admit.Policy{{Name: "x", Routes: []string{methodChat}, Limiter: "nope"}}}, `no limiter named "nope"`},
		{admit.Config{Policies: []admit.Policy{{Name: "x", Routes: []string{methodChat}, Rate: rate, Key: "k"}}}, "needs an address bucket"},
	} {
		it, err := New(Config{Limits: tt.cfg})
		if it != nil || err == nil || !strings.HasPrefix(err.Error(), "grpclimit: ") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want an error saying %s", tt.cfg.Policies, err, tt.want)
		}
	}
	// One route in two policies: both apply, in order.
	it := mustNew(t, Config{Limits: admit.Config{Rate: rate, Policies: []admit.Policy{login, {Name: "also", Routes: []string{methodSay}, Rate: rate}}}})
	if got := routeStats(it); len(got) != 2 {
		t.Errorf("Routes %q: want the one route and others", got)
	}
}

// TestMethodMessages checks that with LimitMessages a stream's messages
// take its method's policies: a chat limited to 3 an hour (the stream's
// opening and two more messages) refuses the fourth message by its
// policy, under a service limit it does not reach, and the route counts
// the refusal.
func TestMethodMessages(t *testing.T) {
	hour := time.Hour
	it := mustNew(t, Config{
		Limits: admit.Config{
			Rate:     limits.Limit{Events: 100, Period: hour},
			Policies: []admit.Policy{{Name: "chat", Routes: []string{methodChat}, Rate: limits.Limit{Events: 3, Period: hour}}},
		},
		LimitMessages: true,
	})
	conn := newServer(t, it, &echo{}).dial("192.0.2.1:1")
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	cs, err := openChat(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := chatOnce(cs, "hi"); err != nil {
			t.Fatalf("message %d: %v", i+1, err)
		}
	}
	_, err = chatOnce(cs, "hi")
	if got := describe(err, cs.Trailer()); got.reason != limits.ReasonRateLimited || got.policy != "chat" {
		t.Errorf("the fourth message: %v, want rate_limited by chat", got)
	}
	if got := routeStats(it); len(got) != 2 || got[0] != methodChat+" 1/1" {
		t.Errorf("Routes %q: want the stream allowed and its message refused under %s", got, methodChat)
	}
	mustSay(t, conn, "another method, under the service limit alone")
}

// TestRoutePatternsMustBeMethods checks that New refuses a route pattern
// that no gRPC method can match, in a policy's Routes or in Exempt,
// naming the field, and accepts a method and a service; and that a
// policy of one method limits that method alone, counted under its route.
func TestRoutePatternsMustBeMethods(t *testing.T) {
	rate := limits.Limit{Events: 1, Period: time.Minute}
	for _, pattern := range []string{
		"grpc.testing.TestService ",
		"not a method",
		"/grpc.testing.TestService/Empty Call",
		"/a/b\x00",
		"/svc/{id}",
		"POST /svc/M",
		"/grpc.testing.TestService",
		"/grpc.testing.TestService/EmptyCall/",
		"//EmptyCall",
		"/grpc..testing/EmptyCall",
		"/grpc.testing.TestService/{method...}",
	} {
		_, err := New(Config{Limits: admit.Config{Policies: []admit.Policy{{Name: "p", Routes: []string{pattern}, Rate: rate}}}})
		if err == nil || !strings.HasPrefix(err.Error(), "grpclimit: ") || !strings.Contains(err.Error(), "Policies[0]") || !strings.Contains(err.Error(), "Routes[0]") {
			t.Errorf("Policies[0].Routes[0] = %q: New = %v, want an error naming Policies[0] ... Routes[0]", pattern, err)
		}
		_, err = New(Config{Limits: admit.Config{Exempt: []string{"/grpc.testing.TestService/", pattern}}})
		if err == nil || !strings.HasPrefix(err.Error(), "grpclimit: ") || !strings.Contains(err.Error(), "Exempt[1]") {
			t.Errorf("Exempt[1] = %q: New = %v, want an error naming Exempt[1]", pattern, err)
		}
	}
	for _, pattern := range []string{"/grpc.testing.TestService/EmptyCall", "/grpc.testing.TestService/", "/Svc/M_2", "/_pkg.v1.S/"} {
		if _, err := New(Config{Limits: admit.Config{Policies: []admit.Policy{{Name: "p", Routes: []string{pattern}, Rate: rate}}}}); err != nil {
			t.Errorf("route %q: %v", pattern, err)
		}
		if _, err := New(Config{Limits: admit.Config{Rate: rate, Exempt: []string{pattern}}}); err != nil {
			t.Errorf("exempt %q: %v", pattern, err)
		}
	}

	const empty, unary = "/grpc.testing.TestService/EmptyCall", "/grpc.testing.TestService/UnaryCall"
	it := mustNew(t, Config{Limits: admit.Config{Policies: []admit.Policy{{Name: "empty", Routes: []string{empty}, Rate: rate}}}})
	conn := newServer(t, it, &echo{}, unaryService("grpc.testing.TestService", "EmptyCall", "UnaryCall")).dial("192.0.2.1:1")
	call := func(method string) error {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		return conn.Invoke(ctx, method, wrapperspb.String("x"), new(wrapperspb.StringValue))
	}
	if err := call(empty); err != nil {
		t.Fatalf("the first EmptyCall: %v", err)
	}
	for i := range 3 {
		if err := call(unary); err != nil {
			t.Errorf("UnaryCall %d, another method: %v", i+1, err)
		}
	}
	err := call(empty)
	if got := describe(err, nil); got.code != codes.ResourceExhausted || got.reason != limits.ReasonRateLimited || got.policy != "empty" {
		t.Errorf("the second EmptyCall in a minute: %v, want rate_limited by empty", got)
	}
	want := []admit.RouteStats{{Route: empty, Requests: counts(1, 1)}, {Route: "other", Requests: counts(3, 0)}}
	if s := it.Stats(); len(s.Routes) != 2 || s.Routes[0] != want[0] || s.Routes[1] != want[1] {
		t.Errorf("Routes %v, want %+v", routeStats(it), want)
	}
}
