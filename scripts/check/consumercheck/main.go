// Command consumercheck checks that every released module of the
// repository can be consumed with go get, as if the working tree were
// tagged at the repository's version (the VERSION file).
//
// It first checks the go.mod files: every module of the repository that
// another one requires is required at VERSION, and every module of the
// repository in a module's graph is replaced by its directory in the
// working tree. It checks that no released module imports an internal
// package of another module, unless docs/RELEASING.md states why the two
// are released in lockstep. It then builds a file-based module proxy (the layout of
// the module proxy protocol: @v/list, .info, .mod and .zip) holding each
// released module at VERSION and, for each consumer of a fixed set, makes
// a module in a temporary directory outside the repository, go gets the
// modules it uses from that proxy, builds a program importing their
// packages, runs go mod tidy and go list -m all, and fails on a module of
// the repository at another version (such as v0.0.0), a module the
// consumer needs but does not get, a module the consumer must not get,
// or a go directive higher than the consumer's dependencies require.
//
// Usage, from the repository's root:
//
//	go -C scripts/check run ./consumercheck [-root dir] [-version v] [-only name] [-keep] [-v]
//	go -C scripts/check run ./consumercheck -tags
//
// Modules other than those of the repository come from the local module
// cache and then from the proxies of go env GOPROXY.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

const corePath = "github.com/limitsgo/limits"

// A consumer is a user of some of the repository's packages.
type consumer struct {
	name string
	// pkgs are the packages it imports, relative to corePath ("." for the
	// core package); nil means every public package of every released
	// module.
	pkgs []string
	// deny are module path prefixes its go list -m all must not hold.
	deny []string
}

var (
	grpcMods  = []string{corePath + "/grpclimit", "google.golang.org/grpc", "google.golang.org/genproto"}
	redisMods = []string{corePath + "/redislimit", "github.com/redis/"}
	otelMods  = []string{corePath + "/limitsprom/limitsotel", "go.opentelemetry.io/"}
	promMods  = []string{"github.com/prometheus/"}
	ginMods   = []string{corePath + "/httplimit/ginlimit", "github.com/gin-gonic/"}
)

// The consumers: each front end with the exporter it would use. One
// exporter serves every component, so a consumer's graph grows only with
// the front ends and clients it imports itself.
var consumers = []consumer{
	{"core", []string{".", "httplimit", "adaptive", "heavy", "admit", "metrics"}, concat(grpcMods, redisMods, otelMods, promMods, ginMods)},
	{"http", []string{".", "httplimit", "limitsprom"}, concat(grpcMods, redisMods, otelMods, ginMods)},
	{"gin", []string{".", "httplimit", "httplimit/ginlimit"}, concat(grpcMods, redisMods, otelMods, promMods)},
	// gRPC's own module requires OpenTelemetry's: only ours is denied.
	{"grpc", []string{".", "grpclimit", "limitsprom"}, concat(redisMods, otelMods[:1], ginMods)},
	{"redis", []string{".", "httplimit", "redislimit", "limitsprom"}, concat(grpcMods, otelMods, ginMods)},
	{"otel-http", []string{".", "httplimit", "limitsprom/limitsotel"}, concat(grpcMods, redisMods, promMods, ginMods)},
	{"otel", []string{".", "httplimit", "grpclimit", "redislimit", "limitsprom/limitsotel"}, concat(promMods, ginMods)},
	{"all", nil, nil},
}

func concat(lists ...[]string) []string {
	var all []string
	for _, l := range lists {
		all = append(all, l...)
	}
	return all
}

// A mod is a module of the repository.
type mod struct {
	path string
	dir  string // absolute
	file *modfile.File
	// released is whether the module is published: it is not under
	// bench, examples or scripts, and it has a package that is not a
	// command or a test.
	released bool
	// pkgs are its public packages: neither internal nor commands.
	pkgs []string
	// imports maps each of its packages, commands and internal ones
	// included, to the packages its non-test files import.
	imports map[string][]string
}

