package infratests

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// citable are the files a reader of the repository reads: sources, docs,
// scripts, migrations, the Makefile.
func citable(t *testing.T) map[string]string {
	t.Helper()
	skip := map[string]bool{".git": true, "_tools": true, ".local": true, "cdk.out": true, "cdk.out.variants": true,
		"build": true, "bench-out": true, "node_modules": true, "testdata": true}
	files := map[string]string{}
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skip[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(p) {
		case ".go", ".md", ".sh", ".sql", ".yaml", ".json":
		default:
			if d.Name() != "Makefile" {
				return nil
			}
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(strings.TrimPrefix(p, "../"))] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestCitationsResolveInsideTheRepository keeps issue 20's rule: the code and
// the docs cite docs/mechanism.md's anchors, never the source document's
// Parts or the design notes' sections (neither is in the repository), and
// every cited anchor exists. docs/mechanism.md's citation table, the
// glossary's and the changelog's mentions of the old form are the exceptions.
func TestCitationsResolveInsideTheRepository(t *testing.T) {
	files := citable(t)
	mech, ok := files["docs/mechanism.md"]
	if !ok {
		t.Fatal("docs/mechanism.md not found")
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`<a id="([^"]+)"></a>`).FindAllStringSubmatch(mech, -1) {
		anchors[m[1]] = true
	}
	if len(anchors) < 20 {
		t.Fatalf("docs/mechanism.md has %d anchors", len(anchors))
	}
	old := regexp.MustCompile(`seed Parts? [0-9]|DESIGN §|DESIGN\.md|seed Formula|\(Part [0-9]+\)`)
	cite := regexp.MustCompile(`mechanism\.md#([A-Za-z0-9_-]+)`)
	exempt := map[string]bool{"docs/mechanism.md": true, "docs/glossary.md": true, "CHANGELOG.md": true, "infra-tests/citations_test.go": true}
	for _, bad := range []string{"the guard (seed Part 3)", "see DESIGN §4", "(seed Formula 2)"} {
		if !old.MatchString(bad) {
			t.Fatalf("the check misses %q", bad)
		}
	}
	for name, text := range files {
		for i, line := range strings.Split(text, "\n") {
			if !exempt[name] && old.MatchString(line) {
				t.Errorf("%s:%d cites the source document or the design notes: %q", name, i+1, strings.TrimSpace(line))
			}
			for _, m := range cite.FindAllStringSubmatch(line, -1) {
				if !anchors[m[1]] && !strings.HasSuffix(m[1], "-N") { // "-N": the form, described
					t.Errorf("%s:%d cites docs/mechanism.md#%s, which has no such anchor", name, i+1, m[1])
				}
			}
		}
	}
}
