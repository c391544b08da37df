// Package docscheck type-checks the Go snippets of the repository's
// documentation against the working tree of every module.
//
// A snippet is a ```go fenced block of README.md or docs/*.md, or a code
// block of a package comment that parses as Go and uses one of the
// packages it knows by name (imports, in docs_test.go). It is either a
// complete file (it starts with package)
// or a function body; the imports of the packages it uses by name are
// added, and every variable it uses must be declared in it. Errors
// "declared and not used" and "imported and not used" are tolerated.
package docscheck
