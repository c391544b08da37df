package front

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/limitsgo/limits"
)

func TestLayers(t *testing.T) {
	rate := limits.Limit{Events: 2, Period: time.Hour}
	key := func(r req) string { return r.key }

	ls, err := Layers(RateConfig{Rate: rate}, key, nil)
	if err != nil || len(ls) != 1 || ls[0].Name != DefaultPolicy || ls[0].Kind != ByAddress || ls[0].local == nil {
		t.Fatalf("Rate alone: %+v, %v", ls, err)
	}

	ls, err = Layers(RateConfig{Rate: rate, CallerKeyed: true, PolicyName: "api"}, key, func(req) int { return 1 })
	if err != nil || len(ls) != 3 {
		t.Fatalf("with a caller key: %+v, %v", ls, err)
	}
	for i, want := range []struct {
		name string
		kind KeyKind
	}{{AddressPolicy, ByAddress}, {"api", ByCaller}, {KeylessPolicy, Keyless}} {
		if ls[i].Name != want.name || ls[i].Kind != want.kind || ls[i].Cost == nil {
			t.Errorf("layer %d: %s kind %d, want %s kind %d", i, ls[i].Name, ls[i].Kind, want.name, want.kind)
		}
	}
	// The address bucket is scaled by the default multiplier; the caller
	// and keyless buckets share one limiter.
	if g := ls[0].local; g.Limit() != 2*DefaultAddressMultiplier || g.Burst() != 2*DefaultAddressMultiplier {
		t.Errorf("address bucket %d, burst %d", g.Limit(), g.Burst())
	}
	if ls[1].local != ls[2].local {
		t.Error("the keyless bucket does not share the caller key's limiter")
	}

	shared := &slow{}
	ls, err = Layers(RateConfig{Rate: rate, Limiter: shared, LimiterTimeout: time.Second}, key, nil)
	if err != nil || ls[0].Limiter != limits.Limiter(shared) || ls[0].Pre == nil || ls[0].Timeout != time.Second {
		t.Errorf("Rate and Limiter: %+v, %v", ls, err)
	}
	ls, err = Layers(RateConfig{Limiter: shared}, key, nil)
	if err != nil || ls[0].Pre != nil || ls[0].Timeout != DefaultLimiterTimeout {
		t.Errorf("Limiter alone: %+v, %v", ls, err)
	}
	if ls, err := Layers[req](RateConfig{}, key, nil); err != nil || len(ls) != 0 {
		t.Errorf("nothing: %+v, %v", ls, err)
	}

	for _, tt := range []struct {
		rc   RateConfig
		want string
	}{
		{RateConfig{Rate: rate, PolicyName: "a\nb"}, "PolicyName"},
		{RateConfig{Rate: limits.Limit{Events: -1, Period: time.Second}}, "Rate: "},
		{RateConfig{CallerKeyed: true}, "CallerKey needs Rate or CallerLimiter"},
		{RateConfig{Rate: limits.Limit{Events: 1 << 62, Period: time.Hour}, CallerKeyed: true}, "overflows"},
	} {
		if _, err := Layers(tt.rc, key, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Layers(%+v) = %v, want an error with %q", tt.rc, err, tt.want)
		}
	}
}

func TestBuildHelpers(t *testing.T) {
	if err := CheckNonNegative(Field{"A", 0}, Field{"B", -2}, Field{"C", -1}); err == nil || err.Error() != "B must not be negative, got -2" {
		t.Errorf("CheckNonNegative: %v", err)
	}
	if err := CheckNonNegative(Field{"A", 1}); err != nil {
		t.Errorf("CheckNonNegative of a positive value: %v", err)
	}
	id, err := NewIdentity([]netip.Prefix{netip.MustParsePrefix("10.1.2.3/8")}, 0, 0, true)
	if err != nil || id.IPv4Bits != 32 || id.IPv6Bits != 64 || !id.Forwarded || id.Proxies[0] != netip.MustParsePrefix("10.0.0.0/8") {
		t.Errorf("NewIdentity: %+v, %v", id, err)
	}
	for _, bits := range [][2]int{{33, 0}, {0, 129}, {-1, 0}} {
		if _, err := NewIdentity(nil, bits[0], bits[1], false); err == nil {
			t.Errorf("NewIdentity with prefix lengths %v: no error", bits)
		}
	}
	for _, tt := range []struct{ configured, timeout, want time.Duration }{
		{0, 0, DefaultLimiterTimeout},
		{0, 100 * time.Millisecond, 100 * time.Millisecond},
		{0, time.Hour, DefaultLimiterTimeout},
		{time.Second, 100 * time.Millisecond, time.Second},
	} {
		if got := LimiterBound(tt.configured, tt.timeout); got != tt.want {
			t.Errorf("LimiterBound(%v, %v) = %v, want %v", tt.configured, tt.timeout, got, tt.want)
		}
	}
}

