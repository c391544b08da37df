package admit

// This file reads a Config from environment variables: every capacity and
// rate limit of a service can be set where it is deployed, under one set
// of names whatever its protocol.

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
)

// LoadEnv sets the fields of c named by the environment variables below
// that are set, read with lookup (os.LookupEnv if nil). prefix replaces
// "LIMITS_" in their names ("" keeps it), so that two configurations of
// one process can read their own. Unset variables leave their fields
// alone. Values are trimmed of spaces. A value that cannot be parsed, or
// that would switch a limit off (a zero rate, a count below 1), is an
// error naming the variable read: a service should refuse to start rather
// than run without the limits it was given. On an error, c is left as it
// was. LoadEnv writes to no slice or map that c shares with another
// Config: after c := base, c.LoadEnv leaves base as it was.
//
//	LIMITS_EXEMPT                   Exempt: comma-separated route patterns
//	LIMITS_MAX_INFLIGHT             MaxInFlight: an integer >= 1
//	LIMITS_RESERVE_CRITICAL         Reserve[limits.PriorityCritical]: an integer >= 0
//	LIMITS_RESERVE_DEFAULT          Reserve[limits.PriorityDefault]: an integer >= 0
//	LIMITS_QUEUE_WAIT               QueueWait: a duration such as "5ms", or 0
//	LIMITS_QUEUE_ADAPT              QueueAdapt: a duration such as "100ms", or 0
//	LIMITS_ADAPTIVE                 Adaptive's law: gradient, vegas, aimd, or off for none
//	LIMITS_ADAPTIVE_MIN             Adaptive.Min: an integer >= 1; needs an adaptive gate
//	LIMITS_TIMEOUT                  Timeout: a duration such as "10s"
//	LIMITS_BUSY_RETRY_AFTER         BusyRetryAfter: a duration such as "2s"
//	LIMITS_RATE                     Rate, as limits.Limit.UnmarshalText reads it: "100/min"
//	LIMITS_BURST                    Burst: an integer >= 1
//	LIMITS_MAX_KEYS                 MaxKeys: an integer >= 1
//	LIMITS_LIMITER_TIMEOUT          LimiterTimeout: a duration such as "100ms"
//	LIMITS_CALLER_KEY               CallerKey: a field's name, such as X-API-Key
//	LIMITS_ADDRESS_MULTIPLIER       AddressMultiplier: an integer >= 1
//	LIMITS_POLICY_NAME              PolicyName
//	LIMITS_TIER                     Tier: a field's name, such as X-Plan
//	LIMITS_TRUSTED_PROXIES          TrustedProxies: comma-separated prefixes or addresses
//	LIMITS_FORWARDED_HEADER         ForwardedHeader: X-Forwarded-For, Forwarded or X-Real-IP
//	LIMITS_IPV4_PREFIX              IPv4Prefix: an integer from 1 to 32
//	LIMITS_IPV6_PREFIX              IPv6Prefix: an integer from 1 to 128
//	LIMITS_MAX_INFLIGHT_PER_CLIENT  MaxInFlightPerClient: an integer >= 1
//	LIMITS_MAX_STREAMS_PER_CLIENT   MaxStreamsPerClient: an integer >= 1
//	LIMITS_ON_LIMITER_ERROR         FailOpen: fail_closed or fail_open
//	LIMITS_HEADERS                  Headers: ietf, ietf_legacy, legacy or none
//	LIMITS_SHADOW                   Shadow: comma-separated policy names and "gate", or empty for none
//
// The values of LIMITS_ADAPTIVE, LIMITS_FORWARDED_HEADER and
// LIMITS_ON_LIMITER_ERROR are read in any case; those of LIMITS_HEADERS,
// as New reads Headers, in lower case only.
//
// For each policy already in Policies, LIMITS_<NAME>_RATE, _BURST,
// _MAX_KEYS, _QUOTA and _LOCATION set its Rate, Burst, MaxKeys, Quota
// (such as "100/day") and Location (such as "Europe/Paris"), NAME being
// the policy's name in upper case with every character but ASCII letters
// and digits as "_": LIMITS_LOGIN_RATE for the policy "login",
// LIMITS_LOG_IN_RATE for "log-in". Two policies with one NAME ("log-in"
// and "log_in", "login" and "Login") are an error, as is a policy whose
// variables would fall under another configuration's prefix (see below),
// such as "grpc".
// No variable adds a policy, or sets the fields not listed here (Routes,
// Key, Tiers, Limiter, TrustedKeys, ...), which come from JSON
// (UnmarshalJSON) or code.
//
// With a nil lookup, every variable of the process whose name starts with
// prefix must be one that LoadEnv reads, or another configuration's:
// any other, such as LIMITS_RTE, LIMITS_LOGN_RATE (with a policy "login")
// or LIMITS_login_RATE, is an error naming it, so that a misspelled
// variable never leaves a limit off. Another configuration's variable is
// one whose name is prefix followed by GRPC_, HTTP_ or GATE_, which the
// library's documentation gives the configurations of a process's other
// front ends and of a shared gate (LoadEnv("LIMITS_GRPC_", nil)). The
// configurations of one process read
// prefixes that do not nest ("LIMITS_", "APP_"), or nest this way only.
// A lookup function cannot list its variables: LoadEnv with one reads the
// names it asks for and checks no others; LoadEnviron checks a list of
// variables as LoadEnv checks the process's.
func (c *Config) LoadEnv(prefix string, lookup func(string) (string, bool)) error {
	if lookup != nil {
		return c.loadEnv(prefix, lookup, nil)
	}
	var names []string
	for _, kv := range os.Environ() {
		if k, _, ok := strings.Cut(kv, "="); ok {
			names = append(names, k)
		}
	}
	return c.loadEnv(prefix, os.LookupEnv, names)
}

