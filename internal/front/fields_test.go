package front

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestConfigFieldsCommon checks that the fields Setup takes are among
// those every front end's Config has, with the same types, but for the
// two that Setup takes as what the front end made of them.
func TestConfigFieldsCommon(t *testing.T) {
	made := map[string]bool{"CallerKeyed": true, "Forwarded": true}
	byName := map[string]ConfigField{}
	for _, f := range ConfigFields {
		if _, dup := byName[f.Name]; dup {
			t.Errorf("%s listed twice", f.Name)
		}
		byName[f.Name] = f
	}
	common := reflect.TypeFor[Common]()
	for i := range common.NumField() {
		sf := common.Field(i)
		if made[sf.Name] {
			continue
		}
		f, ok := byName[sf.Name]
		if !ok {
			t.Errorf("Common.%s is not in ConfigFields", sf.Name)
			continue
		}
		if err := f.check(sf.Type); err != nil {
			t.Errorf("Common.%s: %v", sf.Name, err)
		}
	}
}

// TestCheckConfig checks that CheckConfig finds a field missing, one
// typed otherwise, and one that is neither shared nor declared the front
// end's own.
func TestCheckConfig(t *testing.T) {
	// config returns a Config type with every field, each as replace
	// types it if it names it (nil: left out), and a field of its own.
	config := func(replace map[string]reflect.Type) reflect.Type {
		var fields []reflect.StructField
		for _, f := range ConfigFields {
			typ := f.Type
			switch {
			case f.Returns != nil:
				typ = reflect.FuncOf([]reflect.Type{reflect.TypeFor[string]()}, []reflect.Type{f.Returns}, false)
			case typ == nil:
				typ = reflect.TypeFor[ErrorPolicy]()
			}
			if r, ok := replace[f.Name]; ok {
				typ = r
			}
			if typ != nil {
				fields = append(fields, reflect.StructField{Name: f.Name, Type: typ})
			}
		}
		return reflect.StructOf(append(fields, reflect.StructField{Name: "Headers", Type: reflect.TypeFor[uint8]()}))
	}
	good := config(nil)
	if err := CheckConfig(good, "Headers"); err != nil {
		t.Fatalf("a Config with every field: %v", err)
	}
	for _, tt := range []struct {
		name string
		cfg  reflect.Type
		own  []string
		want string
	}{
		{"missing", config(map[string]reflect.Type{"Exempt": nil}), []string{"Headers"}, "no field Exempt"},
		{"typed otherwise", config(map[string]reflect.Type{"MaxInFlight": reflect.TypeFor[int64]()}), []string{"Headers"}, "MaxInFlight: type int64, want int"},
		{"function typed otherwise", config(map[string]reflect.Type{"Cost": reflect.TypeFor[func(string) int64]()}), []string{"Headers"}, "Cost: type func(string) int64, want a function returning int"},
		{"own type", config(map[string]reflect.Type{"OnLimiterError": reflect.TypeFor[time.Duration]()}), []string{"Headers"}, "OnLimiterError: type time.Duration, want a uint8 named ErrorPolicy"},
		{"not declared", good, nil, "Headers is neither"},
		{"own but shared", good, []string{"Headers", "Rate"}, "Rate is said to be"},
		{"own missing", good, []string{"Headers", "Deny"}, "no field Deny"},
	} {
		err := CheckConfig(tt.cfg, tt.own...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error saying %q", tt.name, err, tt.want)
		}
	}
}

// ErrorPolicy stands for a front end's type of that name.
type ErrorPolicy uint8
