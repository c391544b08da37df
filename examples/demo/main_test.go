package main

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// row returns the counts of the table row of the named client: sent, 200,
// 429, 503.
func row(t *testing.T, out, name string) [4]int {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(strings.TrimPrefix(line, name))
		var r [4]int
		for i := range r {
			n, err := strconv.Atoi(f[i+1]) // after the address
			if err != nil {
				t.Fatalf("row %q: %v", line, err)
			}
			r[i] = n
		}
		return r
	}
	t.Fatalf("no row for %s in\n%s", name, out)
	return [4]int{}
}

// TestDemo runs the demo for two seconds and checks that each client got
// what the limits promise, with wide margins for a busy machine.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, "127.0.0.1:0", 2*time.Second, "limits.json", nil); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	t.Log("\n" + s)
	if r := row(t, s, "probe"); r[0] < 5 || r[1] != r[0] {
		t.Errorf("probe: %v; every exempt probe must pass", r)
	}
	if r := row(t, s, "abusive"); r[2] < r[0]/2 {
		t.Errorf("abusive: %v; most of its requests must be refused with 429", r)
	}
	if r := row(t, s, "rotator"); r[2] == 0 {
		t.Errorf("rotator: %v; rotating sessions must not escape the address limit", r)
	}
	if r := row(t, s, "burst"); r[3] == 0 || r[1] == 0 {
		t.Errorf("burst: %v; the gate must admit some and shed the rest", r)
	}
	for _, name := range []string{"polite", "office (5 users)"} {
		if r := row(t, s, name); r[2] != 0 || r[1] == 0 {
			t.Errorf("%s: %v; it stays within its limits and must never get 429", name, r)
		}
	}
	if !strings.Contains(s, "gate: ") || !strings.Contains(s, "in flight") {
		t.Errorf("no gate counters in\n%s", s)
	}
	// The metrics scraped over HTTP agree with the refusals seen.
	for _, series := range []string{
		`limits_http_requests_total{layer="all",name="demo",outcome="allowed"} `,
		`limits_http_requests_total{layer="rate",name="demo",outcome="rate_limited"} `,
		`limits_http_requests_total{layer="capacity",name="demo",outcome="server_busy"} `,
		`limits_http_requests_total{layer="exempt",name="demo",outcome="exempt"} `,
		`limits_gate_shed_total{name="demo"} `,
	} {
		if !strings.Contains(s, series) {
			t.Errorf("no %s... in the metrics shown:\n%s", series, s)
		}
	}
	// The reload on SIGHUP: the new limit applies to a new session, and
	// the counters go on.
	_, after, ok := strings.Cut(s, "SIGHUP: ")
	if !ok || !strings.Contains(after, "2/s per session") || !strings.Contains(after, `RateLimit-Policy of a new session: "default";q=2;w=1`) ||
		!strings.Contains(s, `RateLimit-Policy of a new session: "default";q=10;w=1`) {
		t.Errorf("no reload on SIGHUP in\n%s", s)
	}
	if !strings.Contains(s, "metrics at http://127.0.0.1:") {
		t.Errorf("the demo does not say where its metrics are:\n%s", s)
	}
}

// TestDemoKeepServing checks that the demo still serves its API and
// metrics while it holds after the traffic, as with -keep.
func TestDemoKeepServing(t *testing.T) {
	var out bytes.Buffer
	var status int
	var body string
	hold := func() {
		// run has written where it serves before it holds.
		_, rest, _ := strings.Cut(out.String(), "Serving at ")
		base, _, _ := strings.Cut(rest, " ")
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Error(err)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		status, body = resp.StatusCode, string(b)
	}
	if err := run(&out, "127.0.0.1:0", 300*time.Millisecond, "limits.json", hold); err != nil {
		t.Fatal(err)
	}
	if status != http.StatusOK || !strings.Contains(body, "# TYPE limits_http_requests_total counter") {
		t.Errorf("GET /metrics while holding: %d\n%s", status, body)
	}
}