// LoadEnviron is LoadEnv reading environ, a list of variables in the form
// "key=value" of os.Environ (the last of a key's wins), in place of the
// process's environment: every variable of environ under prefix must be
// one that LoadEnv reads, or another configuration's.
func (c *Config) LoadEnviron(prefix string, environ []string) error {
	vars := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	return c.loadEnv(prefix, lookup, slices.Collect(maps.Keys(vars)))
}

// envSubPrefixes are the prefixes, after LoadEnv's own, of the variables
// of other configurations of a process, which LoadEnv neither reads nor
// refuses (see LoadEnv).
var envSubPrefixes = []string{"GRPC_", "HTTP_", "GATE_"}

// policyVars are the names, after the policy's, of a policy's variables.
var policyVars = []string{"RATE", "BURST", "MAX_KEYS", "QUOTA", "LOCATION"}

// loadEnv is LoadEnv with variables read by lookup; names, if not nil, are
// the names of every variable lookup knows.
func (c *Config) loadEnv(prefix string, lookup func(string) (string, bool), names []string) error {
	e := env{prefix: prefix, lookup: lookup, read: map[string]bool{}}
	if e.prefix == "" {
		e.prefix = "LIMITS_"
	}
	n := *c
	n.Policies = slices.Clone(c.Policies)
	n.Reserve = maps.Clone(c.Reserve)
	e.list("EXEMPT", &n.Exempt)
	e.integer("MAX_INFLIGHT", &n.MaxInFlight, 1, math.MaxInt)
	for _, p := range []limits.Priority{limits.PriorityCritical, limits.PriorityDefault} {
		r := -1
		e.integer("RESERVE_"+strings.ToUpper(p.String()), &r, 0, math.MaxInt)
		if r >= 0 {
			if n.Reserve == nil {
				n.Reserve = map[limits.Priority]int{}
			}
			n.Reserve[p] = r
		}
	}
	e.duration("QUEUE_WAIT", &n.QueueWait, true)
	e.duration("QUEUE_ADAPT", &n.QueueAdapt, true)
	e.adaptive(&n.Adaptive)
	e.duration("TIMEOUT", &n.Timeout, false)
	e.duration("BUSY_RETRY_AFTER", &n.BusyRetryAfter, false)
	e.limit("RATE", &n.Rate)
	e.integer("BURST", &n.Burst, 1, math.MaxInt)
	e.integer("MAX_KEYS", &n.MaxKeys, 1, math.MaxInt)
	e.duration("LIMITER_TIMEOUT", &n.LimiterTimeout, false)
	e.text("CALLER_KEY", &n.CallerKey)
	e.integer("ADDRESS_MULTIPLIER", &n.AddressMultiplier, 1, math.MaxInt)
	e.text("POLICY_NAME", &n.PolicyName)
	e.text("TIER", &n.Tier)
	e.prefixes("TRUSTED_PROXIES", &n.TrustedProxies)
	e.choice("FORWARDED_HEADER", []string{"X-Forwarded-For", "Forwarded", "X-Real-IP"}, true, func(s string) { n.ForwardedHeader = s })
	e.integer("IPV4_PREFIX", &n.IPv4Prefix, 1, 32)
	e.integer("IPV6_PREFIX", &n.IPv6Prefix, 1, 128)
	e.integer("MAX_INFLIGHT_PER_CLIENT", &n.MaxInFlightPerClient, 1, math.MaxInt)
	e.integer("MAX_STREAMS_PER_CLIENT", &n.MaxStreamsPerClient, 1, math.MaxInt)
	e.choice("ON_LIMITER_ERROR", []string{"fail_closed", "fail_open"}, true, func(s string) { n.FailOpen = s == "fail_open" })
	e.choice("HEADERS", headerModes[:], false, func(s string) { n.Headers = s })
	e.list("SHADOW", &n.Shadow)
	e.policies(n.Policies)
	if e.err == nil && names != nil {
		e.err = e.unknown(names, n.Policies)
	}
	if e.err != nil {
		return e.err
	}
	*c = n
	return nil
}

