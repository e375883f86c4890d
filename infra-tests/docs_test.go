package infratests

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The documents whose commands a reader types: the README and docs/*.md.
func docFiles(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../README.md"}, docs...)
}

// makeTargets reads the targets a Makefile defines: every line that starts
// with one or more names followed by a single ':' (a rule, or a
// target-specific variable such as `bench: export CI = true`). Variable
// assignments (`:=`, `::=`), special targets (`.PHONY`), pattern rules and
// targets named through a variable (`$(TEMPLATE):`) are not targets a
// reader types.
func makeTargets(makefile string) map[string]bool {
	rule := regexp.MustCompile(`^([A-Za-z0-9_][A-Za-z0-9_.-]*(?:[ \t]+[A-Za-z0-9_][A-Za-z0-9_.-]*)*)[ \t]*:([^:=]|$)`)
	targets := map[string]bool{}
	for _, line := range strings.Split(makefile, "\n") {
		m := rule.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		for _, name := range strings.Fields(m[1]) {
			targets[name] = true
		}
	}
	return targets
}

// docCommand is one command a document tells its reader to run.
type docCommand struct {
	where string // file:line
	kind  string // "make" or "go run"
	name  string // the make target, or the cmd directory
}

// fencedCommands returns the commands of a markdown document's fenced code
// blocks: every shell segment (split at &&, ||, ;, | and "$(") that starts
// with `make` (its first target, after flags and VAR=value assignments) or
// `go run ./cmd/<x>`. A leading "$ " prompt is ignored.
func fencedCommands(name, text string) []docCommand {
	var out []docCommand
	split := regexp.MustCompile(`&&|\|\||;|\||\$\(`)
	fence := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if fence == "" {
			for _, f := range []string{"```", "~~~"} {
				if strings.HasPrefix(line, f) {
					fence = f
				}
			}
			continue
		}
		if strings.HasPrefix(line, fence) {
			fence = ""
			continue
		}
		for _, seg := range split.Split(line, -1) {
			seg = strings.TrimPrefix(strings.TrimSpace(seg), "$ ")
			seg = strings.TrimRight(seg, ") ")
			where := fmt.Sprintf("%s:%d", strings.TrimPrefix(name, "../"), n)
			fields := strings.Fields(seg)
			switch {
			case len(fields) >= 2 && fields[0] == "make":
				for _, f := range fields[1:] {
					if f == "#" || strings.HasPrefix(f, "#") {
						break
					}
					if strings.HasPrefix(f, "-") || strings.Contains(f, "=") {
						continue
					}
					out = append(out, docCommand{where: where, kind: "make", name: f})
					break
				}
			case len(fields) >= 3 && fields[0] == "go" && fields[1] == "run" && strings.HasPrefix(fields[2], "./cmd/"):
				dir := strings.TrimSuffix(strings.TrimPrefix(fields[2], "./cmd/"), "/")
				out = append(out, docCommand{where: where, kind: "go run", name: dir})
			}
		}
	}
	return out
}

// brokenCommands lists every command that names no Makefile target or no
// cmd directory.
func brokenCommands(cmds []docCommand, targets map[string]bool, cmdExists func(string) bool) []string {
	var bad []string
	for _, c := range cmds {
		switch {
		case c.kind == "make" && !targets[c.name]:
			bad = append(bad, fmt.Sprintf("%s: make %s: the Makefile defines no target %q", c.where, c.name, c.name))
		case c.kind == "go run" && !cmdExists(c.name):
			bad = append(bad, fmt.Sprintf("%s: go run ./cmd/%s: there is no command cmd/%s", c.where, c.name, c.name))
		}
	}
	return bad
}

// cmdDirExists reports a cmd/<name> directory holding Go files.
func cmdDirExists(name string) bool {
	if name == "" || strings.ContainsAny(name, `/\`) {
		return false
	}
	files, _ := filepath.Glob(filepath.Join("..", "cmd", name, "*.go"))
	return len(files) > 0
}

// TestTheDocsCommandsNameRealTargetsAndCommands keeps what the README and
// docs/*.md tell a reader to type runnable: every `make <target>` in a
// fenced block names a target the Makefile defines, and every
// `go run ./cmd/<x>` a command that exists.
func TestTheDocsCommandsNameRealTargetsAndCommands(t *testing.T) {
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	targets := makeTargets(string(mk))
	if len(targets) < 10 || !targets["up"] || !targets["inspect"] {
		t.Fatalf("read only %d targets from the Makefile (%v): the parser is looking at the wrong file", len(targets), targets)
	}
	var cmds []docCommand
	for _, f := range docFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, fencedCommands(f, string(b))...)
	}
	var makes, runs int
	for _, c := range cmds {
		if c.kind == "make" {
			makes++
		} else {
			runs++
		}
	}
	if makes < 5 || runs < 5 {
		t.Fatalf("found %d make and %d go run commands in the docs: the parser found too few to be checking anything", makes, runs)
	}
	for _, b := range brokenCommands(cmds, targets, cmdDirExists) {
		t.Error(b)
	}
	t.Logf("checked %d make and %d go run commands against %d targets", makes, runs, len(targets))
}

// TestTheDocsCheckCatchesMadeUpCommands keeps the check able to fail: a
// made-up target, a made-up command and the forms the parser must read
// (flags, variables, $(...), &&, prompts, fences of both kinds) each give
// the verdict they should.
func TestTheDocsCheckCatchesMadeUpCommands(t *testing.T) {
	targets := makeTargets(strings.Join([]string{
		"LOCAL    := $(CURDIR)/.local",
		"RUNS ?= 500",
		".PHONY: up down ghost",
		"up: setup $(TEMPLATE) ## start",
		"down: ## stop",
		"bench: export CI = true",
		"$(TEMPLATE): $(GO_SRC)",
		"a b: c",
		"\t@echo not: a target",
	}, "\n"))
	want := []string{"a", "b", "bench", "down", "up"}
	var got []string
	for k := range targets {
		got = append(got, k)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("makeTargets = %v, want %v", got, want)
	}
	cmdExists := func(name string) bool { return name == "inspect" }
	for _, tc := range []struct {
		name, doc string
		broken    int
	}{
		{"a real target", "```sh\nmake up\n```\n", 0},
		{"a made-up target", "```sh\nmake no-such-target\n```\n", 1},
		{"a .PHONY name without a rule", "```sh\nmake ghost\n```\n", 1},
		{"flags and variables before the target", "```\nmake -s BENCHTIME=1x no-such-target\n```\n", 1},
		{"inside $(...)", "```sh\nTOKEN=$(make -s nope CALLER=u1)\n```\n", 1},
		{"after &&", "```sh\nmake down && make nope\n```\n", 1},
		{"a prompt", "```console\n$ make nope\n```\n", 1},
		{"a tilde fence", "~~~\nmake nope\n~~~\n", 1},
		{"outside a fence", "run `make nope` first\nmake nope\n", 0},
		{"a real command", "```sh\ngo run ./cmd/inspect --payment pay_1\n```\n", 0},
		{"a made-up command", "```sh\ngo run ./cmd/nosuch --flag\n```\n", 1},
		{"a comment after the target", "```sh\nmake up   # make nope\n```\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := brokenCommands(fencedCommands("doc.md", tc.doc), targets, cmdExists)
			if len(bad) != tc.broken {
				t.Errorf("%d broken commands %v, want %d", len(bad), bad, tc.broken)
			}
		})
	}
	if !cmdDirExists("inspect") || cmdDirExists("no-such-command") || cmdDirExists("../internal") {
		t.Error("cmdDirExists does not tell the repository's commands from made-up ones")
	}
}
