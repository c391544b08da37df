package front

// This file reads the environment variables that configure a front end, so
// that every front end reads the variables it shares under the same names
// and with the same rules.

import (
	"fmt"
	"net/netip"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
)

// Names of the environment variables the front ends share, with the
// prefix "LIMITS_", which a front end's LoadEnv may replace.
const (
	EnvRate                 = "LIMITS_RATE"
	EnvBurst                = "LIMITS_BURST"
	EnvMaxKeys              = "LIMITS_MAX_KEYS"
	EnvMaxInFlight          = "LIMITS_MAX_INFLIGHT"
	EnvQueueWait            = "LIMITS_QUEUE_WAIT"
	EnvQueueAdapt           = "LIMITS_QUEUE_ADAPT"
	EnvAdaptive             = "LIMITS_ADAPTIVE"
	EnvAdaptiveMin          = "LIMITS_ADAPTIVE_MIN"
	EnvTimeout              = "LIMITS_TIMEOUT"
	EnvBusyRetryAfter       = "LIMITS_BUSY_RETRY_AFTER"
	EnvLimiterTimeout       = "LIMITS_LIMITER_TIMEOUT"
	EnvAddressMultiplier    = "LIMITS_ADDRESS_MULTIPLIER"
	EnvMaxInFlightPerClient = "LIMITS_MAX_INFLIGHT_PER_CLIENT"
	EnvTrustedProxies       = "LIMITS_TRUSTED_PROXIES"
	EnvForwardedHeader      = "LIMITS_FORWARDED_HEADER"
	EnvOnLimiterError       = "LIMITS_ON_LIMITER_ERROR"
	EnvPolicyName           = "LIMITS_POLICY_NAME"
)

// Common reads the variables every front end reads (those of
// ConfigFields) into the fields of cfg, a front end's Config, addressable,
// in the order of ConfigFields; forwarded are the values its
// ForwardedHeader may take, as its protocol spells them. The front end
// reads the variables of its own after. The fields must be as
// ConfigFields says (CheckConfig), or Common panics.
func (e *Env) Common(cfg reflect.Value, forwarded []string) {
	for _, f := range ConfigFields {
		if f.Env == "" {
			continue
		}
		v := cfg.FieldByName(f.Name)
		switch p := v.Addr().Interface().(type) {
		case *int:
			e.Integer(f.Env, p)
		case *time.Duration:
			e.Duration(f.Env, p, f.Zero)
		case *limits.Limit:
			e.Limit(f.Env, p)
		case **adaptive.Config:
			e.Adaptive(f.Env, EnvAdaptiveMin, p)
		case *[]netip.Prefix:
			e.Prefixes(f.Env, p)
		case *string:
			if f.Name == "ForwardedHeader" {
				e.Choice(f.Env, forwarded, func(i int) { *p = forwarded[i] })
			} else {
				e.String(f.Env, p)
			}
		default: // OnLimiterError, of the front end's own type
			e.Choice(f.Env, []string{"fail_closed", "fail_open"}, func(i int) { v.SetUint(uint64(i)) })
		}
	}
}

// Env reads the variables of one prefix into a configuration, keeping the
// first error, which names the variable read. Variables that are not set
// leave their fields alone; once an error is kept, nothing more is read.
type Env struct {
	// Err is the first error.
	Err error

	pkg    string
	prefix string
	lookup func(string) (string, bool)
}

// NewEnv returns an Env for package pkg (the prefix of its errors) that
// reads variables with lookup (os.LookupEnv if nil), with prefix in place
// of "LIMITS_" in their names ("" keeps it).
func NewEnv(pkg, prefix string, lookup func(string) (string, bool)) *Env {
	if prefix == "" {
		prefix = "LIMITS_"
	}
	if lookup == nil {
		lookup = os.LookupEnv
	}
	return &Env{pkg: pkg, prefix: prefix, lookup: lookup}
}

// Get returns the value, trimmed, of the variable named name for the
// prefix "LIMITS_", the name actually read, and whether it is set (false
// too once an error is kept).
func (e *Env) Get(name string) (v, read string, ok bool) {
	read = e.prefix + strings.TrimPrefix(name, "LIMITS_")
	v, ok = e.lookup(read)
	return strings.TrimSpace(v), read, ok && e.Err == nil
}