// policies reads the variables of each policy of ps.
func (e *env) policies(ps []Policy) {
	names := map[string]string{} // a policy's name by its NAME
	for i := range ps {
		p := &ps[i]
		name := envName(p.Name)
		if other, ok := names[name]; ok {
			e.setErr(fmt.Errorf("admit: policies %q and %q would both read %s%s_RATE and the rest: give them names that differ in more than case and punctuation", other, p.Name, e.prefix, name))
			return
		}
		names[name] = p.Name
		for _, sub := range envSubPrefixes {
			if strings.HasPrefix(name+"_", sub) {
				e.setErr(fmt.Errorf("admit: policy %q would read %s%s_RATE and the rest, under %s%s, the prefix of another configuration: rename the policy", p.Name, e.prefix, name, e.prefix, sub))
				return
			}
		}
		for _, v := range policyVars {
			if e.read[name+"_"+v] {
				e.setErr(fmt.Errorf("admit: policy %q would read %s%s_%s, which sets another field", p.Name, e.prefix, name, v))
				return
			}
			e.policyRead = append(e.policyRead, name+"_"+v)
		}
		name += "_"
		e.limit(name+"RATE", &p.Rate)
		e.integer(name+"BURST", &p.Burst, 1, math.MaxInt)
		e.integer(name+"MAX_KEYS", &p.MaxKeys, 1, math.MaxInt)
		e.quota(name+"QUOTA", &p.Quota)
		e.location(name+"LOCATION", &p.Location)
	}
}

// envName returns a policy's name as it appears in variables: upper case,
// every character but ASCII letters and digits as "_".
func envName(name string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, name)
}

// unknown returns an error naming each variable of names under the
// prefix that was not read and is not another configuration's, with what
// it may have meant, or nil if there is none.
func (e *env) unknown(names []string, ps []Policy) error {
	slices.Sort(names)
	var errs []error
	for _, full := range names {
		name, ok := strings.CutPrefix(full, e.prefix)
		if !ok || e.read[name] ||
			slices.ContainsFunc(envSubPrefixes, func(sub string) bool { return strings.HasPrefix(name, sub) }) {
			continue
		}
		errs = append(errs, fmt.Errorf("admit: %s is not a variable LoadEnv reads%s", full, e.hint(name, ps)))
	}
	return errors.Join(errs...)
}

// envRenamed maps the fields of Config whose variables are not named as
// their JSON to the variables LoadEnv reads for them.
var envRenamed = map[string]string{
	"MAX_IN_FLIGHT":            "MAX_INFLIGHT",
	"MAX_IN_FLIGHT_PER_CLIENT": "MAX_INFLIGHT_PER_CLIENT",
	"RESERVE":                  "RESERVE_CRITICAL or RESERVE_DEFAULT",
	"FAIL_OPEN":                "ON_LIMITER_ERROR",
}

