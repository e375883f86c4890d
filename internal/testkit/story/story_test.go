package story_test

import (
	"context"
	"errors"
	"os"
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
}

// TestTheSeedsCountFlagsADoublePush: a third push under the same replace id
// shows one notification, so only the alert count can catch it.
func TestTheSeedsCountFlagsADoublePush(t *testing.T) {
	c := story.Want
	if m := c.StoryMismatch(); len(m) != 0 {
		t.Fatalf("the seed's own count mismatches: %v", m)
	}
	c.Alerts++
	if m := c.StoryMismatch(); len(m) != 1 {
		t.Fatalf("one extra push (%d alerts, 1 shown) gave mismatches %v, want one", c.Alerts, m)
	}
}