var (
	root    = flag.String("root", "", "the repository's root (default: the current directory's repository)")
	version = flag.String("version", "", "the version to check (default: the VERSION file)")
	only    = flag.String("only", "", "run only this consumer")
	keep    = flag.Bool("keep", false, "keep the proxy and consumer directories and say where they are")
	verbose = flag.Bool("v", false, "print each command")
	tags    = flag.Bool("tags", false, "print the tag of each released module at the version, each after those of the modules it requires, and exit")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "consumercheck:", err)
		os.Exit(1)
	}
}

func run() error {
	start := time.Now()
	if *root == "" {
		out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
		if err != nil {
			return fmt.Errorf("finding the repository: %v (use -root)", err)
		}
		*root = strings.TrimSpace(string(out))
	}
	abs, err := filepath.Abs(*root)
	if err != nil {
		return err
	}
	*root = abs
	if *version == "" {
		b, err := os.ReadFile(filepath.Join(*root, "VERSION"))
		if err != nil {
			return fmt.Errorf("reading the version: %v", err)
		}
		*version = strings.TrimSpace(string(b))
	}
	if !semver.IsValid(*version) || semver.Canonical(*version) != *version {
		return fmt.Errorf("version %q is not a canonical semantic version", *version)
	}

	mods, err := findModules(*root)
	if err != nil {
		return err
	}
	var problems []string
	problems = append(problems, checkRequires(mods)...)
	for _, m := range mods {
		if err := listPackages(m); err != nil {
			return err
		}
	}
	var released []*mod
	for _, m := range mods {
		if m.released {
			released = append(released, m)
		}
	}
	releasing, err := os.ReadFile(filepath.Join(*root, "docs", "RELEASING.md"))
	if err != nil {
		return fmt.Errorf("reading the reasons for lockstep releases: %v", err)
	}
	problems = append(problems, checkInternal(mods, string(releasing))...)
	if *tags {
		for _, m := range dependencyOrder(released) {
			dir, _ := filepath.Rel(*root, m.dir)
			if dir == "." {
				fmt.Println(*version)
			} else {
				fmt.Println(filepath.ToSlash(dir) + "/" + *version)
			}
		}
		return nil
	}
	fmt.Printf("version %s; released modules:\n", *version)
	for _, m := range released {
		fmt.Printf("\t%s (%d public packages)\n", m.path, len(m.pkgs))
	}

	tmp, err := os.MkdirTemp("", "limits-consumercheck-")
	if err != nil {
		return err
	}
	if *keep {
		fmt.Println("work directory:", tmp)
	} else {
		defer removeAll(tmp)
	}
	proxyDir := filepath.Join(tmp, "proxy")
	for _, m := range released {
		if err := publish(proxyDir, m); err != nil {
			return fmt.Errorf("publishing %s: %v", m.path, err)
		}
	}
	env, err := consumerEnv(tmp, proxyDir)
	if err != nil {
		return err
	}
	coreGo := ""
	for _, m := range mods {
		if m.path == corePath && m.file.Go != nil {
			coreGo = m.file.Go.Version
		}
	}
	for _, c := range consumers {
		if *only != "" && c.name != *only {
			continue
		}
		ps, err := tryConsumer(tmp, env, c, released, coreGo)
		problems = append(problems, ps...)
		if err != nil {
			problems = append(problems, fmt.Sprintf("consumer %s: %v", c.name, err))
		}
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "\n%d problems:\n", len(problems))
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "  -", strings.ReplaceAll(p, "\n", "\n    "))
		}
		return errors.New("failed")
	}
	fmt.Printf("consumer check passed in %s\n", time.Since(start).Round(100*time.Millisecond))
	return nil
}