// hint says what the variable named prefix and name, which LoadEnv does
// not read, may have meant, for its error.
func (e *env) hint(name string, ps []Policy) string {
	if v, ok := envRenamed[name]; ok {
		return fmt.Sprintf(": did you mean %s%s?", e.prefix, strings.ReplaceAll(v, " or ", " or "+e.prefix))
	}
	if h := fieldHint("Config", reflect.TypeFor[Config](), name); h != "" {
		return h
	}
	for _, p := range ps {
		if field, ok := strings.CutPrefix(name, envName(p.Name)+"_"); ok && !slices.Contains(policyVars, field) {
			if h := fieldHint("Policy", reflect.TypeFor[Policy](), field); h != "" {
				return h
			}
		}
	}
	for _, v := range policyVars {
		x, ok := strings.CutSuffix(name, "_"+v)
		if !ok || x == "" {
			continue
		}
		if len(ps) == 0 {
			return ": no policy is configured, and only the policies in Policies have variables"
		}
		var have []string
		for _, p := range ps {
			have = append(have, envName(p.Name))
		}
		h := fmt.Sprintf(": no policy's name maps to %s (the policies' map to %s)", x, strings.Join(have, ", "))
		if near := nearest(name, e.policyRead); near != "" {
			h += fmt.Sprintf("; did you mean %s%s?", e.prefix, near)
		}
		return h
	}
	if strings.HasPrefix(name, "RESERVE_") {
		return fmt.Sprintf(": places are kept for critical and default requests only, by %sRESERVE_CRITICAL and %[1]sRESERVE_DEFAULT", e.prefix)
	}
	if near := nearest(name, slices.Collect(maps.Keys(e.read))); near != "" {
		return fmt.Sprintf(": did you mean %s%s?", e.prefix, near)
	}
	return ""
}

// fieldHint says, for the error of a variable named name (after the prefix
// and the policy's name), that the field of the struct type t (named
// typeName) it would be named after has no variable, or "" if there is no
// such field.
func fieldHint(typeName string, t reflect.Type, name string) string {
	for i := range t.NumField() {
		f := t.Field(i)
		switch {
		case !f.IsExported() || name == "":
		case strings.ToUpper(jsonName(f)) == name:
			return fmt.Sprintf(": %s.%s has no variable; set it in JSON (Config.UnmarshalJSON) or in code", typeName, f.Name)
		case jsonName(f) == "" && strings.ToUpper(snake(f.Name)) == name:
			return fmt.Sprintf(": %s.%s is set in code only", typeName, f.Name)
		}
	}
	return ""
}

// nearest returns the name of names that name differs least from, case
// aside, if that is little enough to be a typo, or "".
func nearest(name string, names []string) string {
	most := 2 // edits
	if len(name) < 6 {
		most = 1
	}
	best, dist := "", 0
	for _, r := range names {
		if d := distance(strings.ToUpper(name), r); d <= most && (best == "" || d < dist || d == dist && r < best) {
			best, dist = r, d
		}
	}
	return best
}

// distance returns the Levenshtein distance between a and b, in bytes.
func distance(a, b string) int {
	row := make([]int, len(b)+1)
	for j := range row {
		row[j] = j
	}
	for i := range len(a) {
		prev := row[0]
		row[0] = i + 1
		for j := range len(b) {
			cost := 1
			if a[i] == b[j] {
				cost = 0
			}
			prev, row[j+1] = row[j+1], min(row[j+1]+1, row[j]+1, prev+cost)
		}
	}
	return row[len(b)]
}

// env reads the variables of one prefix, keeping the first error, which
// names the variable read; once an error is kept, nothing more is read.
type env struct {
	prefix string
	lookup func(string) (string, bool)
	read   map[string]bool // the names asked for, after the prefix
	// policyRead are the names of the policies' variables, after the
	// prefix.
	policyRead []string
	err        error
}

// get returns the value, trimmed, of the variable named prefix and name,
// the name read, and whether it is set.
func (e *env) get(name string) (v, read string, ok bool) {
	e.read[name] = true
	read = e.prefix + name
	v, ok = e.lookup(read)
	return strings.TrimSpace(v), read, ok && e.err == nil
}

// setErr keeps err unless an error is kept already.
func (e *env) setErr(err error) {
	if e.err == nil {
		e.err = err
	}
}

// fail keeps the error of a variable whose value v is not what was wanted.
func (e *env) fail(read, v, want string) {
	e.setErr(fmt.Errorf("admit: %s=%q: want %s", read, v, want))
}

// integer reads an integer from least to most.
func (e *env) integer(name string, dst *int, least, most int) {
	if v, read, ok := e.get(name); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < least || n > most {
			if most == math.MaxInt {
				e.fail(read, v, fmt.Sprintf("an integer >= %d", least))
			} else {
				e.fail(read, v, fmt.Sprintf("an integer from %d to %d", least, most))
			}
			return
		}
		*dst = n
	}
}

