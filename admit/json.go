package admit

// This file reads a Config from JSON, strictly: a field the Config does
// not have is an error naming it, so that a typo in a file never
// silently leaves a limit off.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"time"
	"unicode"

	"github.com/limitsgo/limits/adaptive"
)

// UnmarshalJSON sets c from a JSON object, as a configuration file gives
// it: the fields' names are their JSON tags, in snake case
// ("max_in_flight", "policies"), those of Adaptive too ("probe_every");
// limits are strings as limits.Limit.UnmarshalText reads them ("100/min");
// durations are strings as time.ParseDuration reads them ("250ms"), or
// numbers of nanoseconds; TrustedProxies are prefixes or addresses;
// Reserve is keyed by class ("critical"); Adaptive.Law is "gradient",
// "vegas" or "aimd". A field c does not have, one set in code alone
// (Gate, Controller, Limiters, Logger), or a value of the wrong kind is an
// error naming the field by its path, such as "policies[1].rate". Fields
// the JSON leaves out keep their values.
//
//	{
//	  "max_in_flight": 512,
//	  "reserve": {"critical": 12},
//	  "rate": "100/min",
//	  "caller_key": "X-API-Key",
//	  "policies": [{"name": "login", "routes": ["POST /login"], "rate": "5/min"}]
//	}
func (c *Config) UnmarshalJSON(b []byte) error {
	if err := decode(reflect.ValueOf(c).Elem(), b, ""); err != nil {
		return fmt.Errorf("admit: %w", err)
	}
	return nil
}

var (
	durationType = reflect.TypeFor[time.Duration]()
	prefixType   = reflect.TypeFor[netip.Prefix]()
	adaptiveType = reflect.TypeFor[adaptive.Config]()
	textType     = reflect.TypeFor[interface{ UnmarshalText([]byte) error }]()
)

// decode sets v from the JSON b; path names v in errors.
func decode(v reflect.Value, b []byte, path string) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	where := func(err error) error {
		if path == "" {
			return err
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	t := v.Type()
	switch {
	case t == durationType:
		var s string
		if err := json.Unmarshal(b, &s); err == nil {
			d, err := time.ParseDuration(s)
			if err != nil {
				return where(fmt.Errorf("want a duration such as \"250ms\", got %q", s))
			}
			v.SetInt(int64(d))
			return nil
		}
		var n int64
		if err := json.Unmarshal(b, &n); err != nil {
			return where(fmt.Errorf("want a duration such as \"250ms\", got %s", b))
		}
		v.SetInt(n)
		return nil
	case t == prefixType:
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return where(fmt.Errorf("want a prefix or an address, got %s", b))
		}
		p, ok := parsePrefix(s)
		if !ok {
			return where(fmt.Errorf("%q is neither a prefix nor an address", s))
		}
		v.Set(reflect.ValueOf(p))
		return nil
	case t == adaptiveType:
		return decodeAdaptive(v, b, path)
	case reflect.PointerTo(t).Implements(textType) && t.Kind() != reflect.Map:
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return where(fmt.Errorf("want a string, got %s", b))
		}
		if err := v.Addr().Interface().(interface{ UnmarshalText([]byte) error }).UnmarshalText([]byte(s)); err != nil {
			return where(err)
		}
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		return decode(v.Elem(), b, path)
	case reflect.Struct:
		return decodeStruct(v, b, path, jsonName)
	case reflect.Slice:
		var items []json.RawMessage
		if err := json.Unmarshal(b, &items); err != nil {
			return where(fmt.Errorf("want a list, got %s", b))
		}
		s := reflect.MakeSlice(t, len(items), len(items))
		for i, item := range items {
			if err := decode(s.Index(i), item, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	case reflect.Map:
		var items map[string]json.RawMessage
		if err := json.Unmarshal(b, &items); err != nil {
			return where(fmt.Errorf("want an object, got %s", b))
		}
		m := reflect.MakeMapWithSize(t, len(items))
		for k, item := range items {
			key := reflect.New(t.Key()).Elem()
			if u, ok := key.Addr().Interface().(interface{ UnmarshalText([]byte) error }); ok {
				if err := u.UnmarshalText([]byte(k)); err != nil {
					return where(err)
				}
			} else if t.Key().Kind() == reflect.String {
				key.SetString(k)
			} else {
				return where(fmt.Errorf("keys of %v cannot be read", t.Key()))
			}
			val := reflect.New(t.Elem()).Elem()
			if err := decode(val, item, fmt.Sprintf("%s[%q]", path, k)); err != nil {
				return err
			}
			m.SetMapIndex(key, val)
		}
		v.Set(m)
		return nil
	}
	if err := json.Unmarshal(b, v.Addr().Interface()); err != nil {
		return where(fmt.Errorf("want a %v, got %s", t.Kind(), b))
	}
	return nil
}

// decodeStruct sets the fields of the struct v from the JSON object b, by
// the names name gives them; a field b names and v does not have is an
// error.
func decodeStruct(v reflect.Value, b []byte, path string, name func(reflect.StructField) string) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return fmt.Errorf("%s: want an object, got %s", strings.TrimPrefix(path, "."), b)
	}
	t := v.Type()
	index := map[string]int{}
	for i := range t.NumField() {
		if n := name(t.Field(i)); n != "" {
			index[n] = i
		}
	}
	for _, k := range sortedKeys(fields) {
		p := k
		if path != "" {
			p = path + "." + k
		}
		i, ok := index[k]
		if !ok {
			return fmt.Errorf("%s: no such field", p)
		}
		if err := decode(v.Field(i), fields[k], p); err != nil {
			return err
		}
	}
	return nil
}

// jsonName returns the name of a field in JSON: its tag's, "" for a field
// set in code alone (tagged "-") or unexported, or else its name in snake
// case.
func jsonName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	if tag, ok := f.Tag.Lookup("json"); ok {
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			return ""
		}
		if name != "" {
			return name
		}
	}
	return snake(f.Name)
}

// snake returns a Go name in snake case: ProbeEvery is probe_every.
func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// decodeAdaptive sets an adaptive.Config from JSON: its fields in snake
// case, and its law by name.
func decodeAdaptive(v reflect.Value, b []byte, path string) error {
	var law struct {
		Law *string `json:"law"`
	}
	json.Unmarshal(b, &law)
	name := func(f reflect.StructField) string {
		if f.Name == "Law" {
			return "" // read below, by name
		}
		return jsonName(f)
	}
	var rest map[string]json.RawMessage
	if err := json.Unmarshal(b, &rest); err != nil {
		return fmt.Errorf("%s: want an object, got %s", path, b)
	}
	delete(rest, "law")
	others, _ := json.Marshal(rest)
	if err := decodeStruct(v, others, path, name); err != nil {
		return err
	}
	if law.Law != nil {
		c := v.Addr().Interface().(*adaptive.Config)
		switch *law.Law {
		case "gradient", "vegas", "aimd":
			setLaw(c, *law.Law)
		default:
			return fmt.Errorf("%s.law: want gradient, vegas or aimd, got %q", path, *law.Law)
		}
	}
	return nil
}
