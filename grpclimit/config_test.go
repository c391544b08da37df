package grpclimit

import (
	"encoding/json"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/httplimit"
	"github.com/limitsgo/limits/internal/front"
)

func TestNewErrors(t *testing.T) {
	rate := limits.Limit{Events: 10, Period: time.Second}
	for _, tt := range []struct {
		cfg  Config
		want string // in the error
	}{
		{Config{MaxInFlight: -1}, "MaxInFlight"},
		{Config{QueueWait: -1}, "QueueWait"},
		{Config{Timeout: -1}, "Timeout"},
		{Config{BusyRetryAfter: -1}, "BusyRetryAfter"},
		{Config{Rate: rate, Burst: -1}, "Burst"},
		{Config{MaxKeys: -1}, "MaxKeys"},
		{Config{LimiterTimeout: -1}, "LimiterTimeout"},
		{Config{AddressMultiplier: -1}, "AddressMultiplier"},
		{Config{MaxInFlightPerClient: -1}, "MaxInFlightPerClient"},
		{Config{MaxStreamsPerClient: -1}, "MaxStreamsPerClient"},
		{Config{Rate: limits.Limit{Events: 0, Period: time.Second}}, "Rate"},
		{Config{Rate: limits.Limit{Events: 1}}, "Rate"},
		{Config{IPv4Prefix: 33}, "prefix lengths"},
		{Config{IPv6Prefix: -1}, "prefix lengths"},
		{Config{ForwardedHeader: "x-client-ip"}, "ForwardedHeader"},
		{Config{OnLimiterError: 2}, "OnLimiterError"},
		{Config{Rate: rate, PolicyName: "naïve"}, "PolicyName"},
		{Config{CallerKey: MetadataKey("authorization")}, "CallerKey needs Rate or CallerLimiter"},
		{Config{LimitMessages: true, MaxInFlight: 1}, "LimitMessages"},
		{Config{Rate: limits.Limit{Events: 1 << 62, Period: time.Hour}, CallerKey: MetadataKey("k")}, "overflows"},
	} {
		_, err := New(tt.cfg)
		if err == nil || !strings.HasPrefix(err.Error(), "grpclimit: ") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v, want an error naming %s", tt.cfg, err, tt.want)
		}
	}
	// The first bad field in Config's order is named, every time.
	cfg := Config{MaxInFlight: -1, QueueWait: -1, MaxStreamsPerClient: -1}
	for range 20 {
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "MaxInFlight") {
			t.Fatalf("New with several bad fields: %v", err)
		}
	}
	if _, err := New(Config{}); err != nil {
		t.Errorf("the zero Config: %v", err)
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
		"LIMITS_GRPC_FORWARDED_HEADER":        "X-Real-IP",
		"LIMITS_GRPC_ON_LIMITER_ERROR":        "fail_open",
		"LIMITS_GRPC_POLICY_NAME":             "grpc",
		"LIMITS_GRPC_MAX_INFLIGHT_PER_CLIENT": "4",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	c := Config{QueueWait: time.Millisecond, MaxKeys: 7}
	if err := c.LoadEnv("LIMITS_GRPC_", lookup); err != nil {
		t.Fatal(err)
	}
	want := Config{
		Rate: limits.Limit{Events: 100, Period: time.Minute}, Burst: 20, MaxKeys: 7, MaxInFlight: 64, Timeout: 5 * time.Second,
		MaxStreamsPerClient: 8, MaxInFlightPerClient: 4, ForwardedHeader: "x-real-ip", OnLimiterError: FailOpen, PolicyName: "grpc",
	}
	if c.Rate != want.Rate || c.Burst != want.Burst || c.MaxKeys != want.MaxKeys || c.MaxInFlight != want.MaxInFlight ||
		c.QueueWait != 0 || c.Timeout != want.Timeout || c.MaxStreamsPerClient != want.MaxStreamsPerClient ||
		c.MaxInFlightPerClient != want.MaxInFlightPerClient || c.ForwardedHeader != want.ForwardedHeader ||
		c.OnLimiterError != want.OnLimiterError || c.PolicyName != want.PolicyName ||
		!slices.Equal(c.TrustedProxies, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.1/32")}) {
		t.Errorf("LoadEnv: %+v", c)
	}
	if _, err := New(c); err != nil {
		t.Errorf("New of the loaded Config: %v", err)
	}
	for k, v := range map[string]string{
		EnvRate: "0/min", EnvMaxStreamsPerClient: "-1", EnvTimeout: "0", EnvForwardedHeader: "x-client-ip", EnvTrustedProxies: "10.0.0.0/8,nope",
	} {
		var c Config
		err := c.LoadEnv("", func(name string) (string, bool) { return v, name == k })
		if err == nil || !strings.HasPrefix(err.Error(), "grpclimit: "+k) {
			t.Errorf("%s=%q: %v, want an error naming the variable", k, v, err)
		}
	}
}

