package grpclimit

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/limitsgo/limits"
)

// TestMethodPolicy is the case of a login method limited to 2 an hour
// under a service limit of 10 an hour per client: the method's refusals
// give back what the service-wide layer charged, so the client's other
// methods still get the 8 calls left of its 10, and each layer and each
// method counts what it decided, once.
func TestMethodPolicy(t *testing.T) {
	hour := time.Hour
	it := mustNew(t, Config{Rate: limits.Limit{Events: 10, Period: hour}})
	if err := it.Method(methodSay, Policy{Name: "login", Rate: limits.Limit{Events: 2, Period: hour}}); err != nil {
		t.Fatal(err)
	}
	conn := newServer(t, it, &echo{}).dial("192.0.2.1:1")
	ok, refused := 0, 0
	for range 10 {
		_, trailer, err := say(conn, "pw")
		switch got := describe(err, trailer); {
		case err == nil:
			ok++
		case got.reason == ReasonRateLimited && got.policy == "login":
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
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cs, err := openChat(ctx, conn)
		if err == nil {
			_, err = chatOnce(cs, "hi")
		}
		cancel()
		switch {
		case i < 8 && err != nil:
			t.Fatalf("chat %d after the logins: %v", i+1, err)
		case i == 8 && ReasonOf(err) != ReasonRateLimited:
			t.Fatalf("chat 9, past the service limit: %v, want rate_limited", err)
		}
	}
	s := it.Stats()
	if s.Allowed != 10 || s.RateLimited != 9 {
		t.Errorf("Stats: %d allowed, %d rate limited; want 10 and 9", s.Allowed, s.RateLimited)
	}
	pol := map[string]PolicyStats{}
	for _, p := range s.Policies {
		pol[p.Name] = p
	}
	if d, l := pol["default"], pol["login"]; d.Allowed != 18 || d.RateLimited != 1 || l.Allowed != 2 || l.RateLimited != 8 {
		t.Errorf("policies: %+v", s.Policies)
	}
	want := []MethodStats{
		{Method: methodSay, Allowed: 2, RateLimited: 8},
		{Method: OtherMethods, Allowed: 8, RateLimited: 1},
	}
	if len(s.Methods) != len(want) || s.Methods[0] != want[0] || s.Methods[1] != want[1] {
		t.Errorf("Methods %+v, want %+v", s.Methods, want)
	}
}

// TestServicePolicy checks a service's policy and a method's under it:
// a call of the method takes Config's, the service's and its own, in
// that order, and a refusal by its own gives back both others; the
// service's other methods take the service's alone.
func TestServicePolicy(t *testing.T) {
	hour := time.Hour
	it := mustNew(t, Config{Rate: limits.Limit{Events: 100, Period: hour}})
	// The method before its service: the order of registration does not
	// change the order of the layers.
	if err := it.Method(methodSay, Policy{Name: "say", Rate: limits.Limit{Events: 1, Period: hour}}); err != nil {
		t.Fatal(err)
	}
	if err := it.Method("test.Echo", Policy{Name: "echo", Rate: limits.Limit{Events: 3, Period: hour}}); err != nil {
		t.Fatal(err)
	}
	conn := newServer(t, it, &echo{}).dial("192.0.2.1:1")
	mustSay(t, conn, "1")
	for range 3 {
		if _, trailer, err := say(conn, "2"); describe(err, trailer).policy != "say" {
			t.Fatalf("a second Say: %v, want a refusal by say", describe(err, trailer))
		}
	}
	// echo charged 1 of 3: two chats pass, the third is refused by echo.
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cs, err := openChat(ctx, conn)
		if err == nil {
			_, err = chatOnce(cs, "hi")
		}
		cancel()
		if st, _ := status.FromError(err); i < 2 && err != nil || i == 2 && st.Code() != codes.ResourceExhausted {
			t.Fatalf("chat %d: %v", i+1, err)
		}
	}
	pol := map[string]PolicyStats{}
	for _, p := range it.Stats().Policies {
		pol[p.Name] = p
	}
	if d, e, s := pol["default"], pol["echo"], pol["say"]; d.Allowed != 7 || e.Allowed != 6 || e.RateLimited != 1 || s.Allowed != 1 || s.RateLimited != 3 {
		t.Errorf("policies: %+v", it.Stats().Policies)
	}
	if m := it.Stats().Methods; len(m) != 3 || m[0].Method != methodSay || m[1].Method != "test.Echo" || m[1].Allowed != 2 || m[1].RateLimited != 1 {
		t.Errorf("Methods: %+v", m)
	}
}

