package lambdarun

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

// Without drops exactly the one argument and leaves the original intact (the
// benchmark builds both); an absent argument is reported, not ignored.
func TestLambdaBuildWithout(t *testing.T) {
	mk := LambdaBuild{Env: []string{"GOOS=linux"}, Args: []string{"-trimpath", "-gcflags=all=-l", "-ldflags=-s -w"}}
	got, ok := mk.Without("-gcflags=all=-l")
	if !ok || !slices.Equal(got.Args, []string{"-trimpath", "-ldflags=-s -w"}) || !slices.Equal(got.Env, mk.Env) {
		t.Errorf("Without = %q, %v", got.Args, ok)
	}
	if !slices.Equal(mk.Args, []string{"-trimpath", "-gcflags=all=-l", "-ldflags=-s -w"}) {
		t.Errorf("the original changed: %q", mk.Args)
	}
	if _, ok := got.Without("-gcflags=all=-l"); ok {
		t.Error("an absent argument was found")
	}
}
