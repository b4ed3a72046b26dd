// Package toybox_test holds the repository-wide checks: every package has
// exactly one package doc comment, and imports point the way
// ARCHITECTURE.md says.
package toybox_test

import (
	"encoding/json"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

type pkg struct {
	ImportPath string
	Dir        string
	Name       string
	GoFiles    []string
	CgoFiles   []string
	Imports    []string
	Deps       []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	var pkgs []pkg
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// maxDocWords is the most words a package doc's first sentence may have
// (STYLE.md §16: one plain sentence under ~15 words).
const maxDocWords = 15

// firstSentence is doc's text up to the end of its first sentence.
func firstSentence(doc string) string {
	text := strings.Join(strings.Fields(doc), " ")
	if i := strings.Index(text+" ", ". "); i >= 0 {
		return text[:i+1]
	}
	return text
}

// TestPackageDocs fails when a package has no doc comment or more than one,
// or when its first sentence is longer than maxDocWords.
func TestPackageDocs(t *testing.T) {
	for _, p := range listPackages(t) {
		if len(p.GoFiles)+len(p.CgoFiles) == 0 {
			continue // tests only
		}
		var with []string
		for _, f := range append(append([]string{}, p.GoFiles...), p.CgoFiles...) {
			path := filepath.Join(p.Dir, f)
			af, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if af.Doc != nil && strings.TrimSpace(af.Doc.Text()) != "" {
				with = append(with, f)
				if first := firstSentence(af.Doc.Text()); len(strings.Fields(first)) > maxDocWords {
					t.Errorf("%s: the package doc opens with %d words; want at most %d in its first sentence: %q", path, len(strings.Fields(first)), maxDocWords, first)
				}
			}
		}
		switch {
		case len(with) == 0:
			t.Errorf("%s: no package doc comment", p.ImportPath)
		case len(with) > 1:
			t.Errorf("%s: package doc comment in %d files %v; want exactly one", p.ImportPath, len(with), with)
		}
	}
}

// rules: a package (prefix) may not depend on these, and why.
var rules = []struct {
	from, forbidden, why string
}{
	{"toybox/labels", "toybox/", "labels is pure values: it imports nothing of toybox"},
	{"toybox/schema", "toybox/labels", "schema is the contract alone"},
	{"toybox/schema", "toybox/switchboard", "schema is the contract alone"},
	{"toybox/schema", "toybox/vat", "schema is the contract alone"},
	{"toybox/switchboard", "toybox/vat", "switchboard and vat meet only through schema"},
	{"toybox/vat", "toybox/switchboard", "switchboard and vat meet only through schema"},
	{"toybox/switchboard", "toybox/cmd", "cmd is a leaf: nothing imports a main"},
	{"toybox/vat", "toybox/cmd", "cmd is a leaf: nothing imports a main"},
	{"toybox/examples", "toybox/vat", "examples are vats: they see only the schema"},
	{"toybox/examples", "toybox/switchboard", "examples are vats: they see only the schema"},
}

// TestImportDirection checks the one-way dependencies of ARCHITECTURE.md.
func TestImportDirection(t *testing.T) {
	for _, p := range listPackages(t) {
		for _, r := range rules {
			if p.ImportPath != r.from && !strings.HasPrefix(p.ImportPath, r.from+"/") {
				continue
			}
			for _, d := range p.Deps {
				if strings.HasPrefix(d, r.forbidden) && !strings.HasPrefix(d, r.from) {
					t.Errorf("%s depends on %s: %s", p.ImportPath, d, r.why)
				}
			}
		}
		if p.ImportPath == "toybox/labels" || strings.HasPrefix(p.ImportPath, "toybox/labels/") {
			for _, d := range p.Deps {
				if strings.Contains(strings.SplitN(d, "/", 2)[0], ".") && !strings.HasPrefix(d, "golang.org/x/net/idna") && !strings.HasPrefix(d, "golang.org/x/text/") {
					t.Errorf("%s depends on %s: labels may use only the standard library and x/net/idna", p.ImportPath, d)
				}
				if d == "testing" {
					t.Errorf("%s imports testing in non-test code", p.ImportPath)
				}
			}
		}
	}
}
