package ratelimit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseRefuses checks that each configuration this service cannot
// honour is refused at load, with the file, line and field named.
func TestParseRefuses(t *testing.T) {
	for _, c := range []struct {
		name, yaml, want string
	}{
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n",
			`f.yaml:5: descriptors[0].rate_limit.unit: want second, minute, hour, day, week, month or year, got "fortnight"`},
		{"no unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 1\n",
			`f.yaml:5: descriptors[0].rate_limit.unit: is missing`},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: second\n",
			`f.yaml:6: descriptors[0].rate_limit.unit: must not be set with unlimited`},
		{"empty key", "domain: d\ndescriptors:\n  - value: v\n",
			`f.yaml:3: descriptors[0].key: is missing or empty`},
		{"no domain", "descriptors:\n  - key: k\n", `f.yaml:1: domain: is missing or empty`},
		{"duplicate", "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n",
			`f.yaml:5: descriptors[1]: duplicates the descriptor of line 3`},
		{"unknown key", "domain: d\ndescriptors:\n  - key: k\n    rate_limt: {}\n",
			`f.yaml:4: descriptors[0].rate_limt: is not a known key`},
		{"misplaced key", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      shadow_mode: true\n",
			`f.yaml:7: descriptors[0].rate_limit.shadow_mode: is out of place here`},
		{"quota mode", "domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n",
			`f.yaml:4: descriptors[0].quota_mode: is not supported`},
		{"share without wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
			`f.yaml:3: descriptors[0].share_threshold: needs a wildcard value`},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: a\n      replaces: [{name: a}]\n      unit: second\n      requests_per_unit: 1\n",
			`f.yaml:5: descriptors[0].rate_limit.replaces[0].name: must not name the limit itself`},
		{"replaces empty", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      replaces: [{name: ''}]\n      unit: second\n      requests_per_unit: 1\n",
			`f.yaml:5: descriptors[0].rate_limit.replaces[0].name: is missing or empty`},
		{"negative count", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n",
			`f.yaml:6: descriptors[0].rate_limit.requests_per_unit: want a whole number`},
		{"not a list", "domain: d\ndescriptors:\n  key: k\n", `f.yaml:3: descriptors: want a list of descriptors`},
		{"bad failure policy", "domain: d\nfailure_policy: maybe\n", `f.yaml:2: failure_policy: want open, closed or error`},
		{"bad yaml", "domain: d\ndescriptors:\n  - key: [\n", `f.yaml: yaml:`},
		{"burst with zero", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 0\n      burst: 3\n",
			`descriptors[0].rate_limit.burst: must not be set with requests_per_unit 0`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseDomain("f.yaml", []byte(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// TestParseAccepts checks the forms envoyproxy/ratelimit accepts: values
// that YAML reads as numbers, a document marker, units in any case, and
// the extensions.
func TestParseAccepts(t *testing.T) {
	d, err := ParseDomain("f.yaml", []byte(`---
domain: d
failure_policy: open
descriptors:
  - key: port
    value: 8080
    rate_limit:
      unit: SECOND
      requests_per_unit: 5
      burst: 2
  - key: flag
    value: true
    failure_policy: closed
    rate_limit:
      unit: Minute
      requests_per_unit: 1
`))
	if err != nil {
		t.Fatal(err)
	}
	if d.OnError != FailOpen || d.Descriptors[0].Value != "8080" || d.Descriptors[0].RateLimit.Unit != Second ||
		d.Descriptors[0].RateLimit.Burst != 2 || d.Descriptors[1].Value != "true" || d.Descriptors[1].OnError != FailClosed {
		t.Fatalf("read %+v, %+v, %+v", d, d.Descriptors[0], d.Descriptors[1])
	}
}

// TestLoadDirDomains checks a directory of several files: a domain in two
// files is refused unless merged, and every file is read whatever its
// name, in subdirectories too.
func TestLoadDirDomains(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	write("sub/b.conf", "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	if _, err := LoadDir(dir, LoadOptions{}); err == nil || !strings.Contains(err.Error(), `domain "d" is configured in a.yaml too`) {
		t.Fatalf("a domain in two files: %v, want an error naming both", err)
	}
	ds, err := LoadDir(dir, LoadOptions{MergeDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || len(ds[0].Descriptors) != 2 {
		t.Fatalf("merged: %d domains, want one of two descriptors", len(ds))
	}
	write("sub/c.yaml", "domain: d\ndescriptors:\n  - key: a\n")
	if _, err := LoadDir(dir, LoadOptions{MergeDomains: true}); err == nil || !strings.Contains(err.Error(), `descriptors[key "a", value ""] is in a.yaml too`) {
		t.Fatalf("merging a descriptor given twice: %v, want an error", err)
	}
	write(".hidden/c.yaml", "not: valid")
	if err := os.Remove(filepath.Join(dir, "sub/c.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDir(dir, LoadOptions{MergeDomains: true, IgnoreDotFiles: true}); err != nil {
		t.Fatalf("dot files ignored: %v", err)
	}
	if _, err := LoadDir(dir, LoadOptions{MergeDomains: true}); err == nil {
		t.Fatal("dot files read: an invalid one was accepted")
	}
}

// TestLoadRefusedKeepsConfig checks that a configuration refused leaves
// the one in force, and is counted.
func TestLoadRefusedKeepsConfig(t *testing.T) {
	s := readmeService(t, Options{}, "example5.yaml")
	before := s.Config()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "x.yaml"), []byte("domain: internal\ndescriptors:\n  - key: azure\n    rate_limit: {unit: lightyear, requests_per_unit: 1}\n"), 0o644)
	if err := s.LoadDir(dir); err == nil || !strings.Contains(err.Error(), "x.yaml:4: descriptors[0].rate_limit.unit") {
		t.Fatalf("load: %v, want the field named", err)
	}
	if s.Config() != before {
		t.Fatalf("config after a refused load:\n%s\nwant\n%s", s.Config(), before)
	}
	if s.n.loadErrors.Load() != 1 {
		t.Fatalf("%d load errors counted, want 1", s.n.loadErrors.Load())
	}
}
