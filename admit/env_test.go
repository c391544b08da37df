package admit_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/admit"
)

// lookupOf returns a lookup function of LoadEnv reading vars.
func lookupOf(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

// setenv sets the process's environment to vars for the test's LIMITS_
// and APP_ variables: every other one of theirs is unset until the test
// ends.
func setenv(t *testing.T, vars map[string]string) {
	t.Helper()
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "LIMITS_") || strings.HasPrefix(k, "APP_") {
			t.Setenv(k, "") // restored when the test ends
			os.Unsetenv(k)
		}
	}
	for k, v := range vars {
		t.Setenv(k, v)
	}
}

var loginPolicy = admit.Policy{Name: "login", Routes: []string{"POST /login"}, Rate: limits.Limit{Events: 5, Period: time.Minute}}

// TestLoadEnvUnknownVariable checks that a variable under the prefix that
// LoadEnv does not read is an error naming it, so that a misspelled
// variable never leaves a limit off, and that the error says what was
// meant where it can.
func TestLoadEnvUnknownVariable(t *testing.T) {
	for _, tt := range []struct {
		name, value, prefix, want string
	}{
		{"LIMITS_RTE", "100/min", "", "did you mean LIMITS_RATE"},
		{"LIMITS_RATES", "100/min", "", "did you mean LIMITS_RATE"},
		{"LIMITS_MAX_IN_FLIGHT", "64", "", "did you mean LIMITS_MAX_INFLIGHT"},
		{"LIMITS_LOGN_RATE", "5/min", "", "did you mean LIMITS_LOGIN_RATE"},
		{"LIMITS_login_RATE", "5/min", "", "did you mean LIMITS_LOGIN_RATE"},
		{"LIMITS_SIGNUP_RATE", "5/min", "", `no policy's name maps to SIGNUP`},
		{"LIMITS_LOGIN_ROUTES", "/login", "", "Policy.Routes has no variable"},
		{"LIMITS_TIERS", "pro", "", "Config.Tiers has no variable"},
		{"LIMITS_TRUSTED_KEYS", "true", "", "Config.TrustedKeys has no variable"},
		{"LIMITS_FAIL_OPEN", "true", "", "LIMITS_ON_LIMITER_ERROR"},
		{"LIMITS_RESERVE_SHEDDABLE", "4", "", "LIMITS_RESERVE_SHEDDABLE"},
		{"LIMITS_", "1", "", "LIMITS_"},
		{"APP_RTE", "100/min", "APP_", "did you mean APP_RATE"},
		// Another configuration's variables are not under LIMITS_GRPC_.
		{"LIMITS_GRPC_RTE", "100/min", "LIMITS_GRPC_", "did you mean LIMITS_GRPC_RATE"},
	} {
		setenv(t, map[string]string{tt.name: tt.value, "LIMITS_RATE": "10/s"})
		c := admit.Config{Policies: []admit.Policy{loginPolicy}}
		err := c.LoadEnv(tt.prefix, nil)
		if err == nil || !strings.Contains(err.Error(), tt.name) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s=%s: LoadEnv(%q) = %v, want an error naming the variable with %q", tt.name, tt.value, tt.prefix, err, tt.want)
		}
		err = c.LoadEnviron(tt.prefix, []string{tt.name + "=" + tt.value, "LIMITS_RATE=10/s"})
		if err == nil || !strings.Contains(err.Error(), tt.name) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s=%s: LoadEnviron(%q) = %v, want an error naming the variable with %q", tt.name, tt.value, tt.prefix, err, tt.want)
		}
		if c.Rate != (limits.Limit{}) {
			t.Errorf("%s=%s: LoadEnv failed, yet read LIMITS_RATE", tt.name, tt.value)
		}
	}
	// Each unknown variable is named.
	var c admit.Config
	err := c.LoadEnviron("", []string{"LIMITS_RTE=1/s", "LIMITS_BRUST=3", "OTHER_RTE=1"})
	if err == nil || !strings.Contains(err.Error(), "LIMITS_RTE") || !strings.Contains(err.Error(), "LIMITS_BRUST") || strings.Contains(err.Error(), "OTHER_RTE") {
		t.Errorf("LoadEnviron = %v, want an error naming LIMITS_RTE and LIMITS_BRUST alone", err)
	}
}