func TestSnapshot(t *testing.T) {
	_, _, ls := layers(t)
	var n Counters
	a := &Admission{Counts: &n.Rates}
	n.Exempt.Add(1)
	for range 3 {
		Admit(context.Background(), a, req{"k"}, "a:x", ls, nil)
	}
	Admit(context.Background(), a, req{}, "a:x", ls, nil)
	if got := n.Load(); got != (Totals{Exempt: 1, RateLimited: 2}) {
		t.Errorf("Load: %+v", got)
	}
	got := PolicyTotalsOf(ls)
	// The caller key's table holds the key's bucket and the keyless one,
	// reported once, under the caller key's policy.
	const max = 1 << 20 // the GCRAs' default
	want := []PolicyTotals{
		{Name: "address", Allowed: 4, Keys: 1, MaxKeys: max},
		{Name: "default", Allowed: 1, RateLimited: 2, Keys: 2, MaxKeys: max},
		{Name: "keyless", Allowed: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("PolicyTotalsOf: %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("policy %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	// Two layers of one name add up in one entry.
	ls[2].Rate.Name = "default"
	if got := PolicyTotalsOf(ls); len(got) != 2 || got[1].Allowed != 2 {
		t.Errorf("layers sharing a name: %+v", got)
	}
	if h := KeyHash("a:192.0.2.1/32"); len(h) != 12 || h == KeyHash("a:192.0.2.2/32") {
		t.Errorf("KeyHash: %q", h)
	}
}

func TestEnv(t *testing.T) {
	vars := map[string]string{
		"APP_RATE": "5/s", "APP_BURST": "3", "APP_QUEUE_WAIT": "0", "APP_TIMEOUT": "2s",
		"APP_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.1", "APP_FORWARDED_HEADER": "forwarded", "APP_POLICY_NAME": " api ",
	}
	e := NewEnv("pkg", "APP_", func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	var (
		rate    limits.Limit
		burst   = 9
		keys    = 7
		wait    = time.Second
		timeout time.Duration
		proxies []netip.Prefix
		header  string
		name    string
	)
	e.Limit(EnvRate, &rate)
	e.Integer(EnvBurst, &burst)
	e.Integer(EnvMaxKeys, &keys)
	e.Duration(EnvQueueWait, &wait, true)
	e.Duration(EnvTimeout, &timeout, false)
	e.Prefixes(EnvTrustedProxies, &proxies)
	e.Choice(EnvForwardedHeader, []string{"x-forwarded-for", "Forwarded"}, func(i int) { header = []string{"xff", "fwd"}[i] })
	e.String(EnvPolicyName, &name)
	if e.Err != nil || rate != (limits.Limit{Events: 5, Period: time.Second}) || burst != 3 || keys != 7 || wait != 0 ||
		timeout != 2*time.Second || len(proxies) != 2 || proxies[1] != netip.MustParsePrefix("192.0.2.1/32") || header != "fwd" || name != "api" {
		t.Errorf("read: %v %v %d %d %v %v %v %q %q", e.Err, rate, burst, keys, wait, timeout, proxies, header, name)
	}
	for _, tt := range []struct {
		name, v string
		read    func(e *Env)
	}{
		{EnvBurst, "0", func(e *Env) { e.Integer(EnvBurst, new(int)) }},
		{EnvTimeout, "0", func(e *Env) { e.Duration(EnvTimeout, new(time.Duration), false) }},
		{EnvQueueWait, "-1s", func(e *Env) { e.Duration(EnvQueueWait, new(time.Duration), true) }},
		{EnvRate, "5", func(e *Env) { e.Limit(EnvRate, new(limits.Limit)) }},
		{EnvTrustedProxies, "10.0.0.0/8,x", func(e *Env) { e.Prefixes(EnvTrustedProxies, new([]netip.Prefix)) }},
		{EnvForwardedHeader, "via", func(e *Env) { e.Choice(EnvForwardedHeader, []string{"a"}, func(int) {}) }},
	} {
		e := NewEnv("pkg", "", func(k string) (string, bool) { return tt.v, k == tt.name })
		tt.read(e)
		if e.Err == nil || !strings.HasPrefix(e.Err.Error(), "pkg: "+tt.name) {
			t.Errorf("%s=%q: %v, want an error naming the variable", tt.name, tt.v, e.Err)
		}
		// Once an error is kept, nothing more is read.
		n := 5
		e.Integer(tt.name, &n)
		if n != 5 {
			t.Errorf("%s: read after an error", tt.name)
		}
	}
}

func TestKeyOf(t *testing.T) {
	id := Identity{Proxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, IPv4Bits: 24, IPv6Bits: 48}
	for _, tt := range []struct {
		peer string
		fwd  []string
	}{
		{"192.0.2.7", nil},
		{"192.0.2.7", []string{"203.0.113.1"}},
		{"10.1.1.1", []string{"198.51.100.9, 203.0.113.1, 10.2.2.2"}},
		{"10.1.1.1", []string{"garbage"}},
		{"2001:db8:1:2::9", nil},
		{"::ffff:192.0.2.7", nil},
		{"fe80::1%eth0", nil},
	} {
		fwd := func() []string { return tt.fwd }
		a := netip.MustParseAddr(tt.peer)
		if got, want := id.KeyOf(a, fwd), id.Key(tt.peer, fwd); got != want {
			t.Errorf("KeyOf(%s, %q) = %q, Key says %q", tt.peer, tt.fwd, got, want)
		}
	}
	if got := id.KeyOf(netip.Addr{}, nil); got != "a:invalid" {
		t.Errorf("KeyOf of the zero Addr: %q", got)
	}
}

// TestKeyIPv4Text checks that the key of a peer given as text is the key
// of its address parsed by ParseHost, where Key parses dotted IPv4 itself
// and copies its text rather than format it: whatever it accepts, it
// reads as net/netip does, and the text it copies is the address's own.
func TestKeyIPv4Text(t *testing.T) {
	fwd := func() []string { return []string{"203.0.113.9"} }
	for _, id := range []Identity{
		{IPv4Bits: 32, IPv6Bits: 64},
		{Proxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, IPv4Bits: 32, IPv6Bits: 64},
		{IPv4Bits: 24, IPv6Bits: 64},
	} {
		for _, peer := range []string{
			"192.0.2.7:1", "192.0.2.7", "0.0.0.0:0", "255.255.255.255:65535", "192.0.2.7:080",
			"[::ffff:192.0.2.7]:1", "::ffff:192.0.2.7", "10.1.1.1:1", "10.1.1.1",
			"01.2.3.4:1", "1.2.3.4:", "1.2.3.4:99999", "1.2.3.4:x", "1.2.3:4", "1.2.3.4.5:6", "[1.2.3.4]:5", ":1", "",
			"1.2.3.4:65535", "1.2.3.4:65536", "1.2.3.4:000080", "1.2.3.4:00080", "1.2.3.256:1", "1.2.3.4:-1", "1.2.3.4:+1",
			"1.2.3.4:1:2", "1.2.3.4 ", "1.2.3.4x", "1.2.3.1000", "1..3.4", ".1.2.3", "1.2.3.4.", "0.0.0.00", "192.0.2.7:1%eth0",
		} {
			got := id.Key(peer, fwd)
			if want := id.KeyOf(ParseHost(peer), fwd); got != want {
				t.Errorf("%v: Key(%q) = %q, want %q", id.Proxies, peer, got, want)
			}
		}
	}
	// Texts of digits, dots and colons, at random.
	rng := rand.New(rand.NewPCG(1, 2))
	id := Identity{IPv4Bits: 32, IPv6Bits: 64}
	for range 20000 {
		b := make([]byte, rng.IntN(22))
		for i := range b {
			b[i] = "0123456789..::"[rng.IntN(14)]
		}
		peer := string(b)
		if got, want := id.Key(peer, nil), id.KeyOf(ParseHost(peer), nil); got != want {
			t.Fatalf("Key(%q) = %q, want %q", peer, got, want)
		}
	}
}

// forgetful is a limiter that can forget a key, or fails to.
type forgetful struct {
	slow
	reset []string
	err   error
}

func (f *forgetful) Reset(_ context.Context, key string) error {
	f.reset = append(f.reset, key)
	return f.err
}

func TestReset(t *testing.T) {
	_, caller, ls := layers(t)
	ctx := context.Background()
	Admit(ctx, &Admission{Counts: new(Counts)}, req{}, "a:x", ls, nil)
	if caller.Peek("n:a:x").Remaining != 0 {
		t.Fatal("the keyless bucket was not charged")
	}
	if err := Reset(ctx, ls, "n:a:x"); err != nil || caller.Peek("n:a:x").Remaining != 1 {
		t.Errorf("Reset of a local GCRA: %v, %+v", err, caller.Peek("n:a:x"))
	}
	remote := &forgetful{err: errors.New("down")}
	r, _ := NewRate("shared", remote, time.Second)
	shared := []*Layer[req]{{Rate: r}, {Rate: r.Named("again")}}
	err := Reset(ctx, shared, "a:x")
	if err == nil || !strings.Contains(err.Error(), `"a:x" in policy "shared": down`) || len(remote.reset) != 1 {
		t.Errorf("Reset of a shared limiter that fails: %v, reset %q", err, remote.reset)
	}
}