// dependencyOrder returns mods with each module after the modules of
// mods it requires.
func dependencyOrder(mods []*mod) []*mod {
	byPath := map[string]*mod{}
	for _, m := range mods {
		byPath[m.path] = m
	}
	var order []*mod
	done := map[*mod]bool{}
	var visit func(*mod)
	visit = func(m *mod) {
		if done[m] {
			return
		}
		done[m] = true
		for _, r := range m.file.Require {
			if s := byPath[r.Mod.Path]; s != nil {
				visit(s)
			}
		}
		order = append(order, m)
	}
	for _, m := range mods {
		visit(m)
	}
	return order
}

// findModules returns the modules of the repository at root, sorted by
// path.
func findModules(root string) ([]*mod, error) {
	var mods []*mod
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := modfile.Parse(p, data, nil)
		if err != nil {
			return err
		}
		if f.Module == nil {
			return fmt.Errorf("%s: no module line", p)
		}
		dir := filepath.Dir(p)
		rel, _ := filepath.Rel(root, dir)
		rel = filepath.ToSlash(rel)
		first := strings.Split(rel, "/")[0]
		m := &mod{path: f.Module.Mod.Path, dir: dir, file: f,
			released: first != "bench" && first != "examples" && first != "scripts"}
		want := corePath
		if rel != "." {
			want = corePath + "/" + rel
		}
		if m.path != want {
			return fmt.Errorf("%s: module %s, want %s (the path of its directory)", p, m.path, want)
		}
		mods = append(mods, m)
		return nil
	})
	sort.Slice(mods, func(i, j int) bool { return mods[i].path < mods[j].path })
	return mods, err
}

// checkRequires checks that every module of the repository requires its
// siblings at the version, and replaces each sibling in its graph by the
// sibling's directory.
func checkRequires(mods []*mod) []string {
	byPath := map[string]*mod{}
	for _, m := range mods {
		byPath[m.path] = m
	}
	var problems []string
	for _, m := range mods {
		rel, _ := filepath.Rel(*root, filepath.Join(m.dir, "go.mod"))
		for _, r := range m.file.Require {
			if byPath[r.Mod.Path] != nil && r.Mod.Version != *version {
				problems = append(problems, fmt.Sprintf("%s:%d: requires %s %s, want %s (VERSION)",
					rel, r.Syntax.Start.Line, r.Mod.Path, r.Mod.Version, *version))
			}
		}
		// The siblings in m's graph: those it requires, and theirs.
		need := map[string]bool{}
		var walk func(*mod)
		walk = func(x *mod) {
			for _, r := range x.file.Require {
				if s := byPath[r.Mod.Path]; s != nil && !need[s.path] {
					need[s.path] = true
					walk(s)
				}
			}
		}
		walk(m)
		replaced := map[string]bool{}
		for _, r := range m.file.Replace {
			s := byPath[r.Old.Path]
			if s == nil {
				continue
			}
			replaced[s.path] = true
			target := filepath.Clean(filepath.Join(m.dir, r.New.Path))
			if r.New.Version != "" || target != s.dir {
				problems = append(problems, fmt.Sprintf("%s:%d: replaces %s by %s %s, want its directory %s",
					rel, r.Syntax.Start.Line, r.Old.Path, r.New.Path, r.New.Version, relDir(m.dir, s.dir)))
			}
			if r.Old.Version != "" && r.Old.Version != *version {
				problems = append(problems, fmt.Sprintf("%s:%d: replaces %s at %s only, want all versions",
					rel, r.Syntax.Start.Line, r.Old.Path, r.Old.Version))
			}
		}
		for _, p := range sortedKeys(need) {
			if !replaced[p] {
				problems = append(problems, fmt.Sprintf("%s: %s is in the module's graph but not replaced: add\n\treplace %s => %s",
					rel, p, p, relDir(m.dir, byPath[p].dir)))
			}
		}
	}
	return problems
}

