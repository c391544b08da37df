package httplimit

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
)

// TestClientKey checks whose address a request is charged to: the peer's,
// grouped by prefix, or, from a trusted proxy only, the right-most
// untrusted address of the one forwarding field configured.
func TestClientKey(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	byHeader := map[string]*Middleware{}
	for _, h := range []string{"", "Forwarded", "x-real-ip"} {
		byHeader[h] = mustNew(t, Config{Limits: admit.Config{TrustedProxies: trusted, ForwardedHeader: h}})
	}
	tests := []struct {
		name   string
		read   string // the ForwardedHeader configured
		remote string
		header map[string]string
		want   string
	}{
		{"peer v4", "", "192.0.2.7:5555", nil, "192.0.2.7/32"},
		{"peer v6 grouped by /64", "", "[2001:db8:1:2:3:4:5:6]:443", nil, "2001:db8:1:2::/64"},
		{"peer v6 zone", "", "[fe80::1%eth0]:443", nil, "fe80::/64"},
		{"mapped v4", "", "[::ffff:192.0.2.9]:80", nil, "192.0.2.9/32"},
		{"no port", "", "192.0.2.8", nil, "192.0.2.8/32"},
		{"v6 no port", "", "2001:db8::1", nil, "2001:db8::/64"},
		{"untrusted peer ignores XFF", "", "192.0.2.7:1", map[string]string{"X-Forwarded-For": "203.0.113.1"}, "192.0.2.7/32"},
		{"untrusted peer ignores X-Real-IP", "x-real-ip", "192.0.2.7:1", map[string]string{"X-Real-Ip": "203.0.113.1"}, "192.0.2.7/32"},
		{"trusted peer, XFF", "", "10.1.1.1:1", map[string]string{"X-Forwarded-For": "203.0.113.1"}, "203.0.113.1/32"},
		{"right-most untrusted", "", "10.1.1.1:1", map[string]string{"X-Forwarded-For": "198.51.100.66, 203.0.113.1, 10.9.9.9"}, "203.0.113.1/32"},
		{"spoofed left entries", "", "10.1.1.1:1", map[string]string{"X-Forwarded-For": "1.1.1.1, 1.2.3.4, 203.0.113.5"}, "203.0.113.5/32"},
		{"all hops trusted", "", "10.1.1.1:1", map[string]string{"X-Forwarded-For": "10.2.2.2, 10.3.3.3"}, "10.2.2.2/32"},
		{"garbage hop", "", "10.1.1.1:1", map[string]string{"X-Forwarded-For": "203.0.113.1, garbage"}, "10.1.1.1/32"},
		{"garbage behind trusted hop", "", "10.1.1.1:1", map[string]string{"X-Forwarded-For": "nonsense, 10.4.4.4"}, "10.4.4.4/32"},
		{"other headers ignored", "", "10.1.1.1:1", map[string]string{"X-Forwarded-For": "203.0.113.1", "Forwarded": "for=198.51.100.9", "X-Real-Ip": "198.51.100.8"}, "203.0.113.1/32"},
		{"Forwarded", "Forwarded", "10.1.1.1:1", map[string]string{"Forwarded": `for=192.0.2.60;proto=http, for="[2001:db8:cafe::17]:4711"`}, "2001:db8:cafe::/64"},
		{"Forwarded configured, XFF ignored", "Forwarded", "10.1.1.1:1", map[string]string{"X-Forwarded-For": "203.0.113.1"}, "10.1.1.1/32"},
		{"Forwarded obfuscated", "Forwarded", "10.1.1.1:1", map[string]string{"Forwarded": "for=_hidden"}, "10.1.1.1/32"},
		{"X-Real-IP", "x-real-ip", "10.1.1.1:1", map[string]string{"X-Real-Ip": "203.0.113.9"}, "203.0.113.9/32"},
		{"trusted v6 proxy", "", "[2001:db8:ffff::1]:1", map[string]string{"X-Forwarded-For": "2001:db8:5:6::9"}, "2001:db8:5:6::/64"},
		{"unparseable peer", "", "pipe", nil, "invalid"},
		{"empty peer", "", "", nil, "invalid"},
	}
	for _, tt := range tests {
		r := &http.Request{RemoteAddr: tt.remote, Header: http.Header{}}
		for k, v := range tt.header {
			r.Header.Set(k, v)
		}
		if got := byHeader[tt.read].ClientKey(r); got != "a:"+tt.want {
			t.Errorf("%s: ClientKey = %s, want a:%s", tt.name, got, tt.want)
		}
	}
}

// TestSpoofedHeaderIgnored is the attack of a client behind a proxy that
// writes X-Forwarded-For: sending a Forwarded header of its own choosing
// with each request must not change its bucket.
func TestSpoofedHeaderIgnored(t *testing.T) {
	m := mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 1, Period: time.Hour}, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}})
	allowed := 0
	for i := range 20 {
		w := serve(m.Handler(ok), "10.1.1.1:4000", "/",
			"X-Forwarded-For", "203.0.113.1",
			"Forwarded", fmt.Sprintf("for=198.51.100.%d", i),
			"X-Real-Ip", fmt.Sprintf("198.51.101.%d", i))
		if w.Code == 200 {
			allowed++
		}
	}
	if allowed != 1 {
		t.Errorf("%d of 20 requests with spoofed headers allowed, want 1", allowed)
	}
}

