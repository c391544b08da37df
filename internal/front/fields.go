package front

// This file lists the fields that every front end's Config has, so that
// each front end's tests check its Config against one list: a field added
// to one front end and not to the other, or typed otherwise, fails them.
// The meaning of these fields is written once, on httplimit.Config; the
// other front ends' docs say what their protocol changes and link there.

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"time"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/adaptive"
)

// ConfigField is a field that every front end's Config has.
type ConfigField struct {
	Name string
	// Type is the field's type, the same in every front end, or nil for a
	// field typed by the protocol: a function of the protocol's request
	// whose one result is of type Returns, or, with Returns nil too, a
	// type of the front end's own named Own, of Type's kind (Kind).
	Type, Returns reflect.Type
	Own           string
	Kind          reflect.Kind
	// Env is the environment variable that sets the field (Env.Common
	// reads it), if any, and Sample a value of it that sets the field to
	// something other than its zero value.
	Env, Sample string
	// Zero says the variable may set a duration to 0, as for a wait that
	// 0 turns off; other durations must be positive.
	Zero bool
}

// ConfigFields are the fields every front end's Config has, in their
// order in httplimit.Config.
var ConfigFields = []ConfigField{
	{Name: "Exempt", Returns: reflect.TypeFor[bool]()},
	{Name: "MaxInFlight", Type: reflect.TypeFor[int](), Env: EnvMaxInFlight, Sample: "5"},
	{Name: "QueueWait", Type: reflect.TypeFor[time.Duration](), Env: EnvQueueWait, Sample: "5ms", Zero: true},
	{Name: "QueueAdapt", Type: reflect.TypeFor[time.Duration](), Env: EnvQueueAdapt, Sample: "100ms", Zero: true},
	{Name: "Adaptive", Type: reflect.TypeFor[*adaptive.Config](), Env: EnvAdaptive, Sample: "vegas"},
	{Name: "Gate", Type: reflect.TypeFor[*limits.Gate]()},
	{Name: "Controller", Type: reflect.TypeFor[*adaptive.Controller]()},
	{Name: "Priority", Returns: reflect.TypeFor[limits.Priority]()},
	{Name: "Timeout", Type: reflect.TypeFor[time.Duration](), Env: EnvTimeout, Sample: "5s"},
	{Name: "BusyRetryAfter", Type: reflect.TypeFor[time.Duration](), Env: EnvBusyRetryAfter, Sample: "2s"},
	{Name: "Rate", Type: reflect.TypeFor[limits.Limit](), Env: EnvRate, Sample: "100/min"},
	{Name: "Burst", Type: reflect.TypeFor[int](), Env: EnvBurst, Sample: "5"},
	{Name: "MaxKeys", Type: reflect.TypeFor[int](), Env: EnvMaxKeys, Sample: "5"},
	{Name: "Limiter", Type: reflect.TypeFor[limits.Limiter]()},
	{Name: "LimiterTimeout", Type: reflect.TypeFor[time.Duration](), Env: EnvLimiterTimeout, Sample: "100ms"},
	{Name: "Cost", Returns: reflect.TypeFor[int]()},
	{Name: "CallerKey", Returns: reflect.TypeFor[string]()},
	{Name: "AddressMultiplier", Type: reflect.TypeFor[int](), Env: EnvAddressMultiplier, Sample: "5"},
	{Name: "CallerLimiter", Type: reflect.TypeFor[limits.Limiter]()},
	{Name: "TrustedProxies", Type: reflect.TypeFor[[]netip.Prefix](), Env: EnvTrustedProxies, Sample: "10.0.0.0/8"},
	{Name: "ForwardedHeader", Type: reflect.TypeFor[string](), Env: EnvForwardedHeader, Sample: "forwarded"},
	{Name: "IPv4Prefix", Type: reflect.TypeFor[int]()},
	{Name: "IPv6Prefix", Type: reflect.TypeFor[int]()},
	{Name: "MaxInFlightPerClient", Type: reflect.TypeFor[int](), Env: EnvMaxInFlightPerClient, Sample: "5"},
	{Name: "OnLimiterError", Own: "ErrorPolicy", Kind: reflect.Uint8, Env: EnvOnLimiterError, Sample: "fail_open"},
	{Name: "PolicyName", Type: reflect.TypeFor[string](), Env: EnvPolicyName, Sample: "p"},
	{Name: "Logger", Type: reflect.TypeFor[*slog.Logger]()},
}

// CheckConfig checks a front end's Config type against ConfigFields: it
// must have each of them, typed as listed, and no other field but those
// named in own, the fields of its protocol alone. The error names every
// field at fault.
func CheckConfig(cfg reflect.Type, own ...string) error {
	var errs []error
	listed := map[string]bool{}
	for _, f := range ConfigFields {
		listed[f.Name] = true
		sf, ok := cfg.FieldByName(f.Name)
		if !ok {
			errs = append(errs, fmt.Errorf("%v has no field %s, which every front end's Config has", cfg, f.Name))
			continue
		}
		if err := f.check(sf.Type); err != nil {
			errs = append(errs, fmt.Errorf("%v.%s: %w", cfg, f.Name, err))
		}
	}
	for i := range cfg.NumField() {
		name := cfg.Field(i).Name
		switch {
		case listed[name] && slices.Contains(own, name):
			errs = append(errs, fmt.Errorf("%v.%s is said to be the front end's own, but every front end has it", cfg, name))
		case !listed[name] && !slices.Contains(own, name):
			errs = append(errs, fmt.Errorf("%v.%s is neither a field of every front end (front.ConfigFields) nor one of the front end's own", cfg, name))
		}
	}
	for _, name := range own {
		if _, ok := cfg.FieldByName(name); !ok {
			errs = append(errs, fmt.Errorf("%v has no field %s of its own", cfg, name))
		}
	}
	return errors.Join(errs...)
}

// check reports whether t is the type f says.
func (f ConfigField) check(t reflect.Type) error {
	switch {
	case f.Type != nil:
		if t != f.Type {
			return fmt.Errorf("type %v, want %v", t, f.Type)
		}
	case f.Returns != nil:
		if t.Kind() != reflect.Func || t.NumOut() != 1 || t.Out(0) != f.Returns {
			return fmt.Errorf("type %v, want a function returning %v", t, f.Returns)
		}
	default:
		if t.Name() != f.Own || t.Kind() != f.Kind {
			return fmt.Errorf("type %v, want a %v named %s", t, f.Kind, f.Own)
		}
	}
	return nil
}

// CheckFrontEnd checks a front end's Config against ConfigFields, as
// CheckConfig does with own, and its LoadEnv: load must return a new
// Config, by pointer, and what its LoadEnv, called with lookup, returns;
// for each field with a variable, that variable alone set to its sample
// must set the field. The error names every field and variable at fault.
func CheckFrontEnd(load func(lookup func(string) (string, bool)) (any, error), own ...string) error {
	zero, _ := load(func(string) (string, bool) { return "", false })
	errs := []error{CheckConfig(reflect.TypeOf(zero).Elem(), own...)}
	for _, f := range ConfigFields {
		if f.Env == "" {
			continue
		}
		cfg, err := load(func(name string) (string, bool) { return f.Sample, name == f.Env })
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%s: %w", f.Env, f.Sample, err))
			continue
		}
		if reflect.ValueOf(cfg).Elem().FieldByName(f.Name).IsZero() {
			errs = append(errs, fmt.Errorf("%s=%s leaves %T.%s unset", f.Env, f.Sample, cfg, f.Name))
		}
	}
	return errors.Join(errs...)
}