// checkInternal checks that no released module imports an internal
// package of another module of the repository, in the files a consumer
// builds (tests aside), unless releasing states why the two modules are
// released in lockstep: a paragraph of it names both the importing
// module's directory and the internal package's, each in backquotes,
// such as "`redislimit` imports the core's `internal/gcra`". An internal
// package carries no compatibility promise, so such an import breaks a
// consumer that upgrades one module without the other.
func checkInternal(mods []*mod, releasing string) []string {
	paragraphs := strings.Split(strings.ReplaceAll(releasing, "\r\n", "\n"), "\n\n")
	stated := func(a, b string) bool {
		for _, p := range paragraphs {
			p = strings.Join(strings.Fields(p), " ")
			if strings.Contains(p, "`"+a+"`") && strings.Contains(p, "`"+b+"`") {
				return true
			}
		}
		return false
	}
	owner := func(pkg string) *mod {
		var best *mod
		for _, m := range mods {
			if (pkg == m.path || strings.HasPrefix(pkg, m.path+"/")) && (best == nil || len(m.path) > len(best.path)) {
				best = m
			}
		}
		return best
	}
	dirOf := func(pkg string) string {
		if pkg == corePath {
			return "."
		}
		return strings.TrimPrefix(pkg, corePath+"/")
	}
	var problems []string
	for _, m := range mods {
		if !m.released {
			continue
		}
		seen := map[string]bool{}
		for _, pkg := range sortedKeys(keysOf(m.imports)) {
			for _, imp := range m.imports[pkg] {
				if seen[imp] || !strings.HasSuffix(imp, "/internal") && !strings.Contains(imp, "/internal/") {
					continue
				}
				seen[imp] = true
				o := owner(imp)
				if o == nil || o == m {
					continue
				}
				from, to := dirOf(m.path), dirOf(imp)
				if !stated(from, to) {
					problems = append(problems, fmt.Sprintf("%s imports %s, an internal package of module %s (in %s): make it public, "+
						"or state in docs/RELEASING.md why the two modules are released in lockstep, in a paragraph naming `%s` and `%s`",
						m.path, imp, o.path, pkg, from, to))
				}
			}
		}
	}
	return problems
}

func keysOf(m map[string][]string) map[string]bool {
	k := make(map[string]bool, len(m))
	for p := range m {
		k[p] = true
	}
	return k
}

func relDir(from, to string) string {
	r, err := filepath.Rel(from, to)
	if err != nil {
		return to
	}
	r = filepath.ToSlash(r)
	if !strings.HasPrefix(r, ".") {
		r = "./" + r
	}
	return r
}

func sortedKeys(m map[string]bool) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// listPackages sets m.pkgs and whether m is released.
func listPackages(m *mod) error {
	cmd := exec.Command("go", "list", "-e", "-f", `{{.ImportPath}} {{.Name}} {{len .GoFiles}} {{join .Imports ","}}`, "./...")
	cmd.Dir = m.dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := output(cmd)
	if err != nil {
		return fmt.Errorf("listing the packages of %s: %v", m.path, err)
	}
	any := false
	m.imports = map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 4 {
			m.imports[f[0]] = strings.Split(f[3], ",")
		}
		if len(f) < 3 || f[2] == "0" || f[1] == "main" {
			continue
		}
		any = true
		if p := f[0]; !strings.HasSuffix(p, "/internal") && !strings.Contains(p, "/internal/") {
			m.pkgs = append(m.pkgs, p)
		}
	}
	m.released = m.released && any
	return nil
}

// publish writes m at the version into the file-based proxy at dir.
func publish(dir string, m *mod) error {
	esc, err := module.EscapePath(m.path)
	if err != nil {
		return err
	}
	v := filepath.Join(dir, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(v, 0o777); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(v, "list"), []byte(*version+"\n"), 0o666); err != nil {
		return err
	}
	info, _ := json.Marshal(struct{ Version, Time string }{*version, time.Now().UTC().Format(time.RFC3339)})
	if err := os.WriteFile(filepath.Join(v, *version+".info"), info, 0o666); err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(m.dir, "go.mod"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(v, *version+".mod"), gomod, 0o666); err != nil {
		return err
	}
	zf, err := os.Create(filepath.Join(v, *version+".zip"))
	if err != nil {
		return err
	}
	if err := modzip.CreateFromDir(zf, module.Version{Path: m.path, Version: *version}, m.dir); err != nil {
		zf.Close()
		return err
	}
	return zf.Close()
}

