package grpclimit

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
	"github.com/limitsgo/limits/httplimit"
)

func TestNewErrors(t *testing.T) {
	rate := limits.Limit{Events: 10, Period: time.Second}
	for _, tt := range []struct {
		cfg  Config
		want string // in the error
	}{
		{Config{Limits: admit.Config{MaxInFlight: -1}}, "MaxInFlight"},
		{Config{Limits: admit.Config{QueueWait: -1}}, "QueueWait"},
		{Config{Limits: admit.Config{Timeout: -1}}, "Timeout"},
		{Config{Limits: admit.Config{BusyRetryAfter: -1}}, "BusyRetryAfter"},
		{Config{Limits: admit.Config{Rate: rate, Burst: -1}}, "Burst"},
		{Config{Limits: admit.Config{MaxKeys: -1}}, "MaxKeys"},
		{Config{Limits: admit.Config{LimiterTimeout: -1}}, "LimiterTimeout"},
		{Config{Limits: admit.Config{AddressMultiplier: -1}}, "AddressMultiplier"},
		{Config{Limits: admit.Config{MaxInFlightPerClient: -1}}, "MaxInFlightPerClient"},
		{Config{Limits: admit.Config{MaxStreamsPerClient: -1}}, "MaxStreamsPerClient"},
		{Config{Limits: admit.Config{Rate: limits.Limit{Events: 0, Period: time.Second}}}, "Rate"},
		{Config{Limits: admit.Config{Rate: limits.Limit{Events: 1}}}, "Rate"},
		{Config{Limits: admit.Config{IPv4Prefix: 33}}, "IPv4Prefix"},
		{Config{Limits: admit.Config{IPv6Prefix: -1}}, "IPv6Prefix"},
		{Config{Limits: admit.Config{ForwardedHeader: "x-client-ip"}}, "ForwardedHeader"},
		{Config{Limits: admit.Config{Headers: "bogus"}}, "Headers"},
		{Config{Limits: admit.Config{Rate: rate, PolicyName: "naïve"}}, "PolicyName"},
		{Config{Limits: admit.Config{CallerKey: "authorization"}}, "CallerKey needs Rate or CallerLimiter"},
		{Config{Limits: admit.Config{Limiter: "shared"}}, `no limiter named "shared"`},
		{Config{Limits: admit.Config{MaxInFlight: 1}, LimitMessages: true}, "LimitMessages"},
		{Config{Limits: admit.Config{Rate: limits.Limit{Events: 1 << 62, Period: time.Hour}, CallerKey: "k"}}, "overflows"},
		{Config{Limits: admit.Config{Exempt: []string{"/healthz"}}}, "Exempt[0]"},
	} {
		it, err := New(tt.cfg)
		if it != nil || err == nil || !strings.HasPrefix(err.Error(), "grpclimit: ") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tt.cfg, err, tt.want)
		}
	}
	// The first bad field in Config's order is named, every time.
	cfg := Config{Limits: admit.Config{MaxInFlight: -1, QueueWait: -1, MaxStreamsPerClient: -1}}
	for range 20 {
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "MaxInFlight") {
			t.Fatalf("New with several bad fields: %v", err)
		}
	}
	if _, err := New(Config{}); err != nil {
		t.Errorf("the zero Config: %v", err)
	}
	// LimitMessages with any rate policy.
	for _, l := range []admit.Config{
		{Rate: rate},
		{Limiters: named(&recorder{}), Limiter: "l"},
		{Policies: []admit.Policy{{Name: "chat", Routes: []string{methodChat}, Rate: rate}}},
	} {
		if _, err := New(Config{Limits: l, LimitMessages: true}); err != nil {
			t.Errorf("LimitMessages with %+v: %v", l, err)
		}
	}
}

