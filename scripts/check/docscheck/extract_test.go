package docscheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMarkdownSnippets checks that only ```go blocks are taken, each with
// the line of its first line.
func TestMarkdownSnippets(t *testing.T) {
	dir := t.TempDir()
	md := "# Title\n\n```sh\ngo test ./...\n```\n\ntext\n\n```go\nx := 1\n_ = x\n```\n\n````go\ny := 2\n```\n````\n"
	if err := os.WriteFile(filepath.Join(dir, "a.md"), []byte(md), 0o666); err != nil {
		t.Fatal(err)
	}
	got, err := markdownSnippets(dir, "a.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d snippets, want 2: %+v", len(got), got)
	}
	if got[0].line != 10 || got[0].src != "x := 1\n_ = x\n" {
		t.Errorf("first snippet: line %d, %q; want line 10, %q", got[0].line, got[0].src, "x := 1\n_ = x\n")
	}
	if got[1].line != 15 || got[1].src != "y := 2\n```\n" {
		t.Errorf("second snippet: line %d, %q; want line 15 with the inner fence", got[1].line, got[1].src)
	}
}

// TestSource checks the file made of a function body: the imports of the
// packages it uses and does not declare, and a line directive to its
// place in the documentation.
func TestSource(t *testing.T) {
	s := snippet{file: "docs/X.md", line: 7, src: "log := limits.NewGCRA(1, time.Second)\nhttp.ListenAndServe(\":80\", nil)\n_ = log\n"}
	src, err := source("/repo", s)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`import "github.com/limitsgo/limits"`, `import "time"`, `import "net/http"`, "//line /repo/docs/X.md:7\nlog := "} {
		if !strings.Contains(src, want) {
			t.Errorf("no %q in\n%s", want, src)
		}
	}
	if strings.Contains(src, `import "log"`) {
		t.Errorf("imports log, which the snippet declares:\n%s", src)
	}
	// A package comment's block that is not Go is skipped; in Markdown,
	// it is an error.
	s = snippet{file: "a/doc.go", line: 3, src: "limits_requests_total{name=\"api\"} 3\n", doc: true}
	if src, err := source("/repo", s); src != "" || err != nil {
		t.Errorf("text in a package comment: %q, %v; want it skipped", src, err)
	}
	s.doc = false
	if _, err := source("/repo", s); err == nil || !strings.HasPrefix(err.Error(), "a/doc.go:3: ") {
		t.Errorf("text in a ```go block: error %v, want one at a/doc.go:3", err)
	}
}
