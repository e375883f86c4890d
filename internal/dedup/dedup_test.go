package dedup_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/dedup"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func gate(t *testing.T, c dedup.Cache, cfg dedup.Config) (*dedup.Gate, *bytes.Buffer) {
	t.Helper()
	emf := &bytes.Buffer{}
	cfg.Logger, cfg.Metrics = quiet, metrics.New(emf, "worker")
	if cfg.Timeout == 0 {
		// The tests of what the gate decides must not fail open because a
		// loaded CI machine answered in 600 ms (the pool's own 1 s bounds
		// a dead primary whatever this is).
		cfg.Timeout = 5 * time.Second
	}
	g, err := dedup.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g, emf
}

var now = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

// Two declines of the same card within the window raise one reminder; a
// decline of another card is another reminder; once the window has passed
// the same card raises one again.
func TestTheSameReasonWithinTheWindowGoesOutOnce(t *testing.T) {
	g, emf := gate(t, testenv.Cache(t), dedup.Config{Window: time.Second})
	who := "u-" + testenv.RandomID(6)
	card := dedup.Message{Recipient: who, Template: "card-declined-reminder", Key: "pm_card_visa"}
	if v := g.Accept(context.Background(), card, "ev1", now); v != dedup.Send {
		t.Fatalf("first: %s", v)
	}
	if v := g.Accept(context.Background(), card, "ev2", now); v != dedup.Duplicate {
		t.Fatalf("second within the window: %s", v)
	}
	other := card
	other.Key = "pm_card_mastercard"
	if v := g.Accept(context.Background(), other, "ev3", now); v != dedup.Send {
		t.Fatalf("another card: %s", v)
	}
	time.Sleep(1100 * time.Millisecond)
	if v := g.Accept(context.Background(), card, "ev4", now); v != dedup.Send {
		t.Fatalf("after the window: %s", v)
	}
	if !strings.Contains(emf.String(), `"DedupDropped":1`) {
		t.Errorf("the dropped duplicate was not counted: %s", emf.String())
	}
}

// The cap is counted once, at accept, after dedup: a user at their cap
// gets no more, and a dropped duplicate did not use up the allowance.
func TestACapCountsOnlyWhatWentOut(t *testing.T) {
	g, _ := gate(t, testenv.Cache(t), dedup.Config{Cap: 2})
	who := "u-" + testenv.RandomID(6)
	msg := func(card string) dedup.Message {
		return dedup.Message{Recipient: who, Template: "card-declined-reminder", Key: card}
	}
	for i, c := range []struct {
		card, want string
	}{{"pm_a", dedup.Send}, {"pm_a", dedup.Duplicate}, {"pm_b", dedup.Send}, {"pm_c", dedup.Capped}} {
		if v := g.Accept(context.Background(), msg(c.card), fmt.Sprint("ev", i), now); v != c.want {
			t.Fatalf("message %d (%s): %s, want %s", i, c.card, v, c.want)
		}
	}
	// The next period starts a new allowance, and C, capped yesterday and
	// never sent, is not taken for a duplicate of itself.
	if v := g.Accept(context.Background(), msg("pm_c"), "ev4", now.Add(24*time.Hour)); v != dedup.Send {
		t.Fatalf("the capped card the next day: %s", v)
	}
}

