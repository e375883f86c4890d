package testenv

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The lambdas rule's build line, continued over two lines with quotes in
// -ldflags, comes out as the environment and the arguments `make` runs.
func TestMakefileLambdaBuildReadsTheRule(t *testing.T) {
	dir := t.TempDir()
	mk := "lambdas: ## build\n" +
		"\t@for fn in $(LAMBDAS); do \\\n" +
		"\t  GOOS=linux GOARCH=arm64 CGO_ENABLED=0 go build -tags lambda.norpc,x -trimpath -ldflags='-s -w' \\\n" +
		"\t    -o build/$$fn/bootstrap ./lambdas/$$fn || exit 1; \\\n" +
		"\tdone\n"
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), []byte(mk), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := MakefileLambdaBuild(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.Env, []string{"GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0"}) {
		t.Errorf("env = %q", b.Env)
	}
	if !slices.Equal(b.Args, []string{"-tags", "lambda.norpc,x", "-trimpath", "-ldflags=-s -w"}) {
		t.Errorf("args = %q", b.Args)
	}
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), []byte("all:\n\tgo test ./...\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := MakefileLambdaBuild(dir); err == nil {
		t.Error("a Makefile without the rule parsed")
	}
}