// duration reads a duration > 0, or >= 0 if zero is allowed.
func (e *env) duration(name string, dst *time.Duration, zero bool) {
	if v, read, ok := e.get(name); ok {
		d, err := time.ParseDuration(v)
		switch {
		case zero && (err != nil || d < 0):
			e.fail(read, v, "a duration >= 0, such as 10ms")
		case !zero && (err != nil || d <= 0):
			e.fail(read, v, "a duration > 0, such as 10s")
		default:
			*dst = d
		}
	}
}

// limit reads a limit as limits.Limit.UnmarshalText does.
func (e *env) limit(name string, dst *limits.Limit) {
	if v, read, ok := e.get(name); ok {
		var l limits.Limit
		if err := l.UnmarshalText([]byte(v)); err != nil {
			e.setErr(fmt.Errorf("admit: %s: %w", read, err))
			return
		}
		*dst = l
	}
}

// quota reads a calendar quota, as Policy.Quota has it: "100/day".
func (e *env) quota(name string, dst *string) {
	if v, read, ok := e.get(name); ok {
		if _, _, err := parseQuota(v); err != nil {
			e.setErr(fmt.Errorf("admit: %s: %w", read, err))
			return
		}
		*dst = v
	}
}

// location reads an IANA time zone, as Policy.Location has it.
func (e *env) location(name string, dst *string) {
	if v, read, ok := e.get(name); ok {
		if _, err := time.LoadLocation(v); err != nil || v == "" {
			e.fail(read, v, `a time zone such as "Europe/Paris"`)
			return
		}
		*dst = v
	}
}

// text reads any value that is not empty.
func (e *env) text(name string, dst *string) {
	if v, read, ok := e.get(name); ok {
		if v == "" {
			e.fail(read, v, "a value")
			return
		}
		*dst = v
	}
}

// list reads a comma-separated list, replacing *dst.
func (e *env) list(name string, dst *[]string) {
	if v, _, ok := e.get(name); ok {
		var out []string
		for s := range strings.SplitSeq(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
		*dst = out
	}
}

// choice reads one of choices, in any case if fold is set, and passes it
// to set, spelled as in choices.
func (e *env) choice(name string, choices []string, fold bool, set func(string)) {
	if v, read, ok := e.get(name); ok {
		for _, c := range choices {
			if v == c || fold && strings.EqualFold(v, c) {
				set(c)
				return
			}
		}
		e.fail(read, v, "one of "+strings.Join(choices, ", "))
	}
}

// prefixes reads a comma-separated list of network prefixes or addresses,
// replacing *dst.
func (e *env) prefixes(name string, dst *[]netip.Prefix) {
	v, read, ok := e.get(name)
	if !ok {
		return
	}
	var out []netip.Prefix
	for s := range strings.SplitSeq(v, ",") {
		p, ok := parsePrefix(strings.TrimSpace(s))
		if !ok {
			e.setErr(fmt.Errorf("admit: %s=%q: %q is neither a prefix nor an address", read, v, strings.TrimSpace(s)))
			return
		}
		out = append(out, p)
	}
	*dst = out
}

// adaptive reads an adaptive gate's law (gradient, vegas, aimd, or off,
// which sets *dst to nil), keeping the rest of *dst, and its floor, which
// needs an adaptive gate, configured or read.
func (e *env) adaptive(dst **adaptive.Config) {
	e.choice("ADAPTIVE", []string{"off", "gradient", "vegas", "aimd"}, true, func(s string) {
		if s == "off" {
			*dst = nil
			return
		}
		c := new(adaptive.Config)
		if *dst != nil {
			*c = **dst
		}
		setLaw(c, s)
		*dst = c
	})
	if v, read, ok := e.get("ADAPTIVE_MIN"); ok && *dst == nil {
		e.setErr(fmt.Errorf("admit: %s=%q needs an adaptive gate: set %sADAPTIVE to a law (gradient, vegas or aimd)", read, v, e.prefix))
		return
	}
	var lo int
	e.integer("ADAPTIVE_MIN", &lo, 1, math.MaxInt)
	if lo > 0 && *dst != nil {
		c := **dst
		c.Min = lo
		*dst = &c
	}
}

// setLaw sets c's law to the one named gradient, vegas or aimd, with the
// ProbeEvery it needs: AIMD reads no baseline, the others need one.
func setLaw(c *adaptive.Config, name string) {
	switch name {
	case "vegas":
		c.Law = adaptive.Vegas{}
	case "aimd":
		c.Law = adaptive.AIMD{}
		c.ProbeEvery = -1
		return
	default:
		c.Law = adaptive.Gradient{}
	}
	if c.ProbeEvery < 0 {
		c.ProbeEvery = 0
	}
}