// consumerEnv returns the environment of the consumers' go commands: a
// module cache of their own (so that a module of the repository is never
// one cached by an earlier run), filled from the proxy at proxyDir, then
// from the local module cache, then from the usual proxies.
func consumerEnv(tmp, proxyDir string) ([]string, error) {
	out, err := exec.Command("go", "env", "GOPROXY", "GOMODCACHE").Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		return nil, fmt.Errorf("go env: %q", out)
	}
	upstream, cache := lines[0], lines[1]
	proxies := []string{"file://" + filepath.ToSlash(proxyDir)}
	if st, err := os.Stat(filepath.Join(cache, "cache", "download")); err == nil && st.IsDir() {
		proxies = append(proxies, "file://"+filepath.ToSlash(filepath.Join(cache, "cache", "download")))
	}
	for _, p := range strings.FieldsFunc(upstream, func(r rune) bool { return r == ',' || r == '|' }) {
		if p != "off" && p != "direct" {
			proxies = append(proxies, p)
		}
	}
	modcache := filepath.Join(tmp, "modcache")
	// Checksums already looked up stay usable offline.
	if err := os.CopyFS(filepath.Join(modcache, "cache", "download", "sumdb"),
		os.DirFS(filepath.Join(cache, "cache", "download", "sumdb"))); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		for _, k := range []string{"GOFLAGS", "GOPROXY", "GONOPROXY", "GONOSUMDB", "GOPRIVATE", "GOWORK", "GOMODCACHE", "GOTOOLCHAIN"} {
			if strings.HasPrefix(kv, k+"=") {
				return true
			}
		}
		return false
	})
	return append(env,
		"GOFLAGS=-mod=mod",
		"GOPROXY="+strings.Join(proxies, ","),
		"GONOSUMDB="+corePath,
		"GONOPROXY=",
		"GOPRIVATE=",
		"GOWORK=off",
		"GOTOOLCHAIN=local",
		"GOMODCACHE="+modcache,
	), nil
}

