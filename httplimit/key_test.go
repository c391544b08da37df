package httplimit

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/internal/front"
)

func mustNew(t testing.TB, cfg Config) *Middleware {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestClientIP(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	byHeader := map[string]*Middleware{}
	for _, h := range []string{"", "Forwarded", "x-real-ip"} {
		byHeader[h] = mustNew(t, Config{TrustedProxies: trusted, ForwardedHeader: h})
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
		{"unparseable peer", "", "pipe", nil, "invalid Prefix"},
		{"empty peer", "", "", nil, "invalid Prefix"},
	}
	for _, tt := range tests {
		r := &http.Request{RemoteAddr: tt.remote, Header: http.Header{}}
		for k, v := range tt.header {
			r.Header.Set(k, v)
		}
		if got := byHeader[tt.read].c.clientIP(r).String(); got != tt.want {
			t.Errorf("%s: clientIP = %s, want %s", tt.name, got, tt.want)
		}
	}
	if _, err := New(Config{ForwardedHeader: "X-Client-IP"}); err == nil {
		t.Error("New accepted an unknown ForwardedHeader")
	}
}

// TestSpoofedHeaderIgnored is the attack of a client behind a proxy that
// writes X-Forwarded-For: sending a Forwarded header of its own choosing
// with each request must not change its bucket.
func TestSpoofedHeaderIgnored(t *testing.T) {
	m := mustNew(t, Config{Rate: limits.Limit{Events: 1, Period: time.Hour}, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	allowed := 0
	for i := range 20 {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.1.1.1:4000"
		r.Header.Set("X-Forwarded-For", "203.0.113.1")
		r.Header.Set("Forwarded", fmt.Sprintf("for=198.51.100.%d", i))
		r.Header.Set("X-Real-Ip", fmt.Sprintf("198.51.101.%d", i))
		w := httptest.NewRecorder()
		m.Handler(ok).ServeHTTP(w, r)
		if w.Code == 200 {
			allowed++
		}
	}
	if allowed != 1 {
		t.Errorf("%d of 20 requests with spoofed headers allowed, want 1", allowed)
	}
}

func TestClientIPPrefixLengths(t *testing.T) {
	m := mustNew(t, Config{IPv4Prefix: 24, IPv6Prefix: 48})
	for remote, want := range map[string]string{
		"192.0.2.77:1":        "192.0.2.0/24",
		"[2001:db8:1:2::9]:1": "2001:db8:1::/48",
	} {
		if got := m.c.clientIP(&http.Request{RemoteAddr: remote}).String(); got != want {
			t.Errorf("clientIP(%s) = %s, want %s", remote, got, want)
		}
	}
}

func TestExemptHelpers(t *testing.T) {
	ex := ExemptAny(ExemptPaths("/healthz", "/readyz"), ExemptPrefixes("/static/"))
	for path, want := range map[string]bool{
		"/healthz": true, "/readyz": true, "/static/app.js": true,
		"/healthz/x": false, "/static": false, "/api": false, "/": false,
	} {
		r, _ := http.NewRequest(http.MethodGet, "http://x"+path, nil)
		if got := ex(r); got != want {
			t.Errorf("exempt(%s) = %v, want %v", path, got, want)
		}
	}
}

func TestCallerKeyHelpers(t *testing.T) {
	r, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
	if CookieKey("session")(r) != "" || HeaderKey("X-Api-Key")(r) != "" {
		t.Error("keys found in an empty request")
	}
	r.AddCookie(&http.Cookie{Name: "session", Value: "abc"})
	r.Header.Set("X-Api-Key", "k1")
	if got := CookieKey("session")(r); got != "abc" {
		t.Errorf("CookieKey = %q, want abc", got)
	}
	if got := HeaderKey("X-Api-Key")(r); got != "k1" {
		t.Errorf("HeaderKey = %q, want k1", got)
	}
}

// FuzzClientIP feeds arbitrary peers and forwarding headers to the key
// extraction: it must never panic, must return a valid prefix of the
// configured length or the invalid one, and must ignore the headers when
// the peer is not a trusted proxy.
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:80", "203.0.113.1, 10.0.0.2", `for="[2001:db8::1]:80";by=x`, "192.0.2.1")
	f.Add("192.0.2.1:1", "1.2.3.4", "for=1.2.3.4", "")
	f.Add("[::ffff:10.0.0.1]:1", ",,,", "for=;;for", "[::1]")
	f.Add("pipe", "", "", "")
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	ms := []*Middleware{
		mustNew(f, Config{TrustedProxies: trusted}),
		mustNew(f, Config{TrustedProxies: trusted, ForwardedHeader: "Forwarded"}),
		mustNew(f, Config{TrustedProxies: trusted, ForwardedHeader: "X-Real-IP"}),
	}
	f.Fuzz(func(t *testing.T, remote, xff, fwd, real string) {
		r := &http.Request{RemoteAddr: remote, Header: http.Header{}}
		r.Header["X-Forwarded-For"] = strings.Split(xff, "\n")
		r.Header["Forwarded"] = strings.Split(fwd, "\n")
		r.Header["X-Real-Ip"] = []string{real}
		for _, m := range ms {
			checkClientIP(t, m, r)
		}
	})
}

// checkClientIP checks one answer of the key extraction for FuzzClientIP.
func checkClientIP(t *testing.T, m *Middleware, r *http.Request) {
	t.Helper()
	p := m.c.clientIP(r)
	if !p.IsValid() {
		return
	}
	if want := map[bool]int{true: 32, false: 64}[p.Addr().Is4()]; p.Bits() != want || p != p.Masked() {
		t.Fatalf("clientIP = %s, want a masked /%d", p, want)
	}
	if peer := front.ParseHost(r.RemoteAddr); peer.IsValid() && !m.c.id.Trusted(peer) {
		if want, _ := peer.Prefix(p.Bits()); p != want {
			t.Fatalf("untrusted peer %s: clientIP = %s, want %s", r.RemoteAddr, p, want)
		}
	}
}

func TestSeconds(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 0}, {-time.Hour, 0}, {1, 1}, {time.Second, 1}, {time.Second + 1, 2},
		{math.MaxInt64, math.MaxInt64 / int64(time.Second)},
	} {
		if got := seconds(tt.d); got != tt.want {
			t.Errorf("seconds(%v) = %d, want %d", tt.d, got, tt.want)
		}
		if got := ceilSecond(tt.d); got < 0 {
			t.Errorf("ceilSecond(%v) = %v, negative", tt.d, got)
		}
	}
}