// Fail keeps the error of a variable read whose value v is not what was
// wanted, unless an error is kept already.
func (e *Env) Fail(read, v, want string) {
	if e.Err == nil {
		e.Err = fmt.Errorf("%s: %s=%q: want %s", e.pkg, read, v, want)
	}
}

// Integer reads an integer >= 1.
func (e *Env) Integer(name string, dst *int) {
	if v, read, ok := e.Get(name); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			e.Fail(read, v, "an integer >= 1")
			return
		}
		*dst = n
	}
}

// Duration reads a duration > 0, or >= 0 if zero is allowed.
func (e *Env) Duration(name string, dst *time.Duration, zero bool) {
	if v, read, ok := e.Get(name); ok {
		d, err := time.ParseDuration(v)
		switch {
		case zero && (err != nil || d < 0):
			e.Fail(read, v, "a duration >= 0, such as 10ms")
		case !zero && (err != nil || d <= 0):
			e.Fail(read, v, "a duration > 0, such as 10s")
		default:
			*dst = d
		}
	}
}

// Limit reads a limit as limits.ParseLimit does.
func (e *Env) Limit(name string, dst *limits.Limit) {
	if v, read, ok := e.Get(name); ok {
		l, err := limits.ParseLimit(v)
		if err != nil {
			e.Err = fmt.Errorf("%s: %s: %w", e.pkg, read, err)
			return
		}
		*dst = l
	}
}

// Choice reads one of choices, case-insensitively, and passes its index
// to set.
func (e *Env) Choice(name string, choices []string, set func(i int)) {
	if v, read, ok := e.Get(name); ok {
		for i, c := range choices {
			if strings.EqualFold(v, c) {
				set(i)
				return
			}
		}
		e.Fail(read, v, "one of "+strings.Join(choices, ", "))
	}
}

// Prefixes reads a comma-separated list of network prefixes or addresses,
// replacing *dst.
func (e *Env) Prefixes(name string, dst *[]netip.Prefix) {
	v, read, ok := e.Get(name)
	if !ok {
		return
	}
	var out []netip.Prefix
	for s := range strings.SplitSeq(v, ",") {
		p, ok := ParsePrefix(strings.TrimSpace(s))
		if !ok {
			e.Err = fmt.Errorf("%s: %s=%q: %q is neither a prefix nor an address", e.pkg, read, v, strings.TrimSpace(s))
			return
		}
		out = append(out, p)
	}
	*dst = out
}

// String reads any value.
func (e *Env) String(name string, dst *string) {
	if v, _, ok := e.Get(name); ok {
		*dst = v
	}
}

// Adaptive reads an adaptive gate's law from the variable named name
// (gradient, vegas, aimd, or off, which sets *dst to nil), keeping the
// rest of *dst, and its floor from the variable named minName, which needs
// an adaptive gate, configured or read.
func (e *Env) Adaptive(name, minName string, dst **adaptive.Config) {
	laws := []string{"off", "gradient", "vegas", "aimd"}
	e.Choice(name, laws, func(i int) {
		if i == 0 {
			*dst = nil
			return
		}
		c := new(adaptive.Config)
		if *dst != nil {
			*c = **dst
		}
		c.Law = [...]adaptive.Law{nil, adaptive.Gradient{}, adaptive.Vegas{}, adaptive.AIMD{}}[i]
		switch {
		case i == 3:
			c.ProbeEvery = -1 // AIMD reads no baseline
		case c.ProbeEvery < 0:
			c.ProbeEvery = 0 // Gradient and Vegas need one: the default
		}
		*dst = c
	})
	if v, read, ok := e.Get(minName); ok && *dst == nil {
		e.Err = fmt.Errorf("%s: %s=%q needs an adaptive gate: set %s to a law (gradient, vegas or aimd)", e.pkg, read, v, e.prefix+strings.TrimPrefix(name, "LIMITS_"))
		return
	}
	var lo int
	e.Integer(minName, &lo)
	if lo > 0 && *dst != nil {
		c := **dst
		c.Min = lo
		*dst = &c
	}
}
