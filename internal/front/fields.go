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
}

// ConfigFields are the fields every front end's Config has, in their
// order in httplimit.Config.
var ConfigFields = []ConfigField{
	{Name: "Exempt", Returns: reflect.TypeFor[bool]()},
	{Name: "MaxInFlight", Type: reflect.TypeFor[int]()},
	{Name: "QueueWait", Type: reflect.TypeFor[time.Duration]()},
	{Name: "QueueAdapt", Type: reflect.TypeFor[time.Duration]()},
	{Name: "Adaptive", Type: reflect.TypeFor[*adaptive.Config]()},
	{Name: "Gate", Type: reflect.TypeFor[*limits.Gate]()},
	{Name: "Controller", Type: reflect.TypeFor[*adaptive.Controller]()},
	{Name: "Priority", Returns: reflect.TypeFor[limits.Priority]()},
	{Name: "Timeout", Type: reflect.TypeFor[time.Duration]()},
	{Name: "BusyRetryAfter", Type: reflect.TypeFor[time.Duration]()},
	{Name: "Rate", Type: reflect.TypeFor[limits.Limit]()},
	{Name: "Burst", Type: reflect.TypeFor[int]()},
	{Name: "MaxKeys", Type: reflect.TypeFor[int]()},
	{Name: "Limiter", Type: reflect.TypeFor[limits.Limiter]()},
	{Name: "LimiterTimeout", Type: reflect.TypeFor[time.Duration]()},
	{Name: "Cost", Returns: reflect.TypeFor[int]()},
	{Name: "CallerKey", Returns: reflect.TypeFor[string]()},
	{Name: "AddressMultiplier", Type: reflect.TypeFor[int]()},
	{Name: "CallerLimiter", Type: reflect.TypeFor[limits.Limiter]()},
	{Name: "TrustedProxies", Type: reflect.TypeFor[[]netip.Prefix]()},
	{Name: "ForwardedHeader", Type: reflect.TypeFor[string]()},
	{Name: "IPv4Prefix", Type: reflect.TypeFor[int]()},
	{Name: "IPv6Prefix", Type: reflect.TypeFor[int]()},
	{Name: "MaxInFlightPerClient", Type: reflect.TypeFor[int]()},
	{Name: "OnLimiterError", Own: "ErrorPolicy", Kind: reflect.Uint8},
	{Name: "PolicyName", Type: reflect.TypeFor[string]()},
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
