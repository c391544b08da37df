package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckRequires checks the go.mod rules on a small repository: a
// sibling required at another version, a replace missing for a module in
// the graph, and one pointing elsewhere are reported, with the place;
// the right layout is not.
func TestCheckRequires(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, data string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	*root, *version = dir, "v0.1.0"
	write("go.mod", "module github.com/limitsgo/limits\n\ngo 1.25\n")
	write("a/go.mod", "module github.com/limitsgo/limits/a\n\ngo 1.25\n\nrequire github.com/limitsgo/limits v0.1.0\n\nreplace github.com/limitsgo/limits => ../\n")
	// b requires a, whose graph holds the core: b must replace both.
	good := "module github.com/limitsgo/limits/b\n\ngo 1.25\n\nrequire github.com/limitsgo/limits/a v0.1.0\n\nreplace (\n\tgithub.com/limitsgo/limits => ../\n\tgithub.com/limitsgo/limits/a => ../a\n)\n"
	write("b/go.mod", good)
	mods, err := findModules(dir)
	if err != nil {
		t.Fatal(err)
	}
	if problems := checkRequires(mods); len(problems) != 0 {
		t.Fatalf("the right layout: %q", problems)
	}

	for _, c := range []struct {
		name, gomod, want string
	}{
		{"v0.0.0", strings.Replace(good, "a v0.1.0", "a v0.0.0", 1),
			"b/go.mod:5: requires github.com/limitsgo/limits/a v0.0.0, want v0.1.0"},
		{"indirect sibling not replaced", strings.Replace(good, "\tgithub.com/limitsgo/limits => ../\n", "", 1),
			"b/go.mod: github.com/limitsgo/limits is in the module's graph but not replaced"},
		{"replaced elsewhere", strings.Replace(good, "=> ../a", "=> ../c", 1),
			"b/go.mod:9: replaces github.com/limitsgo/limits/a by ../c , want its directory ../a"},
	} {
		t.Run(c.name, func(t *testing.T) {
			write("b/go.mod", c.gomod)
			mods, err := findModules(dir)
			if err != nil {
				t.Fatal(err)
			}
			problems := checkRequires(mods)
			if len(problems) != 1 || !strings.HasPrefix(problems[0], c.want) {
				t.Errorf("problems %q, want one starting %q", problems, c.want)
			}
		})
	}
}

// TestGover checks that Go versions compare as versions.
func TestGover(t *testing.T) {
	for _, c := range [][2]string{{"1.25", "1.26.0"}, {"1.9", "1.25"}, {"1.26.0", "1.26.1"}} {
		if !(gover(c[0]) < gover(c[1])) {
			t.Errorf("gover(%s) >= gover(%s)", c[0], c[1])
		}
	}
	if gover("1.25") != gover("1.25.0") {
		t.Error("1.25 and 1.25.0 differ")
	}
}

// TestCheckInternal checks the rule for internal packages across modules
// on a small repository: a released module importing another's internal
// package is reported, unless a paragraph of RELEASING.md names both; an
// import of its own internal package, one from a test, and one from a
// module that is not released are not.
func TestCheckInternal(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, data string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	*root, *version = dir, "v0.1.0"
	write("go.mod", "module github.com/limitsgo/limits\n\ngo 1.25\n")
	write("core.go", "package limits\n\nimport _ \"github.com/limitsgo/limits/internal/x\"\n")
	write("internal/x/x.go", "package x\n")
	const requireCore = "\n\ngo 1.25\n\nrequire github.com/limitsgo/limits v0.1.0\n\nreplace github.com/limitsgo/limits => "
	// a imports the core's internal package, and its own.
	write("a/go.mod", "module github.com/limitsgo/limits/a"+requireCore+"../\n")
	write("a/a.go", "package a\n\nimport (\n\t_ \"github.com/limitsgo/limits/a/internal/y\"\n\t_ \"github.com/limitsgo/limits/internal/x\"\n)\n")
	write("a/internal/y/y.go", "package y\n")
	// b imports it from a test only.
	write("b/go.mod", "module github.com/limitsgo/limits/b"+requireCore+"../\n")
	write("b/b.go", "package b\n")
	write("b/b_test.go", "package b\n\nimport _ \"github.com/limitsgo/limits/internal/x\"\n")
	// examples/c is not released.
	write("examples/c/go.mod", "module github.com/limitsgo/limits/examples/c"+requireCore+"../../\n")
	write("examples/c/c.go", "package c\n\nimport _ \"github.com/limitsgo/limits/internal/x\"\n")
	mods, err := findModules(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		if err := listPackages(m); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name, doc string
		want      int
	}{
		{"not stated", "# Modules\n\n`a` is a module.\n\nThe core has `internal/x`.\n", 1},
		{"stated", "# Modules\n\n`a` imports the core's\n`internal/x`: they are released in lockstep.\n", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			problems := checkInternal(mods, c.doc)
			if len(problems) != c.want {
				t.Fatalf("problems %q, want %d", problems, c.want)
			}
			if c.want == 1 && !strings.HasPrefix(problems[0], "github.com/limitsgo/limits/a imports github.com/limitsgo/limits/internal/x, ") {
				t.Errorf("problem %q, want one about a importing internal/x", problems[0])
			}
		})
	}
}
