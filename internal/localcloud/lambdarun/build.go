package lambdarun

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// LambdaBuild is the `go build` of the Makefile's lambdas rule: its
// environment assignments (GOOS=linux ...) and its arguments between `build`
// and `-o`. The runner and the tests read it from the Makefile so they build
// exactly what `make lambdas` builds, tags and flags included; only the
// architecture is the host's (aws-lambda-rie runs the bootstrap here).
type LambdaBuild struct {
	Env  []string
	Args []string
}

// Build builds ./lambdas/<fn> into out from the module root; env comes after
// the build's own, so it can override it (GOARCH for the host).
func (b LambdaBuild) Build(root, fn, out string, env ...string) error {
	return b.build(context.Background(), root, []string{"./lambdas/" + fn}, out, env...)
}

// build runs the build of pkgs (module-relative "./..." paths) into out, a
// file for one package or a directory (ending in a slash) for several.
func (b LambdaBuild) build(ctx context.Context, root string, pkgs []string, out string, env ...string) error {
	cmd := exec.CommandContext(ctx, "go", append(append(append([]string{"build"}, b.Args...), "-o", out), pkgs...)...)
	cmd.Dir = root
	cmd.Env = append(append(append(os.Environ(), b.Env...), env...), "GOFLAGS=-buildvcs=false")
	if o, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("lambdarun: build %s: %w\n%s", strings.Join(pkgs, " "), err, o)
	}
	return nil
}

// HostArch is the environment that makes a build produce a bootstrap for
// this machine (the Makefile's is Lambda's arm64).
func HostArch() string { return "GOARCH=" + runtime.GOARCH }

// Build builds the bootstrap of every function (the Makefile's build for the
// host's architecture) into its Bootstrap path, and returns the logical ids
// of the functions whose bootstrap changed. It blocks until the build ends.
//
// All packages are built by one `go build` into a scratch directory and a
// bootstrap is replaced only when its bytes differ: the build is
// reproducible (-trimpath, no build id), so an unchanged source leaves the
// file, and the environments running it, alone. Go's build cache makes the
// build of unchanged packages cheap; only the link is redone.
func Build(ctx context.Context, root string, fns []Function) (changed []string, err error) {
	mk, err := MakefileLambdaBuild(root)
	if err != nil {
		return nil, err
	}
	var pkgs []string
	byBase := map[string]string{}
	for _, f := range fns {
		pkg := "./" + filepath.ToSlash(f.Package)
		if prev, ok := byBase[path.Base(pkg)]; ok && prev != pkg {
			// go build -o dir/ names each binary after its directory.
			return nil, fmt.Errorf("lambdarun: packages %s and %s share a name", prev, pkg)
		}
		if _, ok := byBase[path.Base(pkg)]; !ok {
			pkgs = append(pkgs, pkg)
		}
		byBase[path.Base(pkg)] = pkg
	}
	if len(pkgs) == 0 {
		return nil, nil
	}
	scratch, err := os.MkdirTemp("", "lambdarun-build-")
	if err != nil {
		return nil, fmt.Errorf("lambdarun: build: %w", err)
	}
	defer os.RemoveAll(scratch)
	if err := mk.build(ctx, root, pkgs, scratch+string(filepath.Separator), HostArch()); err != nil {
		return nil, err
	}
	for _, f := range fns {
		built := filepath.Join(scratch, path.Base(filepath.ToSlash(f.Package)))
		same, err := sameFile(built, f.Bootstrap)
		if err != nil {
			return nil, err
		}
		if same {
			continue
		}
		if err := install(built, f.Bootstrap); err != nil {
			return nil, err
		}
		changed = append(changed, f.LogicalID)
	}
	return changed, nil
}

// sameFile reports whether the file at b exists with a's bytes.
func sameFile(a, b string) (bool, error) {
	x, err := os.ReadFile(a)
	if err != nil {
		return false, fmt.Errorf("lambdarun: read built bootstrap: %w", err)
	}
	y, err := os.ReadFile(b)
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("lambdarun: read bootstrap: %w", err)
	}
	return bytes.Equal(x, y), nil
}

// install copies the built file to dst through a rename, so an environment
// starting at that moment execs either the old bootstrap or the new one,
// never half of one.
func install(built, dst string) error {
	b, err := os.ReadFile(built)
	if err != nil {
		return fmt.Errorf("lambdarun: install %s: %w", dst, err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("lambdarun: install %s: %w", dst, err)
	}
	tmp := dst + ".new"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		return fmt.Errorf("lambdarun: install %s: %w", dst, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("lambdarun: install %s: %w", dst, err)
	}
	return nil
}

// Without returns the build without the argument arg, and whether it had it.
func (b LambdaBuild) Without(arg string) (LambdaBuild, bool) {
	i := slices.Index(b.Args, arg)
	if i < 0 {
		return b, false
	}
	return LambdaBuild{Env: slices.Clone(b.Env), Args: slices.Delete(slices.Clone(b.Args), i, i+1)}, true
}

// MakefileLambdaBuild parses the lambdas rule's build line out of
// root/Makefile (the line that writes build/$$fn/bootstrap).
func MakefileLambdaBuild(root string) (LambdaBuild, error) {
	f, err := os.Open(filepath.Join(root, "Makefile"))
	if err != nil {
		return LambdaBuild{}, err
	}
	defer f.Close()
	// A recipe's logical line may continue over several with a trailing
	// backslash; join them before looking.
	var line, cur string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		l := sc.Text()
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		cur += l
		if strings.Contains(cur, "go build") && strings.Contains(cur, "build/$$fn/bootstrap") {
			line = cur
			break
		}
		cur = ""
	}
	if line == "" {
		return LambdaBuild{}, fmt.Errorf("lambdarun: no `go build ... -o build/$$fn/bootstrap` line in the Makefile")
	}
	words := shellWords(line)
	at := -1
	for i := 0; i+1 < len(words); i++ {
		if words[i] == "go" && words[i+1] == "build" {
			at = i
			break
		}
	}
	if at < 0 {
		return LambdaBuild{}, fmt.Errorf("lambdarun: unexpected lambdas build line %q", line)
	}
	var b LambdaBuild
	start := at
	for start > 0 && strings.Contains(words[start-1], "=") && !strings.ContainsAny(words[start-1], ";") {
		start--
	}
	b.Env = append(b.Env, words[start:at]...)
	for _, w := range words[at+2:] {
		if w == "-o" {
			return b, nil
		}
		b.Args = append(b.Args, w)
	}
	return LambdaBuild{}, fmt.Errorf("lambdarun: no -o in lambdas build line %q", line)
}

// shellWords splits a shell line on blanks, honouring single and double
// quotes (enough for a Makefile recipe line; no escapes or expansions).
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	in, quote := false, rune(0)
	for _, r := range strings.TrimSpace(s) {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}