// Asking again for the same event gets the same answer and counts once:
// the worker that died between the gate and the send, or the sweep
// finishing its row, is let through, not dropped as its own duplicate.
func TestTheSameEventAskingAgainGetsTheSameAnswer(t *testing.T) {
	g, emf := gate(t, testenv.Cache(t), dedup.Config{Cap: 1})
	who := "u-" + testenv.RandomID(6)
	a := dedup.Message{Recipient: who, Template: "card-declined-reminder", Key: "pm_a"}
	b := dedup.Message{Recipient: who, Template: "card-declined-reminder", Key: "pm_b"}
	for i := range 3 {
		if v := g.Accept(context.Background(), a, "evA", now); v != dedup.Send {
			t.Fatalf("evA, ask %d: %s", i, v)
		}
	}
	for i := range 2 {
		if v := g.Accept(context.Background(), b, "evB", now); v != dedup.Capped {
			t.Fatalf("evB, ask %d: %s, want capped (evA holds the one place, once)", i, v)
		}
	}
	if v := g.Accept(context.Background(), a, "evA2", now); v != dedup.Duplicate {
		t.Fatalf("another event for card A: %s", v)
	}
	if strings.Contains(emf.String(), "DedupFailOpen") {
		t.Errorf("failed open: %s", emf.String())
	}
}

// An event asking again after its fingerprint expired (a window shorter
// than the cap's period: a sweep's retry hours later) is counted against
// the cap once: the period's count remembers which events it holds.
func TestAnEventAskingAgainAfterItsWindowIsNotCountedTwice(t *testing.T) {
	g, _ := gate(t, testenv.Cache(t), dedup.Config{Cap: 1, Window: time.Second})
	m := dedup.Message{Recipient: "u-" + testenv.RandomID(6), Template: "card-declined-reminder", Key: "pm_a"}
	if v := g.Accept(context.Background(), m, "evA", now); v != dedup.Send {
		t.Fatalf("first ask: %s", v)
	}
	time.Sleep(1100 * time.Millisecond) // the fingerprint's window passes
	if v := g.Accept(context.Background(), m, "evA", now); v != dedup.Send {
		t.Fatalf("the same event after its window: %s, want send (it already holds its place under the cap)", v)
	}
}

