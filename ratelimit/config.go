package ratelimit

// This file reads envoyproxy/ratelimit's configuration format: YAML files
// of one domain each, with nested descriptors, as its README documents
// them, checked as a whole with errors naming the file, the line and the
// field.

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Unit is the unit of a rate_limit, as envoyproxy/ratelimit names it.
type Unit string

// The units a rate_limit may have; their periods are those
// envoyproxy/ratelimit gives them (a month is 30 days, a year 365).
const (
	Second Unit = "second"
	Minute Unit = "minute"
	Hour   Unit = "hour"
	Day    Unit = "day"
	Week   Unit = "week"
	Month  Unit = "month"
	Year   Unit = "year"
)

// Period returns the length of u, 0 for no unit.
func (u Unit) Period() time.Duration {
	switch u {
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return 24 * time.Hour
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		return 30 * 24 * time.Hour
	case Year:
		return 365 * 24 * time.Hour
	}
	return 0
}

// FailurePolicy says how a descriptor is answered when its limiter cannot
// decide (Redis down or too slow): "" inherits the enclosing descriptor's,
// or the domain's, or the service's (Options.OnError).
type FailurePolicy string

// The failure policies.
const (
	// FailOpen answers OK, as if the limiter had allowed the request.
	FailOpen FailurePolicy = "open"
	// FailClosed answers OVER_LIMIT.
	FailClosed FailurePolicy = "closed"
	// FailError answers the call with a gRPC Unavailable error, so that
	// Envoy applies its own failure_mode_deny, as envoyproxy/ratelimit
	// does when Redis fails.
	FailError FailurePolicy = "error"
)

// Domain is the configuration of one domain: a file of
// envoyproxy/ratelimit's format, or several merged.
type Domain struct {
	// Domain names it, as requests do.
	Domain string
	// Descriptors are its top-level descriptors.
	Descriptors []*Descriptor
	// OnError is the extension key failure_policy at the top of the file.
	OnError FailurePolicy
	// File names the file it was read from (the first, if merged).
	File string
}

// Descriptor is one entry of a descriptor list.
type Descriptor struct {
	// Key is the entry's key, and Value its value: "" matches any value,
	// and a value ending in "*" every value it prefixes.
	Key, Value string
	// RateLimit is the entry's limit, nil for none.
	RateLimit *RateLimit
	// ShadowMode counts what the limit would refuse and refuses nothing.
	ShadowMode bool
	// DetailedMetric and ValueToMetric are accepted and change nothing:
	// metrics are labelled by the configuration's names, never by values.
	DetailedMetric, ValueToMetric bool
	// ShareThreshold makes every value matching a wildcard value share
	// one counter.
	ShareThreshold bool
	// OnError is the extension key failure_policy.
	OnError FailurePolicy
	// Descriptors are the nested entries.
	Descriptors []*Descriptor
	// Line is the entry's line in its file.
	Line int
}

// RateLimit is a descriptor's rate_limit block.
type RateLimit struct {
	// Name names the limit for replaces.
	Name string
	// Replaces names the limits this one replaces when both match.
	Replaces []string
	// Unit and RequestsPerUnit are the limit: a GCRA of RequestsPerUnit
	// per Unit.
	Unit            Unit
	RequestsPerUnit uint32
	// Burst is the extension key burst: the most requests at once;
	// 0 means RequestsPerUnit.
	Burst uint32
	// Unlimited matches and limits nothing.
	Unlimited bool
}

// ParseDomain reads one configuration file's content, name naming it in
// errors. Keys envoyproxy/ratelimit does not know, keys out of place,
// values of the wrong kind, an invalid unit, a wildcard that cannot be
// one, an entry without a key, and the features it cannot honour
// (quota_mode) are errors naming the file, the line and the field, as are
// duplicates. The extension keys failure_policy (open, closed or error;
// at the top of the file or in an entry) and burst (in a rate_limit) are
// read too.
func ParseDomain(name string, data []byte) (*Domain, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := parser{file: name}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: empty file: want a domain and its descriptors", name)
	}
	root := doc.Content[0]
	d := &Domain{File: name}
	err := p.mapping(root, "", func(key string, v *yaml.Node, path string) error {
		switch key {
		case "domain":
			s, err := p.str(v, path)
			d.Domain = s
			return err
		case "descriptors":
			var err error
			d.Descriptors, err = p.descriptors(v, path)
			return err
		case "failure_policy":
			var err error
			d.OnError, err = p.failure(v, path)
			return err
		}
		return p.unknown(v, path, "domain, descriptors (or the extension failure_policy)")
	})
	if err != nil {
		return nil, err
	}
	if d.Domain == "" {
		return nil, p.errorf(root, "domain", "is missing or empty: every file names its domain")
	}
	return d, nil
}

