package grpclimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
)

// TestClientKeys checks the bucket each call is charged to: the peer,
// grouped by prefix, and the forwarding metadata only from a trusted
// proxy.
func TestClientKeys(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, tt := range []struct {
		name   string
		cfg    admit.Config
		remote string
		md     []string
		want   string
	}{
		{"IPv4 peer", admit.Config{}, "192.0.2.7:1", nil, "a:192.0.2.7/32"},
		{"IPv6 peer, by /64", admit.Config{}, "[2001:db8:1:2::9]:1", nil, "a:2001:db8:1:2::/64"},
		{"IPv6 /48 configured", admit.Config{IPv6Prefix: 48}, "[2001:db8:1:2::9]:1", nil, "a:2001:db8:1::/48"},
		{"spoofed x-forwarded-for, no proxy trusted", admit.Config{}, "192.0.2.7:1", []string{"x-forwarded-for", "203.0.113.1"}, "a:192.0.2.7/32"},
		{"spoofed x-forwarded-for, untrusted peer", admit.Config{TrustedProxies: proxies}, "192.0.2.7:1", []string{"x-forwarded-for", "203.0.113.1"}, "a:192.0.2.7/32"},
		{"trusted proxy", admit.Config{TrustedProxies: proxies}, "10.1.1.1:1", []string{"x-forwarded-for", "198.51.100.9, 203.0.113.1, 10.2.2.2"}, "a:203.0.113.1/32"},
		{"trusted proxy, other key ignored", admit.Config{TrustedProxies: proxies, ForwardedHeader: "X-Real-IP"}, "10.1.1.1:1", []string{"x-forwarded-for", "203.0.113.1"}, "a:10.1.1.1/32"},
		{"trusted proxy, x-real-ip", admit.Config{TrustedProxies: proxies, ForwardedHeader: "X-Real-IP"}, "10.1.1.1:1", []string{"x-real-ip", "203.0.113.1"}, "a:203.0.113.1/32"},
		{"trusted proxy, forwarded", admit.Config{TrustedProxies: proxies, ForwardedHeader: "forwarded"}, "10.1.1.1:1", []string{"forwarded", `for="[2001:db8:cafe::17]:4711"`}, "a:2001:db8:cafe::/64"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			tt.cfg.Limiters, tt.cfg.Limiter = named(rec), "l"
			srv := newServer(t, mustNew(t, Config{Limits: tt.cfg}), &echo{})
			mustSay(t, srv.dial(tt.remote), "x", tt.md...)
			if got := rec.last(); got != tt.want {
				t.Errorf("key %q, want %q", got, tt.want)
			}
		})
	}
}

// TestSpoofedAddressCharged checks that an untrusted client sending a new
// forwarded address with every call is charged to its own address.
func TestSpoofedAddressCharged(t *testing.T) {
	it := mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 2, Period: time.Hour}, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}})
	srv := newServer(t, it, &echo{})
	conn := srv.dial("192.0.2.7:1")
	served := 0
	for i := range 10 {
		if _, _, err := say(conn, "x", "x-forwarded-for", fmt.Sprintf("203.0.113.%d", i)); err == nil {
			served++
		}
	}
	if served != 2 {
		t.Errorf("%d calls with spoofed addresses served, want the client's own 2", served)
	}
	// Through the trusted proxy, the forwarded clients are told apart.
	proxy := srv.dial("10.0.0.1:1")
	for i := range 5 {
		mustSay(t, proxy, "x", "x-forwarded-for", fmt.Sprintf("198.51.100.%d", i))
	}
}

// TestIPv6Grouping checks that the addresses of one /64 share a bucket and
// the next /64 does not.
func TestIPv6Grouping(t *testing.T) {
	srv := newServer(t, mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 1, Period: time.Hour}}}), &echo{})
	mustSay(t, srv.dial("[2001:db8:0:1::1]:1"), "x")
	if _, _, err := say(srv.dial("[2001:db8:0:1:ffff::2]:1"), "x"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("another address of the same /64: %v, want refused", err)
	}
	mustSay(t, srv.dial("[2001:db8:0:2::1]:1"), "x")
}

// TestCallerKeyRotation has one address send a new token with every call,
// far past its address limit: it gets its address allowance, no more, and
// the caller-key table holds no more keys than that.
func TestCallerKeyRotation(t *testing.T) {
	const multiplier = 4 // the default AddressMultiplier
	it := mustNew(t, Config{Limits: admit.Config{
		Rate:      limits.Limit{Events: 1, Period: time.Minute},
		CallerKey: "Authorization",
		MaxKeys:   20,
	}})
	srv := newServer(t, it, &echo{})
	conn := srv.dial("203.0.113.9:4000")
	served := 0
	for i := range 100 {
		if _, _, err := say(conn, "x", "authorization", fmt.Sprintf("Bearer rot%d", i)); err == nil {
			served++
		}
	}
	if served != multiplier {
		t.Errorf("rotating tokens: %d served, want the address allowance %d", served, multiplier)
	}
	for i := range 5 {
		mustSay(t, srv.dial(fmt.Sprintf("192.0.2.%d:1", 10+i)), "x", "authorization", fmt.Sprintf("Bearer new%d", i))
	}
	s := it.Stats()
	if len(s.Policies) != 3 || s.Policies[0].Name != "address" || s.Policies[1].Name != "default" || s.Policies[2].Name != "keyless" {
		t.Fatalf("policies %+v", s.Policies)
	}
	if n := s.Policies[1].Requests[admit.Allowed]; n != multiplier+5 || s.Policies[1].Keys != multiplier+5 {
		t.Errorf("caller keys charged %d times, %d keys held; want only for calls their address allowed (%d)", n, s.Policies[1].Keys, multiplier+5)
	}
}