// The cache down: the message goes out (a duplicate reminder is better
// than a lost one), counted.
func TestACacheThatCannotBeReachedFailsOpen(t *testing.T) {
	down, err := dedup.NewRedis("redis://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = down.Close() })
	g, emf := gate(t, down, dedup.Config{})
	if v := g.Accept(context.Background(), dedup.Message{Recipient: "u1", Template: "t", Key: "k"}, "ev1", now); v != dedup.FailOpen || !dedup.Goes(v) {
		t.Fatalf("%s, want fail-open", v)
	}
	if !strings.Contains(emf.String(), `"DedupFailOpen":1`) {
		t.Errorf("not counted: %s", emf.String())
	}
}

// oddCache answers a verdict the gate does not know (a script of another
// version, a proxy in the way).
type oddCache struct{}

func (oddCache) Admit(context.Context, dedup.Admission) (string, error) { return "weird", nil }

func (oddCache) Release(context.Context, string, string) (bool, error) { return false, nil }

// A verdict the gate does not know is no verdict: the message goes out,
// counted, rather than being dropped on an answer nobody decided.
func TestAnAnswerTheGateDoesNotKnowFailsOpen(t *testing.T) {
	g, emf := gate(t, oddCache{}, dedup.Config{})
	if v := g.Accept(context.Background(), dedup.Message{Recipient: "u1", Template: "t", Key: "k"}, "ev1", now); v != dedup.FailOpen {
		t.Fatalf("%s, want fail-open", v)
	}
	if metrics.Sum(emf.Bytes(), "DedupFailOpen") != 1 {
		t.Errorf("not counted: %s", emf.String())
	}
}

// What the cache holds names no one: the keys are hashes of the recipient,
// the template and the business key.
func TestTheCacheHoldsNoReadableRecipientOrCard(t *testing.T) {
	c := testenv.Cache(t)
	g, _ := gate(t, c, dedup.Config{})
	who := "u-" + testenv.RandomID(6)
	if v := g.Accept(context.Background(), dedup.Message{Recipient: who, Template: "card-declined-reminder", Key: "pm_secret_card"}, "ev1", now); v != dedup.Send {
		t.Fatalf("%s: the gate wrote nothing to look at", v)
	}
	raw, err := c.Do(context.Background(), "KEYS", "*")
	if err != nil {
		t.Fatal(err)
	}
	keys := raw.([]any)
	if len(keys) < 2 {
		t.Fatalf("%d keys, want at least the fingerprint and the cap", len(keys))
	}
	for _, r := range keys {
		k := string(r.([]byte))
		if strings.Contains(k, who) || strings.Contains(k, "pm_secret_card") {
			t.Errorf("key %q names the recipient or the card", k)
		}
	}
}

// An event let through at 23:59:50 asks again after midnight (its worker
// died before recording the send; the sweep finishes it) with the next
// day's cap already spent: it is let through again, not capped, and its
// fingerprint still stops the card's next decline. The answer for one
// event does not change with the day.
func TestTheSameEventIsAnsweredTheSameAcrossMidnight(t *testing.T) {
	g, _ := gate(t, testenv.Cache(t), dedup.Config{Cap: 1})
	who := "u-" + testenv.RandomID(6)
	msg := func(card string) dedup.Message {
		return dedup.Message{Recipient: who, Template: "card-declined-reminder", Key: card}
	}
	late := time.Date(2026, 12, 4, 23, 59, 50, 0, time.UTC)
	if v := g.Accept(context.Background(), msg("pm_a"), "evA", late); v != dedup.Send {
		t.Fatalf("evA: %s", v)
	}
	next := late.Add(time.Minute)
	if v := g.Accept(context.Background(), msg("pm_b"), "evB", next); v != dedup.Send {
		t.Fatalf("evB, the next day's first: %s", v)
	}
	if v := g.Accept(context.Background(), msg("pm_a"), "evA", next); v != dedup.Send {
		t.Fatalf("evA asking again after midnight: %s, want send (its answer of yesterday)", v)
	}
	if v := g.Accept(context.Background(), msg("pm_a"), "evA2", next); v != dedup.Duplicate {
		t.Fatalf("card A's next decline: %s, want its duplicate", v)
	}
}

// A message let through whose send did not go out gives its fingerprint
// back: the card's next decline is let through, not dropped as the
// duplicate of a reminder nobody got. Only the owner's hold is released:
// another event asking to release it changes nothing, and the released
// owner asking again (the sweep's retry) is answered as any newcomer.
func TestAReleasedFingerprintLetsTheNextMessageThrough(t *testing.T) {
	c := testenv.Cache(t)
	g, emf := gate(t, c, dedup.Config{Cap: 2})
	m := dedup.Message{Recipient: "u-" + testenv.RandomID(6), Template: "card-declined-reminder", Key: "pm_a"}
	if v := g.Accept(context.Background(), m, "evA", now); v != dedup.Send {
		t.Fatalf("evA: %s", v)
	}
	// Not evB's to release: evA keeps it.
	if err := g.Release(context.Background(), m, "evB"); err != nil {
		t.Fatal(err)
	}
	if v := g.Accept(context.Background(), m, "evB", now); v != dedup.Duplicate {
		t.Fatalf("evB while evA holds the card: %s", v)
	}
	if err := g.Release(context.Background(), m, "evA"); err != nil {
		t.Fatal(err)
	}
	held, err := c.Do(context.Background(), "EXISTS", "dedup:"+m.Fingerprint())
	if err != nil || held.(int64) != 0 {
		t.Fatalf("the fingerprint is still held after evA released it: %v %v", held, err)
	}
	if v := g.Accept(context.Background(), m, "evC", now); v != dedup.Send {
		t.Fatalf("the next decline after the release: %s, want send", v)
	}
	if v := g.Accept(context.Background(), m, "evA", now); v != dedup.Duplicate {
		t.Fatalf("evA asking again after evC took the card: %s, want duplicate", v)
	}
	if metrics.Sum(emf.Bytes(), "DedupReleased") != 1 {
		t.Errorf("want one release counted: %s", emf.String())
	}
}