func TestLoadEnv(t *testing.T) {
	env := map[string]string{
		"LIMITS_GRPC_RATE":                    "100/min",
		"LIMITS_GRPC_BURST":                   "20",
		"LIMITS_GRPC_MAX_INFLIGHT":            "64",
		"LIMITS_GRPC_QUEUE_WAIT":              "0",
		"LIMITS_GRPC_TIMEOUT":                 "5s",
		"LIMITS_GRPC_MAX_STREAMS_PER_CLIENT":  "8",
		"LIMITS_GRPC_TRUSTED_PROXIES":         "10.0.0.0/8, 192.0.2.1",
		"LIMITS_GRPC_FORWARDED_HEADER":        "x-real-ip",
		"LIMITS_GRPC_ON_LIMITER_ERROR":        "fail_open",
		"LIMITS_GRPC_POLICY_NAME":             "grpc",
		"LIMITS_GRPC_MAX_INFLIGHT_PER_CLIENT": "4",
		"LIMITS_GRPC_EXEMPT":                  "/grpc.reflection.v1.ServerReflection/, /test.Echo/Watch",
		"LIMITS_GRPC_LOGIN_RATE":              "5/h",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c := Config{Limits: admit.Config{QueueWait: time.Millisecond, MaxKeys: 7,
		Policies: []admit.Policy{{Name: "login", Routes: []string{methodSay}, Rate: limits.Limit{Events: 1, Period: time.Minute}}}}}
	if err := c.Limits.LoadEnv("LIMITS_GRPC_", lookup); err != nil {
		t.Fatal(err)
	}
	l := c.Limits
	if l.Rate != (limits.Limit{Events: 100, Period: time.Minute}) || l.Burst != 20 || l.MaxKeys != 7 || l.MaxInFlight != 64 ||
		l.QueueWait != 0 || l.Timeout != 5*time.Second || l.MaxStreamsPerClient != 8 || l.MaxInFlightPerClient != 4 ||
		l.ForwardedHeader != "X-Real-IP" || !l.FailOpen || l.PolicyName != "grpc" ||
		!slices.Equal(l.TrustedProxies, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.1/32")}) ||
		!slices.Equal(l.Exempt, []string{"/grpc.reflection.v1.ServerReflection/", methodWatch}) ||
		l.Policies[0].Rate != (limits.Limit{Events: 5, Period: time.Hour}) {
		t.Errorf("LoadEnv: %+v", l)
	}
	if _, err := New(c); err != nil {
		t.Errorf("New of the loaded Config: %v", err)
	}
	for k, v := range map[string]string{
		"LIMITS_RATE": "0/min", "LIMITS_MAX_STREAMS_PER_CLIENT": "-1", "LIMITS_TIMEOUT": "0",
		"LIMITS_FORWARDED_HEADER": "x-client-ip", "LIMITS_TRUSTED_PROXIES": "10.0.0.0/8,nope",
	} {
		var c Config
		err := c.Limits.LoadEnv("", func(name string) (string, bool) { return v, name == k })
		if err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%q: %v, want an error naming the variable", k, v, err)
		}
	}
	// A route read from the environment that is no gRPC method.
	var bad Config
	if err := bad.Limits.LoadEnv("", func(name string) (string, bool) { return "/healthz", name == "LIMITS_EXEMPT" }); err != nil {
		t.Fatal(err)
	}
	if _, err := New(bad); err == nil || !strings.Contains(err.Error(), "Exempt[0]") {
		t.Errorf("LIMITS_EXEMPT=/healthz: New = %v, want an error naming Exempt[0]", err)
	}
}

// TestStats checks that Stats says its protocol, and marshals to the JSON
// of httplimit's, key for key, so that one collector reads both.
func TestStats(t *testing.T) {
	cfg := admit.Config{MaxInFlight: 1, Rate: limits.Limit{Events: 1, Period: time.Second}, CallerKey: "k",
		Policies: []admit.Policy{{Name: "login", Routes: []string{methodSay}, Rate: limits.Limit{Events: 1, Period: time.Second}}}}
	it := mustNew(t, Config{Limits: cfg})
	hcfg := cfg
	hcfg.Policies = []admit.Policy{{Name: "login", Routes: []string{"/login"}, Rate: limits.Limit{Events: 1, Period: time.Second}}}
	m, err := httplimit.New(httplimit.Config{Limits: hcfg})
	if err != nil {
		t.Fatal(err)
	}
	m.Handler(http.NotFoundHandler()) // a Middleware in use
	shape := func(v any) []string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.Unmarshal(b, &m)
		var keys []string
		var walk func(prefix string, v any)
		walk = func(prefix string, v any) {
			switch v := v.(type) {
			case map[string]any:
				for _, k := range slices.Sorted(maps.Keys(v)) {
					keys = append(keys, prefix+k)
					walk(prefix+k+".", v[k])
				}
			case []any:
				for _, e := range v {
					walk(prefix, e)
				}
			}
		}
		walk("", m)
		return keys
	}
	s, hs := it.Stats(), m.Stats()
	if s.Protocol != "grpc" || hs.Protocol != "http" {
		t.Errorf("protocols %q and %q", s.Protocol, hs.Protocol)
	}
	if got, want := shape(s), shape(hs); !slices.Equal(got, want) {
		t.Errorf("Stats JSON keys\n got  %q\n want %q", got, want)
	}
	if b, _ := json.Marshal(mustNew(t, Config{}).Stats()); strings.Contains(string(b), "gate") || strings.Contains(string(b), "policies") || strings.Contains(string(b), "routes") {
		t.Errorf("Stats without a gate, policies or routes: %s", b)
	}
	pols := s.Policies
	if len(pols) != 4 || pols[0].Name != "address" || pols[1].Name != "default" || pols[2].Name != "keyless" || pols[3].Name != "login" {
		t.Errorf("policies %+v", pols)
	}
	if len(s.Routes) != 2 || s.Routes[0].Route != methodSay || s.Routes[1].Route != "other" {
		t.Errorf("routes %+v", s.Routes)
	}
}