func TestClientKeyPrefixLengths(t *testing.T) {
	m := mustNew(t, Config{Limits: admit.Config{IPv4Prefix: 24, IPv6Prefix: 48}})
	for remote, want := range map[string]string{
		"192.0.2.77:1":        "a:192.0.2.0/24",
		"[2001:db8:1:2::9]:1": "a:2001:db8:1::/48",
	} {
		if got := m.ClientKey(&http.Request{RemoteAddr: remote}); got != want {
			t.Errorf("ClientKey(%s) = %s, want %s", remote, got, want)
		}
	}
	// The bucket is the prefix's: two addresses of one /24 share it.
	m = mustNew(t, Config{Limits: admit.Config{IPv4Prefix: 24, Rate: limits.Limit{Events: 1, Period: time.Hour}}})
	serve(m.Handler(ok), "192.0.2.1:1", "/")
	if w := serve(m.Handler(ok), "192.0.2.200:1", "/"); w.Code != 429 {
		t.Errorf("another address of the same /24: %d, want 429", w.Code)
	}
}

// parseHostRef parses a peer as the tests expect: an address with a port,
// or without one (bracketed or not), unmapped and without its zone.
func parseHostRef(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone("")
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")); err == nil {
		return a.Unmap().WithZone("")
	}
	return netip.Addr{}
}

// FuzzClientKey feeds arbitrary peers and forwarding headers to the
// client's identification: it must never panic, must return the key of a
// masked prefix of the configured length or a:invalid exactly for a peer
// that is no address, and must ignore the headers when the peer is not a
// trusted proxy.
func FuzzClientKey(f *testing.F) {
	f.Add("10.0.0.1:80", "203.0.113.1, 10.0.0.2", `for="[2001:db8::1]:80";by=x`, "192.0.2.1")
	f.Add("192.0.2.1:1", "1.2.3.4", "for=1.2.3.4", "")
	f.Add("[::ffff:10.0.0.1]:1", ",,,", "for=;;for", "[::1]")
	f.Add("192.0.2.1:99999", "", "", "")
	f.Add("01.2.3.4:1", "", "", "")
	f.Add("pipe", "", "", "")
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	ms := []*Middleware{
		mustNew(f, Config{Limits: admit.Config{TrustedProxies: trusted}}),
		mustNew(f, Config{Limits: admit.Config{TrustedProxies: trusted, ForwardedHeader: "Forwarded"}}),
		mustNew(f, Config{Limits: admit.Config{TrustedProxies: trusted, ForwardedHeader: "X-Real-IP"}}),
	}
	f.Fuzz(func(t *testing.T, remote, xff, fwd, real string) {
		r := &http.Request{RemoteAddr: remote, Header: http.Header{}}
		r.Header["X-Forwarded-For"] = strings.Split(xff, "\n")
		r.Header["Forwarded"] = strings.Split(fwd, "\n")
		r.Header["X-Real-Ip"] = []string{real}
		peer := parseHostRef(remote)
		for _, m := range ms {
			key := m.ClientKey(r)
			if !peer.IsValid() {
				if key != "a:invalid" {
					t.Fatalf("peer %q is no address: ClientKey = %s, want a:invalid", remote, key)
				}
				continue
			}
			p, err := netip.ParsePrefix(strings.TrimPrefix(key, "a:"))
			if !strings.HasPrefix(key, "a:") || err != nil {
				t.Fatalf("peer %q: ClientKey = %s, want a:<prefix>", remote, key)
			}
			if want := map[bool]int{true: 32, false: 64}[p.Addr().Is4()]; p.Bits() != want || p != p.Masked() {
				t.Fatalf("peer %q: ClientKey = %s, want a masked /%d", remote, key, want)
			}
			isTrusted := false
			for _, tp := range trusted {
				isTrusted = isTrusted || tp.Contains(peer)
			}
			if want, _ := peer.Prefix(p.Bits()); !isTrusted && p != want {
				t.Fatalf("untrusted peer %s: ClientKey = %s, want a:%s", remote, key, want)
			}
		}
	})
}

// TestPolicyKeysCountedOnce checks that the keys of a table two policies
// share (the caller key's policy and keyless, which requests without a
// caller key take instead) are reported once: the keys gauges of a
// Middleware add up to the keys its tables hold.
func TestPolicyKeysCountedOnce(t *testing.T) {
	m := mustNew(t, Config{Limits: admit.Config{Rate: limits.Limit{Events: 10, Period: time.Hour}, CallerKey: "X-Key"}})
	h := m.Handler(ok)
	const clients = 1000
	for i := range clients {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}).String() + ":1"
		h.ServeHTTP(httptest.NewRecorder(), r) // no caller key: the keyless bucket
	}
	keys := map[string]int{}
	sum := 0
	for _, p := range m.Stats().Policies {
		keys[p.Name] = p.Keys
		sum += p.Keys
	}
	// The address table holds 1,000 keys, the caller keys' table, shared
	// with keyless, 1,000 more.
	if sum != 2*clients || keys["address"] != clients {
		t.Errorf("keys by policy %v, summing to %d: want %d, a shared table counted once", keys, sum, 2*clients)
	}
}