// parser reads one file.
type parser struct{ file string }

// fieldError is an error naming a file, a line and a field.
type fieldError struct {
	file, field, msg string
	line             int
}

func (e *fieldError) Error() string {
	return fmt.Sprintf("%s:%d: %s: %s", e.file, e.line, e.field, e.msg)
}

func (p *parser) errorf(n *yaml.Node, field, format string, args ...any) error {
	return &fieldError{file: p.file, line: n.Line, field: field, msg: fmt.Sprintf(format, args...)}
}

func (p *parser) unknown(n *yaml.Node, path, want string) error {
	key := path[strings.LastIndexAny(path, ".]")+1:]
	known := []string{"domain", "key", "value", "descriptors", "rate_limit", "unit", "requests_per_unit",
		"unlimited", "shadow_mode", "name", "replaces", "detailed_metric", "value_to_metric", "share_threshold"}
	if slices.Contains(known, key) {
		return p.errorf(n, path, "is out of place here (want %s): envoyproxy/ratelimit would ignore it, and a limit silently ignored is refused", want)
	}
	if key == "quota_mode" {
		return p.errorf(n, path, "is not supported: quota mode answers OK with the violation in dynamic metadata, which this service does not send; use shadow_mode to measure a limit without enforcing it")
	}
	return p.errorf(n, path, "is not a known key (want %s)", want)
}

// mapping calls f for each key of the mapping n, at path.
func (p *parser) mapping(n *yaml.Node, path string, f func(key string, v *yaml.Node, path string) error) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		where := path
		if where == "" {
			where = "document"
		}
		return p.errorf(n, where, "want a mapping of keys to values")
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return p.errorf(k, path, "a key must be a string")
		}
		kp := k.Value
		if path != "" {
			kp = path + "." + k.Value
		}
		if k.Value == "<<" {
			return p.errorf(k, kp, "merge keys are not supported")
		}
		if seen[k.Value] {
			return p.errorf(k, kp, "is given twice")
		}
		seen[k.Value] = true
		if v.Kind == yaml.AliasNode {
			v = v.Alias
		}
		if err := f(k.Value, v, kp); err != nil {
			return err
		}
	}
	return nil
}

// str reads a scalar as a string, as envoyproxy/ratelimit's YAML library
// does: a number or a boolean is its text. null is "".
func (p *parser) str(n *yaml.Node, path string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", p.errorf(n, path, "want a string")
	}
	if n.Tag == "!!null" {
		return "", nil
	}
	return n.Value, nil
}

func (p *parser) boolean(n *yaml.Node, path string) (bool, error) {
	if n.Kind == yaml.ScalarNode {
		if n.Tag == "!!null" {
			return false, nil
		}
		var b bool
		if err := n.Decode(&b); err == nil {
			return b, nil
		}
	}
	return false, p.errorf(n, path, "want true or false, got %q", n.Value)
}

func (p *parser) uint32(n *yaml.Node, path string) (uint32, error) {
	if n.Kind == yaml.ScalarNode {
		if n.Tag == "!!null" {
			return 0, nil
		}
		v, err := strconv.ParseUint(strings.ReplaceAll(n.Value, "_", ""), 0, 64)
		if err == nil && v <= math.MaxUint32 {
			return uint32(v), nil
		}
	}
	return 0, p.errorf(n, path, "want a whole number from 0 to %d, got %q", uint32(math.MaxUint32), n.Value)
}

func (p *parser) failure(n *yaml.Node, path string) (FailurePolicy, error) {
	s, err := p.str(n, path)
	if err != nil {
		return "", err
	}
	switch f := FailurePolicy(strings.ToLower(s)); f {
	case FailOpen, FailClosed, FailError:
		return f, nil
	}
	return "", p.errorf(n, path, "want open, closed or error, got %q", s)
}