// clientIP returns the address of the client that sent r, as its group
// prefix (see front.Identity): what clientKey's key is made of.
func (c *core) clientIP(r *http.Request) netip.Prefix {
	return c.id.ClientOf(front.ParseHost(r.RemoteAddr), func() []string { return r.Header.Values(c.forwarded) })
}

// TestPolicyKeysCountedOnce checks that the keys of a table two policies
// share (the caller key's policy and keyless, which requests without a
// caller key take instead) are reported once: the keys gauges of a
// Middleware add up to the keys its tables hold.
func TestPolicyKeysCountedOnce(t *testing.T) {
	m := mustNew(t, Config{Rate: limits.Limit{Events: 10, Period: time.Hour}, CallerKey: HeaderKey("X-Key")})
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
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

// TestConfigFields checks Config against the fields every front end's
// Config has (front.ConfigFields), whose docs here are the reference for
// grpclimit's too, as grpclimit checks its own: a field added to one front
// end and not to the other, or typed otherwise, fails one of them, and so
// does a shared variable LoadEnv does not read into its field.
func TestConfigFields(t *testing.T) {
	if err := front.CheckFrontEnd(func(lookup func(string) (string, bool)) (any, error) {
		c := new(Config)
		return c, c.LoadEnv("", lookup)
	}, "InFlightStatus", "Headers", "Deny"); err != nil {
		t.Error(err)
	}
}
