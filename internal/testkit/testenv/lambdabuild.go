package testenv

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// LambdaBuild is the `go build` of the Makefile's lambdas rule: its
// environment assignments (GOOS=linux ...) and its arguments between `build`
// and `-o`. Tests that build a bootstrap read it from the Makefile so they
// build exactly what `make lambdas` builds, tags and flags included.
type LambdaBuild struct {
	Env  []string
	Args []string
}

// Build builds ./lambdas/<fn> into out from the module root; env comes after
// the build's own, so it can override it (GOARCH for the host).
func (b LambdaBuild) Build(root, fn, out string, env ...string) error {
	cmd := exec.Command("go", append(append([]string{"build"}, b.Args...), "-o", out, "./lambdas/"+fn)...)
	cmd.Dir = root
	cmd.Env = append(append(append(os.Environ(), b.Env...), env...), "GOFLAGS=-buildvcs=false")
	if o, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %w\n%s", fn, err, o)
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
		return LambdaBuild{}, fmt.Errorf("testenv: no `go build ... -o build/$$fn/bootstrap` line in the Makefile")
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
		return LambdaBuild{}, fmt.Errorf("testenv: unexpected lambdas build line %q", line)
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
	return LambdaBuild{}, fmt.Errorf("testenv: no -o in lambdas build line %q", line)
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