// TestAddressRefusalLeavesCallerWhole exhausts an address with other
// tokens, then sends a token's call from it: refused by the address
// bucket, it must not have spent the token's own bucket.
func TestAddressRefusalLeavesCallerWhole(t *testing.T) {
	it := mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 2, Period: time.Hour}, CallerKey: "x-api-key", AddressMultiplier: 2}})
	srv := newServer(t, it, &echo{})
	a := srv.dial("198.51.100.1:1")
	for _, k := range []string{"y", "y", "z", "z"} {
		mustSay(t, a, "x", "x-api-key", k)
	}
	for range 3 {
		_, trailer, err := say(a, "x", "x-api-key", "k")
		if got := describe(err, trailer); got.reason != limits.ReasonRateLimited || got.policy != "address" {
			t.Fatalf("k from the exhausted address: %v", got)
		}
	}
	b := srv.dial("198.51.100.2:1")
	mustSay(t, b, "x", "x-api-key", "k")
	mustSay(t, b, "x", "x-api-key", "k")
	_, trailer, err := say(b, "x", "x-api-key", "k")
	if got := describe(err, trailer); got.reason != limits.ReasonRateLimited || got.policy != "default" {
		t.Errorf("k's third call: %v, want refused by k's own bucket", got)
	}
}

// TestCallerKeyHashedAndKeyless checks that limiters see a hash of the
// caller key, never the key, and that calls without one share the keyless
// bucket of their address.
func TestCallerKeyHashedAndKeyless(t *testing.T) {
	rec := &recorder{}
	it := mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 1, Period: time.Hour}, CallerKey: "authorization", Limiters: named(rec), CallerLimiter: "l"}})
	srv := newServer(t, it, &echo{})
	conn := srv.dial("192.0.2.1:1")
	mustSay(t, conn, "x", "authorization", "Bearer secret")
	sum := sha256.Sum256([]byte("Bearer secret"))
	if got, want := rec.last(), "c:"+hex.EncodeToString(sum[:16]); got != want || strings.Contains(got, "secret") {
		t.Errorf("the caller limiter saw %q, want %q", got, want)
	}
	mustSay(t, conn, "x")
	if got := rec.last(); got != "n:a:192.0.2.1/32" {
		t.Errorf("a call without a key went to %q, want the keyless bucket of its address", got)
	}
	if _, err := New(Config{Limits: admit.Config{CallerKey: "authorization"}}); err == nil || !strings.Contains(err.Error(), "CallerKey") {
		t.Errorf("CallerKey with no limit: %v", err)
	}
}

// TestKeys checks that a function of Keys supplies the caller key, in
// place of the metadata of its name, and a policy's key.
func TestKeys(t *testing.T) {
	type userKey struct{}
	user := func(ctx context.Context) string {
		u, _ := ctx.Value(userKey{}).(string)
		return u
	}
	rec := &recorder{}
	it := mustNew(t, Config{
		Limits: admit.Config{Rate: limits.Limit{Events: 1, Period: time.Hour}, CallerKey: "authorization", Limiters: named(rec), CallerLimiter: "l"},
		Keys:   map[string]func(context.Context) string{"authorization": user},
	})
	ctx := context.WithValue(peers(1)[0], userKey{}, "alice")
	if _, err := it.Unary(ctx, nil, benchInfo, noop); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("alice"))
	if got, want := rec.last(), "c:"+hex.EncodeToString(sum[:16]); got != want {
		t.Errorf("the caller limiter saw %q, want the hash of the user the function read (%q)", got, want)
	}

	it = mustNew(t, Config{
		Limits: admit.Config{Rate: limits.Limit{Events: 10, Period: time.Hour},
			Policies: []admit.Policy{{Name: "per-user", Key: "user", Rate: limits.Limit{Events: 1, Period: time.Hour}}}},
		Keys: map[string]func(context.Context) string{"user": user},
	})
	for _, tt := range []struct {
		user string
		want limits.Reason
	}{{"alice", 0}, {"alice", limits.ReasonRateLimited}, {"bob", 0}} {
		_, err := it.Unary(context.WithValue(peers(1)[0], userKey{}, tt.user), nil, benchInfo, noop)
		if ReasonOf(err) != tt.want {
			t.Errorf("a call of %s: %v, want %v", tt.user, err, tt.want)
		}
	}
}

// TestClientKeyAndReset checks that a handler can read its client's key,
// and that Reset gives the client its full burst back.
func TestClientKeyAndReset(t *testing.T) {
	var it *Interceptor
	keys := make(chan string, 1)
	it = mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 1, Period: time.Hour}, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}})
	srv := newServer(t, it, &echo{say: func(ctx context.Context, in string) (string, error) {
		keys <- it.ClientKey(ctx)
		return in, nil
	}})
	conn := srv.dial("10.0.0.1:1")
	mustSay(t, conn, "x", "x-forwarded-for", "2001:db8:1:2::9")
	key := <-keys
	if key != "a:2001:db8:1:2::/64" {
		t.Errorf("ClientKey in the handler: %q", key)
	}
	if _, _, err := say(conn, "x", "x-forwarded-for", "2001:db8:1:2::9"); ReasonOf(err) != limits.ReasonRateLimited {
		t.Fatalf("second call: %v", err)
	}
	if err := it.Reset(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	mustSay(t, conn, "x", "x-forwarded-for", "2001:db8:1:2::9")
}