// descriptors reads a descriptor list.
func (p *parser) descriptors(n *yaml.Node, path string) ([]*Descriptor, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.errorf(n, path, "want a list of descriptors")
	}
	var out []*Descriptor
	seen := map[string]int{}
	for i, e := range n.Content {
		ep := fmt.Sprintf("%s[%d]", path, i)
		if e.Kind == yaml.AliasNode {
			e = e.Alias
		}
		d := &Descriptor{Line: e.Line}
		err := p.mapping(e, ep, func(key string, v *yaml.Node, kp string) error {
			var err error
			switch key {
			case "key":
				d.Key, err = p.str(v, kp)
			case "value":
				d.Value, err = p.str(v, kp)
			case "rate_limit":
				d.RateLimit, err = p.rateLimit(v, kp)
			case "shadow_mode":
				d.ShadowMode, err = p.boolean(v, kp)
			case "detailed_metric":
				d.DetailedMetric, err = p.boolean(v, kp)
			case "value_to_metric":
				d.ValueToMetric, err = p.boolean(v, kp)
			case "share_threshold":
				d.ShareThreshold, err = p.boolean(v, kp)
			case "failure_policy":
				d.OnError, err = p.failure(v, kp)
			case "descriptors":
				d.Descriptors, err = p.descriptors(v, kp)
			default:
				err = p.unknown(v, kp, "key, value, rate_limit, shadow_mode, detailed_metric, value_to_metric, share_threshold, descriptors")
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		if d.Key == "" {
			return nil, p.errorf(e, ep+".key", "is missing or empty: every descriptor has a key")
		}
		final := d.Key
		if d.Value != "" {
			final += "_" + d.Value
		}
		if line, dup := seen[final]; dup {
			return nil, p.errorf(e, ep, "duplicates the descriptor of line %d (key %q, value %q)", line, d.Key, d.Value)
		}
		seen[final] = e.Line
		if d.ShareThreshold && !strings.HasSuffix(final, "*") {
			return nil, p.errorf(e, ep+".share_threshold", "needs a wildcard value (ending with *), got key %q value %q", d.Key, d.Value)
		}
		out = append(out, d)
	}
	return out, nil
}

// rateLimit reads a rate_limit block.
func (p *parser) rateLimit(n *yaml.Node, path string) (*RateLimit, error) {
	r := &RateLimit{}
	unitNode := n
	err := p.mapping(n, path, func(key string, v *yaml.Node, kp string) error {
		var err error
		switch key {
		case "unit":
			var s string
			s, err = p.str(v, kp)
			r.Unit, unitNode = Unit(strings.ToLower(s)), v
			if err == nil && s != "" && r.Unit.Period() == 0 {
				err = p.errorf(v, kp, "want second, minute, hour, day, week, month or year, got %q", s)
			}
		case "requests_per_unit":
			r.RequestsPerUnit, err = p.uint32(v, kp)
		case "burst":
			r.Burst, err = p.uint32(v, kp)
			if err == nil && r.Burst == 0 {
				err = p.errorf(v, kp, "must be at least 1 (leave it out for requests_per_unit)")
			}
		case "unlimited":
			r.Unlimited, err = p.boolean(v, kp)
		case "name":
			r.Name, err = p.str(v, kp)
		case "replaces":
			r.Replaces, err = p.replaces(v, kp)
		default:
			err = p.unknown(v, kp, "unit, requests_per_unit, unlimited, name, replaces (or the extension burst)")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	switch {
	case r.Unlimited && r.Unit != "":
		return nil, p.errorf(unitNode, path+".unit", "must not be set with unlimited")
	case r.Unlimited && r.Burst != 0:
		return nil, p.errorf(n, path+".burst", "must not be set with unlimited")
	case !r.Unlimited && r.Unit == "":
		return nil, p.errorf(n, path+".unit", "is missing: want second, minute, hour, day, week, month or year")
	case r.Burst != 0 && r.RequestsPerUnit == 0:
		return nil, p.errorf(n, path+".burst", "must not be set with requests_per_unit 0, which refuses every request")
	}
	for i, name := range r.Replaces {
		if name == r.Name {
			return nil, p.errorf(n, fmt.Sprintf("%s.replaces[%d].name", path, i), "must not name the limit itself")
		}
	}
	return r, nil
}

func (p *parser) replaces(n *yaml.Node, path string) ([]string, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, p.errorf(n, path, "want a list of entries with a name")
	}
	var out []string
	for i, e := range n.Content {
		ep := fmt.Sprintf("%s[%d]", path, i)
		name := ""
		err := p.mapping(e, ep, func(key string, v *yaml.Node, kp string) error {
			if key != "name" {
				return p.unknown(v, kp, "name")
			}
			var err error
			name, err = p.str(v, kp)
			return err
		})
		if err != nil {
			return nil, err
		}
		if name == "" {
			return nil, p.errorf(e, ep+".name", "is missing or empty")
		}
		out = append(out, name)
	}
	return out, nil
}

// LoadOptions says how LoadDir reads a directory.
type LoadOptions struct {
	// MergeDomains lets several files configure one domain, their
	// descriptors appended in the order of the files' names, as
	// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does; without it a
	// domain given twice is an error.
	MergeDomains bool
	// IgnoreDotFiles skips the files whose names start with a dot, as
	// RUNTIME_IGNOREDOTFILES does.
	IgnoreDotFiles bool
}

// LoadDir reads every configuration file in dir and the directories
// below it (following symbolic links, as envoyproxy/ratelimit's runtime
// layout swaps directories by a symbolic link), in the order of their
// paths: every file, whatever its extension, as envoyproxy/ratelimit
// reads them. It returns the domains, or the first error, naming the
// file: a configuration is taken whole or not at all.
func LoadDir(dir string, opts LoadOptions) ([]*Domain, error) {
	files, err := configFiles(dir, opts.IgnoreDotFiles)
	if err != nil {
		return nil, err
	}
	var out []*Domain
	byName := map[string]*Domain{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(dir, f)
		d, err := ParseDomain(rel, data)
		if err != nil {
			return nil, err
		}
		if prev := byName[d.Domain]; prev != nil {
			if !opts.MergeDomains {
				return nil, fmt.Errorf("%s: domain %q is configured in %s too (set merging of domains to merge them)", rel, d.Domain, prev.File)
			}
			if err := mergeDomain(prev, d); err != nil {
				return nil, fmt.Errorf("%s: %w", rel, err)
			}
			continue
		}
		byName[d.Domain] = d
		out = append(out, d)
	}
	return out, nil
}

// mergeDomain appends d's descriptors to prev's, refusing an entry both
// have at the top level, and a failure policy they disagree on.
func mergeDomain(prev, d *Domain) error {
	have := map[string]bool{}
	for _, e := range prev.Descriptors {
		have[e.Key+"_"+e.Value] = true
	}
	for _, e := range d.Descriptors {
		if have[e.Key+"_"+e.Value] {
			return fmt.Errorf("line %d: descriptors[key %q, value %q] is in %s too", e.Line, e.Key, e.Value, prev.File)
		}
	}
	if d.OnError != "" && prev.OnError != "" && d.OnError != prev.OnError {
		return fmt.Errorf("failure_policy: %q, where %s says %q", d.OnError, prev.File, prev.OnError)
	}
	if prev.OnError == "" {
		prev.OnError = d.OnError
	}
	prev.Descriptors = append(prev.Descriptors, d.Descriptors...)
	return nil
}

// configFiles returns the regular files under dir, following symbolic
// links, sorted by path.
func configFiles(dir string, ignoreDot bool) ([]string, error) {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	var walk func(string, int) error
	walk = func(d string, depth int) error {
		if depth > 16 {
			return fmt.Errorf("%s: directories nested too deep (a loop of links?)", d)
		}
		entries, err := os.ReadDir(d)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if ignoreDot && strings.HasPrefix(e.Name(), ".") {
				continue
			}
			p := filepath.Join(d, e.Name())
			info, err := os.Stat(p) // follows links
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue // a dangling link
				}
				return err
			}
			switch {
			case info.IsDir():
				if err := walk(p, depth+1); err != nil {
					return err
				}
			case info.Mode().IsRegular():
				out = append(out, p)
			}
		}
		return nil
	}
	if err := walk(root, 0); err != nil {
		return nil, err
	}
	// Paths relative to dir, as given, for errors.
	for i, p := range out {
		if rel, err := filepath.Rel(root, p); err == nil {
			out[i] = filepath.Join(dir, rel)
		}
	}
	slices.Sort(out)
	return out, nil
}