// TestLoadEnviron checks that LoadEnviron reads the variables of a list
// as LoadEnv reads the process's, the last of a name's winning, and
// checks them as it does.
func TestLoadEnviron(t *testing.T) {
	c := admit.Config{Policies: []admit.Policy{loginPolicy}}
	err := c.LoadEnviron("APP_", []string{"APP_RATE=1/s", "APP_LOGIN_RATE=1/min", "APP_RATE= 2/s ", "APP_GRPC_RATE=oops", "LIMITS_RTE=1", "APP_NOTHING=1"})
	if err == nil || !strings.Contains(err.Error(), "APP_NOTHING") {
		t.Errorf("LoadEnviron with APP_NOTHING = %v, want an error naming it", err)
	}
	// An entry without "=" is no variable.
	err = c.LoadEnviron("APP_", []string{"APP_RATE=1/s", "APP_LOGIN_RATE=1/min", "APP_RATE= 2/s ", "APP_GRPC_RATE=oops", "LIMITS_RTE=1", "APP_NOTHING"})
	if err != nil || c.Rate != (limits.Limit{Events: 2, Period: time.Second}) || c.Policies[0].Rate != (limits.Limit{Events: 1, Period: time.Minute}) {
		t.Errorf("LoadEnviron = %v, read %+v", err, c)
	}
}

// TestLoadEnvOtherVariables checks that LoadEnv with the default prefix
// accepts the variables of the library's other configurations, which a
// process may set beside its own.
func TestLoadEnvOtherVariables(t *testing.T) {
	setenv(t, map[string]string{
		"LIMITS_RATE": "10/s", "LIMITS_LOGIN_RATE": "2/min",
		"LIMITS_GRPC_RATE": "5/s", "LIMITS_GRPC_LOGIN_RATE": "1/min", "LIMITS_HTTP_QUEUE_WAIT": "5ms",
		"LIMITS_GATE_MAX_INFLIGHT": "64", "LIMITS_GATE_RESERVE_CRITICAL": "12",
		"LIMITSTEST_QUICK": "1",
	})
	c := admit.Config{Policies: []admit.Policy{loginPolicy}}
	if err := c.LoadEnv("", nil); err != nil {
		t.Fatal(err)
	}
	if c.Rate != (limits.Limit{Events: 10, Period: time.Second}) || c.Policies[0].Rate != (limits.Limit{Events: 2, Period: time.Minute}) || c.MaxInFlight != 0 {
		t.Errorf("LoadEnv read %+v", c)
	}
	var g admit.Config
	if err := g.LoadEnv("LIMITS_GATE_", nil); err != nil || g.MaxInFlight != 64 || g.Reserve[limits.PriorityCritical] != 12 {
		t.Errorf("LoadEnv(LIMITS_GATE_) = %v, read %+v", err, g)
	}
}

// TestLoadEnvPolicyNames checks that two policies, or a policy and
// another configuration, whose variables would have the same names are
// an error naming them.
func TestLoadEnvPolicyNames(t *testing.T) {
	l := limits.Limit{Events: 1, Period: time.Second}
	for _, tt := range []struct {
		names []string
		want  string
	}{
		{[]string{"log-in", "log_in"}, `"log-in" and "log_in"`},
		{[]string{"login", "Login"}, `"login" and "Login"`},
		{[]string{"grpc"}, `"grpc"`},
		{[]string{"gate"}, `"gate"`},
	} {
		c := admit.Config{}
		for _, n := range tt.names {
			c.Policies = append(c.Policies, admit.Policy{Name: n, Rate: l})
		}
		err := c.LoadEnv("", lookupOf(nil))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("policies %q: LoadEnv = %v, want an error with %s", tt.names, err, tt.want)
		}
	}
}

