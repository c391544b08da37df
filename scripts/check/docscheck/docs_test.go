package docscheck

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
	"golang.org/x/tools/go/packages"
)

// imports maps the package names a snippet may use without importing
// them to their import paths.
var imports = map[string]string{
	"limits":     "github.com/limitsgo/limits",
	"adaptive":   "github.com/limitsgo/limits/adaptive",
	"heavy":      "github.com/limitsgo/limits/heavy",
	"httplimit":  "github.com/limitsgo/limits/httplimit",
	"grpclimit":  "github.com/limitsgo/limits/grpclimit",
	"redislimit": "github.com/limitsgo/limits/redislimit",
	"redistest":  "github.com/limitsgo/limits/redislimit/redistest",
	"limitsprom": "github.com/limitsgo/limits/limitsprom",
	"limitsotel": "github.com/limitsgo/limits/limitsprom/limitsotel",
	"admit":      "github.com/limitsgo/limits/admit",
	"metrics":    "github.com/limitsgo/limits/metrics",
	"pace":       "github.com/limitsgo/limits/pace",
	"quota":      "github.com/limitsgo/limits/quota",

	"context":  "context",
	"errors":   "errors",
	"expvar":   "expvar",
	"fmt":      "fmt",
	"http":     "net/http",
	"httptest": "net/http/httptest",
	"io":       "io",
	"json":     "encoding/json",
	"log":      "log",
	"math":     "math",
	"net":      "net",
	"netip":    "net/netip",
	"os":       "os",
	"signal":   "os/signal",
	"slog":     "log/slog",
	"strconv":  "strconv",
	"strings":  "strings",
	"sync":     "sync",
	"atomic":   "sync/atomic",
	"syscall":  "syscall",
	"testing":  "testing",
	"time":     "time",

	"ginlimit":   "github.com/limitsgo/limits/httplimit/ginlimit",
	"chi":        "github.com/go-chi/chi/v5",
	"echo":       "github.com/labstack/echo/v4",
	"gin":        "github.com/gin-gonic/gin",
	"grpc":       "google.golang.org/grpc",
	"codes":      "google.golang.org/grpc/codes",
	"status":     "google.golang.org/grpc/status",
	"metadata":   "google.golang.org/grpc/metadata",
	"insecure":   "google.golang.org/grpc/credentials/insecure",
	"redis":      "github.com/redis/go-redis/v9",
	"prometheus": "github.com/prometheus/client_golang/prometheus",
	"promhttp":   "github.com/prometheus/client_golang/prometheus/promhttp",
	"otel":       "go.opentelemetry.io/otel",
	"metric":     "go.opentelemetry.io/otel/metric",
	"sdkmetric":  "go.opentelemetry.io/otel/sdk/metric",
}

// A snippet is a piece of Go from the documentation.
type snippet struct {
	file string // relative to the repository's root
	line int    // of the snippet's first line
	src  string
	// doc is whether it comes from a package comment, where a block
	// that is not Go is skipped rather than reported.
	doc bool
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "VERSION")); err != nil {
		t.Fatalf("no repository root at %s: %v", dir, err)
	}
	return dir
}

// markdownSnippets returns the ```go blocks of the Markdown file.
func markdownSnippets(root, rel string) ([]snippet, error) {
	f, err := os.Open(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out   []snippet
		cur   *snippet
		fence string
		lines []string
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case cur == nil && fence == "" && strings.HasPrefix(trimmed, "```"):
			fence = trimmed[:strings.LastIndex(trimmed, "`")+1]
			if strings.TrimSpace(strings.TrimPrefix(trimmed, fence)) == "go" {
				cur = &snippet{file: rel, line: n + 1}
				lines = nil
			}
		case fence != "" && trimmed == fence:
			if cur != nil {
				cur.src = strings.Join(lines, "\n") + "\n"
				out = append(out, *cur)
			}
			cur, fence = nil, ""
		case cur != nil:
			lines = append(lines, line)
		}
	}
	if cur != nil {
		return out, fmt.Errorf("%s:%d: unclosed ```go block", rel, cur.line-1)
	}
	return out, sc.Err()
}

