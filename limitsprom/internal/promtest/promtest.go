// Package promtest holds the checks the tests of limitsprom and of the
// exporters' cross-check make of every exposition: the conventions of the
// metrics' names, types, help and labels, and promlint's.
package promtest

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Types holds the type of every metric the module exports.
var Types = func() map[string]dto.MetricType {
	t := map[string]dto.MetricType{
		"limits_gate_capacity":                dto.MetricType_GAUGE,
		"limits_gate_in_flight":               dto.MetricType_GAUGE,
		"limits_gate_peak_in_flight":          dto.MetricType_GAUGE,
		"limits_gate_waiting":                 dto.MetricType_GAUGE,
		"limits_gate_admitted_total":          dto.MetricType_COUNTER,
		"limits_gate_shed_total":              dto.MetricType_COUNTER,
		"limits_gate_timed_out_total":         dto.MetricType_COUNTER,
		"limits_gate_waited_total":            dto.MetricType_COUNTER,
		"limits_gate_overloaded":              dto.MetricType_GAUGE,
		"limits_gate_overloads_total":         dto.MetricType_COUNTER,
		"limits_gate_wait_seconds_total":      dto.MetricType_COUNTER,
		"limits_gate_priority_capacity":       dto.MetricType_GAUGE,
		"limits_gate_priority_admitted_total": dto.MetricType_COUNTER,
		"limits_gate_priority_shed_total":     dto.MetricType_COUNTER,
		"limits_gcra_keys":                    dto.MetricType_GAUGE,
		"limits_gcra_max_keys":                dto.MetricType_GAUGE,
		"limits_gcra_table_full_total":        dto.MetricType_COUNTER,
		"limits_redis_calls_total":            dto.MetricType_COUNTER,
		"limits_redis_failures_total":         dto.MetricType_COUNTER,
		"limits_redis_fallbacks_total":        dto.MetricType_COUNTER,
		"limits_redis_call_duration_seconds":  dto.MetricType_HISTOGRAM,
	}
	// Every front end's, by subsystem and the label of its routes.
	for sub, route := range map[string]string{"http": "route", "grpc": "method", "admit": "route"} {
		for _, n := range []string{"requests_total", "shadow_refusals_total", "policy_requests_total", "policy_shadow_refusals_total", route + "_requests_total"} {
			t["limits_"+sub+"_"+n] = dto.MetricType_COUNTER
		}
		t["limits_"+sub+"_policy_keys"] = dto.MetricType_GAUGE
		t["limits_"+sub+"_policy_max_keys"] = dto.MetricType_GAUGE
	}
	return t
}()

// boundedLabels are the labels metrics may carry, each with a value set
// fixed by the code or the configuration.
var boundedLabels = map[string]bool{"name": true, "layer": true, "outcome": true, "policy": true, "route": true, "method": true,
	"priority": true, "op": true, "result": true, "kind": true}

// Scrape returns the metric families served at url, in the text format.
func Scrape(t testing.TB, url string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// CheckConventions checks that every family in fams is one of the
// module's, of its type, with help text, counters named _total, and only
// bounded labels, name among them.
func CheckConventions(t testing.TB, fams map[string]*dto.MetricFamily) {
	t.Helper()
	for name, f := range fams {
		want, ok := Types[name]
		switch {
		case !ok:
			t.Errorf("%s: not a metric of the module", name)
			continue
		case f.GetType() != want:
			t.Errorf("%s: type %v, want %v", name, f.GetType(), want)
		case f.GetHelp() == "":
			t.Errorf("%s: no help", name)
		case (want == dto.MetricType_COUNTER) != strings.HasSuffix(name, "_total"):
			t.Errorf("%s: counters, and only they, end in _total", name)
		}
		for _, m := range f.GetMetric() {
			named := false
			for _, l := range m.GetLabel() {
				if !boundedLabels[l.GetName()] {
					t.Errorf("%s: label %s", name, l.GetName())
				}
				named = named || l.GetName() == "name" && l.GetValue() != ""
			}
			if !named {
				t.Errorf("%s: a series without a name: %v", name, m)
			}
		}
	}
}

// Lint checks the exposition of g with promlint.
func Lint(t testing.TB, g prometheus.Gatherer) {
	t.Helper()
	problems, err := testutil.GatherAndLint(g)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}