// TestLoadEnvFields checks the variables of Shadow, Tier, IPv4Prefix,
// IPv6Prefix, and a policy's Quota and Location, and that the Config read
// is one New accepts.
func TestLoadEnvFields(t *testing.T) {
	vars := map[string]string{
		"LIMITS_RATE": "10/s", "LIMITS_SHADOW": "login, default", "LIMITS_TIER": "X-Plan",
		"LIMITS_IPV4_PREFIX": "24", "LIMITS_IPV6_PREFIX": "48",
		"LIMITS_EXPORTS_QUOTA": "100/day", "LIMITS_EXPORTS_LOCATION": "UTC",
	}
	c := admit.Config{Policies: []admit.Policy{loginPolicy, {Name: "exports", Routes: []string{"/export"}, Quota: "10/day"}}}
	if err := c.LoadEnv("", lookupOf(vars)); err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.Shadow, ",") != "login,default" || c.Tier != "X-Plan" || c.IPv4Prefix != 24 || c.IPv6Prefix != 48 ||
		c.Policies[1].Quota != "100/day" || c.Policies[1].Location != "UTC" {
		t.Errorf("LoadEnv read %+v", c)
	}
	mustNew(t, c)
	for name, bad := range map[string]string{
		"LIMITS_IPV4_PREFIX": "33", "LIMITS_IPV6_PREFIX": "0", "LIMITS_TIER": " ",
		"LIMITS_EXPORTS_QUOTA": "100/min", "LIMITS_EXPORTS_LOCATION": "Mars/Olympus_Mons",
	} {
		c := admit.Config{Policies: []admit.Policy{{Name: "exports", Quota: "10/day"}}}
		if err := c.LoadEnv("", lookupOf(map[string]string{name: bad})); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s=%q: LoadEnv = %v, want an error naming the variable", name, bad, err)
		}
	}
}

// TestLoadEnvHeaders checks that LIMITS_HEADERS takes the values of
// Config.Headers as New does, in lower case.
func TestLoadEnvHeaders(t *testing.T) {
	for _, v := range []string{"ietf", "ietf_legacy", "legacy", "none"} {
		var c admit.Config
		if err := c.LoadEnv("", lookupOf(map[string]string{"LIMITS_HEADERS": v})); err != nil || c.Headers != v {
			t.Errorf("LIMITS_HEADERS=%s: %v, Headers %q", v, err, c.Headers)
		}
		mustNew(t, c)
	}
	for _, v := range []string{"IETF", "Legacy", "all"} {
		var c admit.Config
		if err := c.LoadEnv("", lookupOf(map[string]string{"LIMITS_HEADERS": v})); err == nil || !strings.Contains(err.Error(), "LIMITS_HEADERS") {
			t.Errorf("LIMITS_HEADERS=%s: LoadEnv = %v, Headers %q; want an error, as New gives for Headers %[1]q", v, err, c.Headers)
		}
		if _, err := admit.New(admit.Config{Headers: v}); err == nil {
			t.Errorf("New with Headers %q: no error", v)
		}
	}
}

// TestLoadEnvCopy checks that LoadEnv on a copy of a Config leaves the
// original, whose slices and maps the copy shares, as it was; and that an
// error leaves the Config as it was.
func TestLoadEnvCopy(t *testing.T) {
	base := admit.Config{MaxInFlight: 8, Reserve: map[limits.Priority]int{limits.PriorityCritical: 2}, Policies: []admit.Policy{loginPolicy}}
	c := base
	vars := map[string]string{"LIMITS_LOGIN_RATE": "1/h", "LIMITS_LOGIN_BURST": "3", "LIMITS_RESERVE_CRITICAL": "4", "LIMITS_RESERVE_DEFAULT": "1"}
	if err := c.LoadEnv("", lookupOf(vars)); err != nil {
		t.Fatal(err)
	}
	if c.Policies[0].Rate != (limits.Limit{Events: 1, Period: time.Hour}) || c.Policies[0].Burst != 3 || c.Reserve[limits.PriorityCritical] != 4 || len(c.Reserve) != 2 {
		t.Errorf("the copy read %+v", c)
	}
	if base.Policies[0].Rate != loginPolicy.Rate || base.Policies[0].Burst != 0 ||
		base.Reserve[limits.PriorityCritical] != 2 || len(base.Reserve) != 1 {
		t.Errorf("LoadEnv on a copy changed the original: %+v", base)
	}

	c = base
	if err := c.LoadEnv("", lookupOf(map[string]string{"LIMITS_RATE": "1/s", "LIMITS_LOGIN_BURST": "2", "LIMITS_RESERVE_CRITICAL": "3", "LIMITS_TIMEOUT": "soon"})); err == nil {
		t.Fatal("LIMITS_TIMEOUT=soon: no error")
	}
	if c.Rate != (limits.Limit{}) || c.Policies[0].Burst != 0 || c.Reserve[limits.PriorityCritical] != 2 {
		t.Errorf("LoadEnv failed, yet changed the Config: %+v", c)
	}
}