// tryConsumer makes consumer c and checks what it gets.
func tryConsumer(tmp string, env []string, c consumer, released []*mod, coreGo string) ([]string, error) {
	fmt.Printf("\n== consumer %s\n", c.name)
	var pkgs []string
	if c.pkgs == nil {
		for _, m := range released {
			pkgs = append(pkgs, m.pkgs...)
		}
	} else {
		for _, p := range c.pkgs {
			pkgs = append(pkgs, path.Join(corePath, p))
		}
	}
	// The modules to go get: those providing the packages, and for the
	// consumer of everything every released module.
	want := map[string]bool{}
	for _, p := range pkgs {
		var best string
		for _, m := range released {
			if (p == m.path || strings.HasPrefix(p, m.path+"/")) && len(m.path) > len(best) {
				best = m.path
			}
		}
		if best == "" {
			return nil, fmt.Errorf("no released module provides %s", p)
		}
		want[best] = true
	}
	if c.pkgs == nil {
		for _, m := range released {
			want[m.path] = true
		}
	}
	dir := filepath.Join(tmp, "consumer-"+c.name)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, err
	}
	gomod := fmt.Sprintf("module example.com/consumer/%s\n\ngo %s\n", c.name, coreGo)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o666); err != nil {
		return nil, err
	}
	var src strings.Builder
	src.WriteString("// Command consumer imports packages of github.com/limitsgo/limits.\npackage main\n\nimport (\n")
	for _, p := range pkgs {
		fmt.Fprintf(&src, "\t_ %q\n", p)
	}
	src.WriteString(")\n\nfunc main() {}\n")
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src.String()), 0o666); err != nil {
		return nil, err
	}
	goCmd := func(args ...string) (string, error) {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = env
		if *verbose {
			fmt.Println("$ go", strings.Join(args, " "))
		}
		return output(cmd)
	}
	get := []string{"get"}
	for _, p := range sortedKeys(want) {
		get = append(get, p+"@"+*version)
	}
	fmt.Printf("go %s\n", strings.Join(get, " "))
	if _, err := goCmd(get...); err != nil {
		return nil, err
	}
	for _, step := range [][]string{{"build", "-o", os.DevNull, "."}, {"mod", "tidy"}, {"build", "-o", os.DevNull, "."}} {
		if _, err := goCmd(step...); err != nil {
			return nil, err
		}
	}
	out, err := goCmd("list", "-m", "-json", "all")
	if err != nil {
		return nil, err
	}
	type listed struct {
		Path, Version, GoVersion string
		Main                     bool
	}
	var all []listed
	for dec := json.NewDecoder(strings.NewReader(out)); dec.More(); {
		var l listed
		if err := dec.Decode(&l); err != nil {
			return nil, fmt.Errorf("go list -m -json all: %v", err)
		}
		all = append(all, l)
	}
	fmt.Printf("go list -m all: %d lines\n", len(all))
	var problems []string
	bad := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf("consumer %s: ", c.name)+fmt.Sprintf(format, args...))
	}
	got := map[string]bool{}
	var ours []string
	maxOther := coreGo
	for _, l := range all {
		if l.Main {
			continue
		}
		got[l.Path] = true
		isOurs := l.Path == corePath || strings.HasPrefix(l.Path, corePath+"/")
		if isOurs {
			ours = append(ours, l.Path+" "+l.Version)
			if l.Version != *version {
				bad("gets %s %s, want %s", l.Path, l.Version, *version)
			}
		} else if gover(l.GoVersion) > gover(maxOther) {
			maxOther = l.GoVersion
		}
		if l.Version == "v0.0.0" {
			bad("gets %s v0.0.0", l.Path)
		}
		for _, d := range c.deny {
			if l.Path == d || strings.HasPrefix(l.Path, d) && (strings.HasSuffix(d, "/") || strings.HasPrefix(l.Path, d+"/")) {
				bad("gets %s %s, which it must not", l.Path, l.Version)
			}
		}
	}
	fmt.Printf("modules of the repository: %s\n", strings.Join(ours, ", "))
	for _, p := range sortedKeys(want) {
		if !got[p] {
			bad("does not get %s", p)
		}
	}
	// The consumer's go directive: raised only as far as a dependency
	// that is not ours requires.
	data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return problems, err
	}
	f, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		return problems, err
	}
	goLine := f.Go.Version
	fmt.Printf("go directive: %s (core: %s; highest of the other modules: %s)\n", goLine, coreGo, maxOther)
	if gover(goLine) > gover(maxOther) {
		var raisers []string
		for _, l := range all {
			if !l.Main && gover(l.GoVersion) > gover(maxOther) {
				raisers = append(raisers, l.Path+" (go "+l.GoVersion+")")
			}
		}
		bad("go directive raised to %s by %s; no other dependency needs more than go %s",
			goLine, strings.Join(raisers, ", "), maxOther)
	}
	return problems, nil
}

// gover returns a Go version in a form that sorts as versions do, for
// versions such as 1.25, 1.25.0 and 1.26.3.
func gover(v string) string {
	if v == "" {
		return ""
	}
	parts := strings.SplitN(v, ".", 3)
	for len(parts) < 3 {
		parts = append(parts, "0")
	}
	for i, p := range parts {
		parts[i] = fmt.Sprintf("%06s", p)
	}
	return strings.Join(parts, ".")
}

// output runs cmd and returns its standard output, or an error holding
// its standard error.
func output(cmd *exec.Cmd) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// removeAll removes dir, module cache included.
func removeAll(dir string) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o777)
		}
		return nil
	})
	os.RemoveAll(dir)
}
