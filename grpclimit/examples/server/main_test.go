package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"
)

// counts returns the results of the named client in the demo's output.
func counts(t *testing.T, out, name string) map[string]int {
	t.Helper()
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != name {
			continue
		}
		m := map[string]int{}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			m[k] = n
		}
		return m
	}
	t.Fatalf("no line for %s in\n%s", name, out)
	return nil
}

// TestDemo runs the demo and checks that each client got what the limits
// promise, with margins for a busy machine.
func TestDemo(t *testing.T) {
	var out, logs bytes.Buffer
	start := time.Now()
	if err := run([]string{"-demo", "-addr", "127.0.0.1:0", "-duration", "1s"}, &out, &logs); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the demo took %v", d)
	}
	s := out.String()
	if c := counts(t, s, "polite"); c["ok"] == 0 || len(c) != 1 {
		t.Errorf("polite, under its limit: %v, want all served", c)
	}
	if c := counts(t, s, "greedy"); c["rate_limited"] == 0 || c["ok"] > 25 {
		t.Errorf("greedy, at 20 times its limit: %v", c)
	}
	if c := counts(t, s, "streamer"); c["ok"] != 2 || c["concurrency_limited"] != 2 {
		t.Errorf("streamer, 4 streams with 2 allowed open: %v", c)
	}
	if c := counts(t, s, "probe"); c["ok"] == 0 || len(c) != 1 {
		t.Errorf("probe, exempt: %v", c)
	}
	if !strings.Contains(s, `"rate_limited"`) || !strings.Contains(s, `"gate"`) {
		t.Errorf("no stats in the output:\n%s", s)
	}
}

// TestStopsByItself serves without calls and checks that -duration stops
// the server.
func TestStopsByItself(t *testing.T) {
	var out, logs bytes.Buffer
	start := time.Now()
	if err := run([]string{"-addr", "127.0.0.1:0", "-duration", "200ms"}, &out, &logs); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 10*time.Second {
		t.Errorf("served for %v, want about 200ms", d)
	}
	if !strings.Contains(out.String(), "serving demo.Greeter on 127.0.0.1:") {
		t.Errorf("output %q", out.String())
	}
}

func TestLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:50051", ":50051", "192.0.2.1:50051", "example.com:50051", "nonsense"} {
		if err := run([]string{"-addr", addr, "-duration", "1ms"}, new(bytes.Buffer), new(bytes.Buffer)); err == nil {
			t.Errorf("-addr %s: served, want refused", addr)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0", "localhost:0"} {
		if err := loopback(addr); err != nil {
			t.Errorf("-addr %s: %v", addr, err)
		}
	}
}