// TestShared checks that the names grpclimit spells out are those the
// front ends share.
func TestShared(t *testing.T) {
	for _, p := range [][2]string{
		{ReasonRateLimited, front.ReasonRateLimited},
		{ReasonServerBusy, front.ReasonServerBusy},
		{ReasonRequestTimeout, front.ReasonRequestTimeout},
		{ReasonLimiterError, front.ReasonLimiterError},
		{ReasonTableFull, front.ReasonTableFull},
		{ReasonCostAboveBurst, front.ReasonCostAboveBurst},
		{ReasonInvalidCost, front.ReasonInvalidCost},
		{ReasonConcurrencyLimited, front.ReasonConcurrencyLimited},
		{ReasonConcurrencyTableFull, front.ReasonConcurrencyTableFull},
		{EnvRate, front.EnvRate},
		{EnvBurst, front.EnvBurst},
		{EnvMaxKeys, front.EnvMaxKeys},
		{EnvMaxInFlight, front.EnvMaxInFlight},
		{EnvQueueWait, front.EnvQueueWait},
		{EnvTimeout, front.EnvTimeout},
		{EnvBusyRetryAfter, front.EnvBusyRetryAfter},
		{EnvLimiterTimeout, front.EnvLimiterTimeout},
		{EnvAddressMultiplier, front.EnvAddressMultiplier},
		{EnvMaxInFlightPerClient, front.EnvMaxInFlightPerClient},
		{EnvTrustedProxies, front.EnvTrustedProxies},
		{EnvForwardedHeader, front.EnvForwardedHeader},
		{EnvOnLimiterError, front.EnvOnLimiterError},
		{EnvPolicyName, front.EnvPolicyName},
		{KeylessPolicy, front.KeylessPolicy},
	} {
		if p[0] != p[1] {
			t.Errorf("%q, shared %q", p[0], p[1])
		}
	}
	if DefaultMaxKeys != front.DefaultMaxKeys || DefaultAddressMultiplier != front.DefaultAddressMultiplier {
		t.Error("defaults differ from the shared ones")
	}
	if FailClosed != ErrorPolicy(httplimit.FailClosed) || FailOpen != ErrorPolicy(httplimit.FailOpen) {
		t.Error("ErrorPolicy values differ from httplimit's")
	}
}

// TestStatsShape checks that Stats marshals to the JSON of
// httplimit.Stats, field for field, so that one collector reads both.
func TestStatsShape(t *testing.T) {
	it := mustNew(t, Config{MaxInFlight: 1, Rate: limits.Limit{Events: 1, Period: time.Second}, CallerKey: MetadataKey("k")})
	m, err := httplimit.New(httplimit.Config{MaxInFlight: 1, Rate: limits.Limit{Events: 1, Period: time.Second}, CallerKey: httplimit.HeaderKey("k")})
	if err != nil {
		t.Fatal(err)
	}
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
	got, want := shape(it.Stats()), shape(m.Stats())
	if !slices.Equal(got, want) {
		t.Errorf("Stats JSON keys\n got  %q\n want %q", got, want)
	}
	if b, _ := json.Marshal(mustNew(t, Config{}).Stats()); strings.Contains(string(b), "gate") || strings.Contains(string(b), "policies") {
		t.Errorf("Stats without a gate or policies: %s", b)
	}
	pols := it.Stats().Policies
	if len(pols) != 3 || pols[0].Name != "address" || pols[1].Name != "default" || pols[2].Name != "keyless" {
		t.Errorf("policies %+v", pols)
	}
}

// TestConfigFields checks Config against the fields every front end's
// Config has (front.ConfigFields, documented in full on httplimit.Config),
// as httplimit checks its own: a field added to one front end and not to
// the other, or typed otherwise, fails one of them, and so does a shared
// variable LoadEnv does not read into its field.
func TestConfigFields(t *testing.T) {
	if err := front.CheckFrontEnd(func(lookup func(string) (string, bool)) (any, error) {
		c := new(Config)
		return c, c.LoadEnv("", lookup)
	}, "MaxStreamsPerClient", "LimitMessages"); err != nil {
		t.Error(err)
	}
}
