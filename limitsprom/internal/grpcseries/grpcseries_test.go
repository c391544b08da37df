package grpcseries

import (
	"reflect"
	"testing"

	"github.com/limitsgo/limits"
	"github.com/limitsgo/limits/grpclimit"
	"github.com/limitsgo/limits/httplimit"
)

// TestSameFields checks that grpclimit.Stats has the fields of
// httplimit.Stats, of the same types and JSON names, and that Stats
// copies every one: a field added to both front ends but not here fails.
func TestSameFields(t *testing.T) {
	gt, ht := reflect.TypeFor[grpclimit.Stats](), reflect.TypeFor[httplimit.Stats]()
	if gt.NumField() != ht.NumField() {
		t.Fatalf("grpclimit.Stats has %d fields, httplimit.Stats %d", gt.NumField(), ht.NumField())
	}
	for i := range gt.NumField() {
		g, h := gt.Field(i), ht.Field(i)
		if g.Name != h.Name || g.Tag.Get("json") != h.Tag.Get("json") {
			t.Errorf("field %d: %s `%s` against %s `%s`", i, g.Name, g.Tag, h.Name, h.Tag)
		}
		if g.Name != "Policies" && g.Type != h.Type {
			t.Errorf("%s: %v against %v", g.Name, g.Type, h.Type)
		}
	}

	// Every counter a different value, and two policies.
	var s grpclimit.Stats
	v := reflect.ValueOf(&s).Elem()
	n := uint64(1)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Uint64 {
			f.SetUint(n)
			n++
		}
	}
	s.Gate = &limits.GateStats{Max: 3, Admitted: 7}
	s.Policies = []grpclimit.PolicyStats{
		{Name: "address", Allowed: 1, RateLimited: 2, TableFull: 3, CostAboveBurst: 4, InvalidCost: 5, LimiterError: 6, Keys: 7, MaxKeys: 8},
		{Name: "default", Allowed: 9, Keys: 10, MaxKeys: 11},
	}
	h := Stats(s)
	hv := reflect.ValueOf(h)
	for i := range v.NumField() {
		name := gt.Field(i).Name
		if name == "Policies" {
			continue
		}
		if got, want := hv.FieldByName(name).Interface(), v.Field(i).Interface(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %v, want %v", name, got, want)
		}
	}
	if len(h.Policies) != len(s.Policies) {
		t.Fatalf("%d policies, want %d", len(h.Policies), len(s.Policies))
	}
	for i, p := range s.Policies {
		if got := grpclimit.PolicyStats(h.Policies[i]); got != p {
			t.Errorf("policy %d: %+v, want %+v", i, got, p)
		}
	}
}

// TestSameReasons checks that the front ends name their refusals alike,
// as the outcome labels series shares between them assume.
func TestSameReasons(t *testing.T) {
	for _, r := range [][2]string{
		{grpclimit.ReasonRateLimited, httplimit.ReasonRateLimited},
		{grpclimit.ReasonServerBusy, httplimit.ReasonServerBusy},
		{grpclimit.ReasonRequestTimeout, httplimit.ReasonRequestTimeout},
		{grpclimit.ReasonLimiterError, httplimit.ReasonLimiterError},
		{grpclimit.ReasonTableFull, httplimit.ReasonTableFull},
		{grpclimit.ReasonCostAboveBurst, httplimit.ReasonCostAboveBurst},
		{grpclimit.ReasonInvalidCost, httplimit.ReasonInvalidCost},
		{grpclimit.ReasonConcurrencyLimited, httplimit.ReasonConcurrencyLimited},
		{grpclimit.ReasonConcurrencyTableFull, httplimit.ReasonConcurrencyTableFull},
	} {
		if r[0] != r[1] {
			t.Errorf("grpclimit %q, httplimit %q", r[0], r[1])
		}
	}
}
