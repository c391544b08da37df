package front

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/limitsgo/limits"
)

type req struct{ key string }

func layers(t *testing.T) (addr, caller *limits.GCRA, ls []*Layer[req]) {
	addr, caller = limits.NewGCRA(3, time.Hour), limits.NewGCRA(1, time.Hour)
	ra, _ := NewRate("address", addr, 0)
	rc, _ := NewRate("default", caller, 0)
	ls = []*Layer[req]{
		{Rate: ra, Kind: ByAddress},
		{Rate: rc, Kind: ByCaller, Key: func(r req) string { return r.key }},
		{Rate: rc.Named("keyless"), Kind: Keyless},
	}
	return addr, caller, ls
}

func TestAdmitAllOrNothing(t *testing.T) {
	addr, caller, ls := layers(t)
	var counts Counts
	a := &Admission{Counts: &counts}
	ctx := context.Background()
	charges, ref := Admit(ctx, a, req{"k1"}, "a:192.0.2.1/32", ls, nil)
	if ref != nil || len(charges) != 2 || charges[1].Key != CallerBucket("k1") {
		t.Fatalf("first request: %+v, %+v", charges, ref)
	}
	// The caller key is spent: refused, and the address charge given back.
	_, ref = Admit(ctx, a, req{"k1"}, "a:192.0.2.1/32", ls, nil)
	if ref == nil || ref.Reason != ReasonRateLimited || ref.Rate.Name != "default" || ref.Key != CallerBucket("k1") {
		t.Fatalf("second request: %+v", ref)
	}
	if p := addr.Peek("a:192.0.2.1/32"); p.Remaining != 2 {
		t.Errorf("address bucket after a refusal by the caller key: %+v, want 2 left", p)
	}
	// Without a key: the keyless bucket, keyed by the address.
	charges, ref = Admit(ctx, a, req{}, "a:192.0.2.1/32", ls, nil)
	if ref != nil || charges[1].Key != "n:a:192.0.2.1/32" || charges[1].Rate.Name != "keyless" {
		t.Fatalf("keyless request: %+v, %+v", charges, ref)
	}
	if caller.Peek("n:a:192.0.2.1/32").Remaining != 0 {
		t.Error("the keyless bucket was not charged")
	}
	// Earlier charges passed in are given back on a refusal too: only the
	// first request's charge is left.
	_, ref = Admit(ctx, a, req{}, "a:192.0.2.1/32", ls, charges)
	if ref == nil || addr.Peek("a:192.0.2.1/32").Remaining != 2 || caller.Peek("n:a:192.0.2.1/32").Remaining != 1 {
		t.Errorf("a refusal did not give back the charges it was handed: %+v, %+v", ref, addr.Peek("a:192.0.2.1/32"))
	}
	if counts.RateLimited.Load() != 2 || ls[0].Counts.Allowed.Load() != 4 {
		t.Errorf("counts: %d rate limited, address allowed %d", counts.RateLimited.Load(), ls[0].Counts.Allowed.Load())
	}
}

func TestAdmitFailures(t *testing.T) {
	broken := &slowOrBroken{}
	r, _ := NewRate("shared", broken, time.Second)
	ls := []*Layer[req]{{Rate: r}}
	var counts Counts
	var logged []string
	a := &Admission{Counts: &counts, OnError: func(_ context.Context, _ any, what, _ string, err error) {
		logged = append(logged, what+": "+err.Error())
	}}
	if _, ref := Admit(context.Background(), a, req{}, "a:x", ls, nil); ref == nil || ref.Reason != ReasonLimiterError || ref.Err == nil {
		t.Errorf("fail closed: %+v", ref)
	}
	a.FailOpen = true
	if charges, ref := Admit(context.Background(), a, req{}, "a:x", ls, nil); ref != nil || len(charges) != 0 {
		t.Errorf("fail open: %+v, %+v", charges, ref)
	}
	if counts.LimiterError.Load() != 2 || len(logged) != 1 {
		t.Errorf("%d limiter errors counted, logged %q", counts.LimiterError.Load(), logged)
	}
}

type slowOrBroken struct{}

func (slowOrBroken) Take(context.Context, string, int) (limits.Decision, error) {
	return limits.Decision{}, errors.New("down")
}
func (slowOrBroken) Refund(context.Context, string, limits.Decision) error { return nil }

func TestIdentity(t *testing.T) {
	id := Identity{Proxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, IPv4Bits: 24, IPv6Bits: 48}
	for _, tt := range []struct {
		peer string
		fwd  []string
		want string
	}{
		{"192.0.2.7:1", nil, "a:192.0.2.0/24"},
		{"192.0.2.7:1", []string{"203.0.113.1"}, "a:192.0.2.0/24"}, // not a trusted proxy
		{"10.1.1.1:1", []string{"198.51.100.9, 203.0.113.1, 10.2.2.2"}, "a:203.0.113.0/24"},
		{"[2001:db8:1:2::9]:1", nil, "a:2001:db8:1::/48"},
		{"garbage", nil, "a:invalid"},
	} {
		if got := id.Key(tt.peer, func() []string { return tt.fwd }); got != tt.want {
			t.Errorf("Key(%q, %q) = %q, want %q", tt.peer, tt.fwd, got, tt.want)
		}
	}
	fwd := Identity{Proxies: id.Proxies, IPv4Bits: 32, IPv6Bits: 64, Forwarded: true}
	if got := fwd.Key("10.0.0.1:1", func() []string { return []string{`for="[2001:db8:cafe::17]:4711";proto=http`} }); got != "a:2001:db8:cafe::/64" {
		t.Errorf("Forwarded: %q", got)
	}
	if p, ok := ParsePrefix("192.0.2.1"); !ok || p.String() != "192.0.2.1/32" {
		t.Errorf("ParsePrefix of an address: %v, %v", p, ok)
	}
	if _, ok := ParsePrefix("nope"); ok {
		t.Error("ParsePrefix accepted nonsense")
	}
}
