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
	// Methods, the last, is gRPC's own: the counts by method.
	if gt.NumField() != ht.NumField()+1 || gt.Field(gt.NumField()-1).Name != "Methods" {
		t.Fatalf("grpclimit.Stats has %d fields, httplimit.Stats %d, and Methods", gt.NumField(), ht.NumField())
	}
	for i := range ht.NumField() {
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
		if name == "Policies" || name == "Methods" {
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

// TestMethodSeries checks the series of the calls by method: one per
// name registered and outcome, then the others, with the counts of each.
func TestMethodSeries(t *testing.T) {
	s := grpclimit.Stats{Methods: []grpclimit.MethodStats{
		{Method: "/shop.Auth/Login", Allowed: 2, RateLimited: 8},
		{Method: grpclimit.OtherMethods, Allowed: 5, ServerBusy: 1},
	}}
	e := &collect{got: map[string]int64{}}
	readMethods(e, 0, s.Methods)
	for key, want := range map[string]int64{
		"/shop.Auth/Login allowed": 2, "/shop.Auth/Login rate_limited": 8, "/shop.Auth/Login server_busy": 0,
		"other allowed": 5, "other server_busy": 1, "other exempt": 0,
	} {
		if got, ok := e.got[key]; !ok || got != want {
			t.Errorf("%s: %d (present %v), want %d", key, got, ok, want)
		}
	}
	if len(e.got) != 2*11 {
		t.Errorf("%d series, want 11 outcomes of 2 names", len(e.got))
	}
}

type collect struct{ got map[string]int64 }

func (c *collect) Value(m int, v int64, labels ...string)              { c.got[labels[0]+" "+labels[1]] = v }
func (c *collect) Float(int, float64, ...string)                       {}
func (c *collect) Histogram(int, uint64, float64, []float64, []uint64) {}