// docSnippets returns the code blocks of the package comments of the
// non-test Go files in dir.
func docSnippets(root, dir string) ([]snippet, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []snippet
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		path := filepath.Join(dir, name)
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil || f.Doc == nil {
			continue
		}
		rel, _ := filepath.Rel(root, path)
		// A code block: a run of lines indented by a tab (or spaces)
		// after the comment marker, with blank lines inside it.
		var block []string
		start := 0
		flush := func() {
			for len(block) > 0 && strings.TrimSpace(block[len(block)-1]) == "" {
				block = block[:len(block)-1]
			}
			if len(block) > 0 {
				out = append(out, snippet{file: rel, line: start, src: dedent(block), doc: true})
			}
			block = nil
		}
		for _, c := range f.Doc.List {
			line := fset.Position(c.Slash).Line
			text, ok := strings.CutPrefix(c.Text, "//")
			if !ok {
				continue // a /* */ comment: not used in this repository
			}
			switch {
			case strings.HasPrefix(text, "\t") || strings.HasPrefix(text, "  "):
				if len(block) == 0 {
					start = line
				}
				block = append(block, text)
			case strings.TrimSpace(text) == "" && len(block) > 0:
				block = append(block, "")
			default:
				flush()
			}
		}
		flush()
	}
	return out, nil
}

func dedent(lines []string) string {
	prefix := ""
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		p := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if prefix == "" || len(p) < len(prefix) {
			prefix = p
		}
	}
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(strings.TrimPrefix(l, prefix))
		b.WriteByte('\n')
	}
	return b.String()
}

// source returns the file that type-checks s, or "" if s, from a package
// comment, is not Go.
func source(root string, s snippet) (string, error) {
	// Errors are reported at the snippet's place in the documentation.
	lineDir := func(line int) string { return fmt.Sprintf("//line %s:%d\n", filepath.Join(root, s.file), line) }
	fset := token.NewFileSet()
	isFile := strings.HasPrefix(strings.TrimSpace(stripComments(s.src)), "package ")
	var (
		f      *ast.File
		err    error
		prefix string
		suffix string
	)
	if isFile {
		f, err = parser.ParseFile(fset, "", s.src, parser.ImportsOnly)
		if err == nil {
			f, err = parser.ParseFile(fset, "", s.src, 0)
		}
	} else {
		// A function body; failing that, declarations.
		prefix, suffix = "package snippet\n\nfunc _() {\n", "}\n"
		f, err = parser.ParseFile(fset, "", prefix+s.src+suffix, 0)
		if err != nil {
			if f2, err2 := parser.ParseFile(fset, "", "package snippet\n\n"+s.src, 0); err2 == nil {
				f, err, prefix, suffix = f2, nil, "package snippet\n\n", ""
			}
		}
	}
	if err != nil {
		if s.doc {
			return "", nil
		}
		return "", fmt.Errorf("%s:%d: not a Go file or function body: %v", s.file, s.line, err)
	}
	// The packages it uses by name but neither declares nor imports.
	have := map[string]bool{}
	for _, im := range f.Imports {
		have[strings.Trim(im.Path.Value, `"`)] = true
	}
	declared := declaredNames(f)
	need := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && !declared[id.Name] {
				if p, ok := imports[id.Name]; ok && !have[p] {
					need[p] = true
				}
			}
		}
		return true
	})
	if s.doc && !isFile && len(need) == 0 {
		return "", nil // Go-like text that uses none of the packages
	}
	var paths []string
	for p := range need {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var b strings.Builder
	if isFile {
		// The imports go after the package clause.
		pkgEnd := fset.Position(f.Name.End()).Offset
		b.WriteString(lineDir(s.line))
		b.WriteString(s.src[:pkgEnd])
		b.WriteString("\n")
		for _, p := range paths {
			fmt.Fprintf(&b, "import %q\n", p)
		}
		b.WriteString(lineDir(s.line + strings.Count(s.src[:pkgEnd], "\n")))
		// Keep the columns of the rest of the line.
		lineStart := strings.LastIndex(s.src[:pkgEnd], "\n") + 1
		b.WriteString(strings.Repeat(" ", pkgEnd-lineStart))
		b.WriteString(s.src[pkgEnd:])
		return b.String(), nil
	}
	b.WriteString(strings.SplitN(prefix, "\n", 2)[0] + "\n\n")
	for _, p := range paths {
		fmt.Fprintf(&b, "import %q\n", p)
	}
	b.WriteString(strings.SplitN(prefix, "\n", 2)[1])
	b.WriteString(lineDir(s.line))
	b.WriteString(s.src)
	b.WriteString(suffix)
	return b.String(), nil
}