// TestMethodConcurrent makes calls of a method limited to 50 an hour
// from 32 goroutines, under a service limit of 1,000 an hour that charges
// every call first: exactly 50 are served, and every layer and the
// method's counters agree with a locked count of the outcomes the clients
// saw.
func TestMethodConcurrent(t *testing.T) {
	const limit, service, workers, each = 50, 1000, 32, 10
	hour := time.Hour
	it := mustNew(t, Config{Rate: limits.Limit{Events: service, Period: hour}})
	if err := it.Method(methodSay, Policy{Name: "login", Rate: limits.Limit{Events: limit, Period: hour}}); err != nil {
		t.Fatal(err)
	}
	conn := newServer(t, it, &echo{}).dial("192.0.2.1:1")
	var mu sync.Mutex
	served, refused := 0, 0
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				_, _, err := say(conn, "x")
				mu.Lock()
				switch {
				case err == nil:
					served++
				case ReasonOf(err) == ReasonRateLimited:
					refused++
				default:
					t.Error(err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if served != limit || refused != workers*each-limit {
		t.Fatalf("%d served, %d refused; want %d and %d", served, refused, limit, workers*each-limit)
	}
	s := it.Stats()
	want := MethodStats{Method: methodSay, Allowed: uint64(served), RateLimited: uint64(refused)}
	if len(s.Methods) != 2 || s.Methods[0] != want || s.Methods[1] != (MethodStats{Method: OtherMethods}) {
		t.Errorf("Methods %+v, want %+v and nothing else", s.Methods, want)
	}
	if p := s.Policies; len(p) != 2 || p[0].Allowed != workers*each || p[1].Allowed != limit || p[1].RateLimited != uint64(refused) {
		t.Errorf("Policies %+v", p)
	}
}

// TestMethodErrors checks what Method refuses.
func TestMethodErrors(t *testing.T) {
	rate := limits.Limit{Events: 1, Period: time.Second}
	it := mustNew(t, Config{Rate: rate})
	if err := it.Method(methodSay, Policy{Name: "login", Rate: rate}); err != nil {
		t.Fatal(err)
	}
	bare := mustNew(t, Config{})
	for _, tt := range []struct {
		it     *Interceptor
		name   string
		policy Policy
		want   string
	}{
		{it, "", Policy{Name: "x", Rate: rate}, "full method name"},
		{it, "/test.Echo", Policy{Name: "x", Rate: rate}, "full method name"},
		{it, "/test.Echo/Say/More", Policy{Name: "x", Rate: rate}, "full method name"},
		{it, "test.Echo/Say", Policy{Name: "x", Rate: rate}, "full method name"},
		{it, OtherMethods, Policy{Name: "x", Rate: rate}, "full method name"},
		{it, methodSay, Policy{Name: "x", Rate: rate}, "registered before"},
		{it, methodChat, Policy{Name: "login", Rate: rate}, "already is a policy of that name"},
		{it, methodChat, Policy{Name: "default", Rate: rate}, "already is a policy of that name"},
		{it, methodChat, Policy{Rate: rate}, "needs a Name"},
		{it, methodChat, Policy{Name: "x"}, "needs Rate or Limiter"},
		{it, methodChat, Policy{Name: "x", Rate: rate, Burst: -1}, "must not be negative"},
		{bare, methodChat, Policy{Name: "x", Rate: rate, Key: MetadataKey("k")}, "needs an address bucket"},
	} {
		if err := tt.it.Method(tt.name, tt.policy); err == nil || !strings.HasPrefix(err.Error(), "grpclimit: ") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Method(%q, %+v) = %v, want an error saying %s", tt.name, tt.policy, err, tt.want)
		}
	}
	if n := len(it.Stats().Methods); n != 2 {
		t.Errorf("%d names counted after refused registrations, want the one registered and others", n)
	}
}

// TestMethodMessages checks that with LimitMessages a stream's messages
// take its method's policies: a chat limited to 3 an hour (the stream's
// opening and two more messages) refuses the fourth message by its
// policy, under a service limit it does not reach.
func TestMethodMessages(t *testing.T) {
	hour := time.Hour
	it := mustNew(t, Config{Rate: limits.Limit{Events: 100, Period: hour}, LimitMessages: true})
	if err := it.Method(methodChat, Policy{Name: "chat", Rate: limits.Limit{Events: 3, Period: hour}}); err != nil {
		t.Fatal(err)
	}
	conn := newServer(t, it, &echo{}).dial("192.0.2.1:1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
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
	if got := describe(err, cs.Trailer()); got.reason != ReasonRateLimited || got.policy != "chat" {
		t.Errorf("the fourth message: %v, want rate_limited by chat", got)
	}
}
