package story_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/oncepay/oncepay/internal/testkit/story"
)

// newWorld builds a World for a test, skipping outside CI when the local
// cloud is down and failing in CI (the testenv rule).
func newWorld(t *testing.T, o story.Options) *story.World {
	t.Helper()
	w, err := story.New(context.Background(), o)
	if errors.Is(err, story.ErrUnavailable) && os.Getenv("CI") == "" {
		t.Skipf("local cloud unavailable (run `make up`): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// The whole story (docs/mechanism.md#seed-part-13) and its late-original
// branch: the count is the story's, and the table shows every beat.
func TestTheSeedsStoryEndToEnd(t *testing.T) {
	var out strings.Builder
	c, err := story.Run(context.Background(), &out)
	t.Log("\n" + out.String())
	if errors.Is(err, story.ErrUnavailable) && os.Getenv("CI") == "" {
		t.Skipf("local cloud unavailable: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if m := c.StoryMismatch(); len(m) > 0 {
		t.Fatal(m)
	}
	readmeShowsTheRealOutput(t, out.String())
}

// readmeShowsTheRealOutput keeps the README's excerpt of the demo true: each
// of its story lines (rows without their ids column, headings, the count)
// appears in this run's output, in the same order; its other "==" lines are
// printed by cmd/demo.
func readmeShowsTheRealOutput(t *testing.T, got string) {
	t.Helper()
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "## What you will see")
	_, rest, ok2 := strings.Cut(rest, "```text\n")
	excerpt, _, ok3 := strings.Cut(rest, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("README.md: no ```text block under \"## What you will see\"")
	}
	demo, err := os.ReadFile("../../../cmd/demo/main.go")
	if err != nil {
		t.Fatal(err)
	}
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	var lines []string
	for _, l := range strings.Split(got, "\n") {
		lines = append(lines, norm(l))
	}
	at, checked := 0, 0
	for _, want := range strings.Split(excerpt, "\n") {
		want = norm(want)
		switch {
		case want == "" || want == "…" || strings.HasPrefix(want, "time (s) "):
			continue
		case strings.HasPrefix(want, "== ") && !strings.HasPrefix(want, "== final count"):
			if !strings.Contains(string(demo), strings.TrimPrefix(want, "== ")) {
				t.Errorf("README excerpt line %q is not printed by cmd/demo", want)
			}
			continue
		}
		checked++
		i := slices.IndexFunc(lines[at:], func(l string) bool { return l == want || strings.HasPrefix(l, want+" ") })
		if i < 0 {
			t.Errorf("README excerpt line %q is not in the story's output (after line %d)", want, at)
			continue
		}
		at += i + 1
	}
	if checked < 10 {
		t.Errorf("README excerpt: only %d story lines found", checked)
	}
}

// TestTheSeedsCountFlagsADoublePush: a third push under the same replace id
// shows one notification, so only the alert count can catch it.
func TestTheSeedsCountFlagsADoublePush(t *testing.T) {
	c := story.Want
	if m := c.StoryMismatch(); len(m) != 0 {
		t.Fatalf("the story's own count mismatches: %v", m)
	}
	c.Alerts++
	if m := c.StoryMismatch(); len(m) != 1 {
		t.Fatalf("one extra push (%d alerts, 1 shown) gave mismatches %v, want one", c.Alerts, m)
	}
}