// declaredNames returns the names f declares anywhere, so that a
// variable named like a package is not taken for it.
func declaredNames(f *ast.File) map[string]bool {
	names := map[string]bool{}
	add := func(ids ...*ast.Ident) {
		for _, id := range ids {
			if id != nil {
				names[id.Name] = true
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				for _, e := range n.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						add(id)
					}
				}
			}
		case *ast.RangeStmt:
			if n.Tok == token.DEFINE {
				for _, e := range []ast.Expr{n.Key, n.Value} {
					if id, ok := e.(*ast.Ident); ok {
						add(id)
					}
				}
			}
		case *ast.ValueSpec:
			add(n.Names...)
		case *ast.Field:
			add(n.Names...)
		case *ast.TypeSpec:
			add(n.Name)
		case *ast.FuncDecl:
			add(n.Name)
		case *ast.ImportSpec:
			add(n.Name)
		}
		return true
	})
	return names
}

func stripComments(src string) string {
	var b strings.Builder
	for _, l := range strings.Split(src, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "//") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// TestSnippets type-checks every snippet against the working tree.
func TestSnippets(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command:", err)
	}
	root := repoRoot(t)
	var all []snippet
	md, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	md = append([]string{filepath.Join(root, "README.md")}, md...)
	for _, p := range md {
		rel, _ := filepath.Rel(root, p)
		s, err := markdownSnippets(root, rel)
		if err != nil {
			t.Error(err)
		}
		all = append(all, s...)
	}

	// The modules of the repository, for the go.mod of the snippets'
	// module, and the packages' directories, for their comments.
	var mods []*modfile.File
	var modDirs []string
	sums := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			s, err := docSnippets(root, p)
			all = append(all, s...)
			return err
		}
		switch d.Name() {
		case "go.mod":
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			f, err := modfile.ParseLax(p, data, nil)
			if err != nil {
				return err
			}
			mods = append(mods, f)
			modDirs = append(modDirs, filepath.Dir(p))
		case "go.sum":
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, l := range strings.Split(string(data), "\n") {
				if l != "" {
					sums[l] = true
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// A module outside the repository requiring every module of it,
	// replaced by the working tree.
	work := t.TempDir()
	version, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	var gomod strings.Builder
	gomod.WriteString("module example.com/docsnippets\n\ngo 1.26\n\n")
	for i, f := range mods {
		fmt.Fprintf(&gomod, "require %s %s\nreplace %s => %s\n", f.Module.Mod.Path, strings.TrimSpace(string(version)), f.Module.Mod.Path, modDirs[i])
	}
	writeFile(t, filepath.Join(work, "go.mod"), gomod.String())
	var sumLines []string
	for l := range sums {
		sumLines = append(sumLines, l)
	}
	sort.Strings(sumLines)
	writeFile(t, filepath.Join(work, "go.sum"), strings.Join(sumLines, "\n")+"\n")

	var failed []string
	n := 0
	for _, s := range all {
		src, err := source(root, s)
		if err != nil {
			failed = append(failed, err.Error())
			continue
		}
		if src == "" {
			continue
		}
		n++
		dir := filepath.Join(work, fmt.Sprintf("s%03d", n))
		if err := os.Mkdir(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, "snippet.go"), src)
	}
	t.Logf("%d snippets", n)
	if n == 0 {
		t.Fatal("no snippets found")
	}

	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo,
		Dir:  work,
		Env:  append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod"),
	}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != n {
		t.Errorf("loaded %d packages for %d snippets", len(pkgs), n)
	}
	seen := map[string]bool{}
	for _, p := range pkgs {
		for _, e := range p.Errors {
			msg := e.Msg
			if e.Kind == packages.ListError && strings.HasPrefix(msg, "# ") {
				continue // the compiler's report of the type errors below
			}
			if e.Kind == packages.TypeError && (strings.HasSuffix(msg, "declared and not used") ||
				strings.Contains(msg, "declared and not used:") || strings.Contains(msg, "imported and not used")) {
				continue
			}
			pos := e.Pos
			if pos == "" || pos == "-" {
				pos = p.PkgPath
			}
			report := strings.TrimPrefix(pos, root+string(filepath.Separator)) + ": " + msg
			if !seen[report] {
				seen[report] = true
				failed = append(failed, report)
			}
		}
	}
	sortByPlace(failed)
	for _, f := range failed {
		t.Error(f)
	}
}

// sortByPlace sorts reports "file:line: message" by file, then line.
func sortByPlace(reports []string) {
	place := func(r string) (string, int) {
		f := strings.SplitN(r, ":", 3)
		if len(f) < 3 {
			return r, 0
		}
		n, _ := strconv.Atoi(f[1])
		return f[0], n
	}
	sort.SliceStable(reports, func(i, j int) bool {
		fi, li := place(reports[i])
		fj, lj := place(reports[j])
		if fi != fj {
			return fi < fj
		}
		return li < lj
	})
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o666); err != nil {
		t.Fatal(err)
	}
}
