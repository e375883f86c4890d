package story_test

// Lost replies on the refund intent's and the resolve's VOID inserts: the
// pay path's rule (an insert whose outcome is unknown is asked again, and
// only a statement refused before it ran may answer "nothing ran") holds
// for them too. Each is judged by the PSP's refunds and the ledger's rows.

import (
	"net/http"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/testkit/faultnet"
	"github.com/oncepay/oncepay/internal/testkit/story"
)

// paidAndSettled pays K1 (3,000 to m1, one charge) and settles the world:
// the payment a refund below is for.
func paidAndSettled(t *testing.T, w *story.World) {
	t.Helper()
	expectStatus(t, w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now()), http.StatusCreated)
	if err := w.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(w.Charges("")); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}

// armLost drops the reply of the next n round trips running statement.
func armLost(t *testing.T, w *story.World, statement string, n int) {
	t.Helper()
	for range n {
		if err := w.Net.Arm(faultnet.Rule{Statement: statement}); err != nil {
			t.Fatal(err)
		}
	}
}

// expectPSPRefunds: the PSP holds n refunds, each of the payment's 3,000.
func expectPSPRefunds(t *testing.T, w *story.World, n int) {
	t.Helper()
	rs := w.Sim.Refunds()
	if len(rs) != n {
		t.Fatalf("the PSP holds %d refunds, want %d: %+v", len(rs), n, rs)
	}
	for _, r := range rs {
		if r.Amount != 3000 {
			t.Fatalf("a refund of %d, want 3000", r.Amount)
		}
	}
}

func refundRows(t *testing.T, w *story.World, state string) int64 {
	t.Helper()
	n, err := w.Int(ctx, `SELECT count(*) FROM refunds WHERE payment_id = $1 AND state = $2`, pid7, state)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The refund intent's INSERT committed and its reply was lost, and so was
// the re-ask's: the PENDING refund row is there and the resolver will
// refund it, so the request must not hear "nothing was run" (503
// ledger-unavailable), only "not confirmed, retry with the same key". The
// retry within the deadline + margin hears 409 in progress; after it the
// resolver refunds once and the retry replays SUCCEEDED with that refund.
func TestARefundWhoseInsertReplyWasLostIsNeverAnsweredNothingRan(t *testing.T) {
	t.Parallel()
	w := newWorld(t, story.Options{FaultNet: true})
	paidAndSettled(t, w)
	armLost(t, w, "INSERT INTO refunds", 2)
	ans := w.Refund(ctx, "u1", "K1", "RK1")
	expectStatus(t, ans, http.StatusServiceUnavailable)
	if pt := problemType(t, ans); pt != problem.TypeLedgerUnconfirmed {
		t.Fatalf("the refund whose intent committed answered %s: it may say nothing ran only when nothing did", ans.Body)
	}
	if f := w.Net.Fired()["INSERT INTO refunds"]; f != 2 {
		t.Fatalf("lost replies %v, want the insert's and the re-ask's", w.Net.Fired())
	}
	if n := refundRows(t, w, "PENDING"); n != 1 {
		t.Fatalf("%d PENDING refund rows, want the one that committed", n)
	}
	expectPSPRefunds(t, w, 0)
	expectStatus(t, w.Refund(ctx, "u1", "K1", "RK1"), http.StatusConflict)

	w.Clock.Advance(w.Timing.Deadline + w.Timing.Margin + time.Second)
	if err := w.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	expectPSPRefunds(t, w, 1)
	retry := w.Refund(ctx, "u1", "K1", "RK1")
	expectStatus(t, retry, http.StatusCreated)
	if retry.Headers.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the retry was not a replay: %v %s", retry.Headers, retry.Body)
	}
	if n := refundRows(t, w, "SUCCEEDED"); n != 1 {
		t.Fatalf("%d SUCCEEDED refund rows, want 1", n)
	}
	expectPSPRefunds(t, w, 1)
}

// Only the refund intent's reply was lost: the re-ask finds the row the
// first try wrote and the request carries on from it, refunding once and
// answering 201, not 503 "nothing ran" followed by the resolver's refund.
func TestARefundWhoseInsertReplyWasLostCarriesOnFromTheRowItWrote(t *testing.T) {
	t.Parallel()
	w := newWorld(t, story.Options{FaultNet: true})
	paidAndSettled(t, w)
	armLost(t, w, "INSERT INTO refunds", 1)
	ans := w.Refund(ctx, "u1", "K1", "RK1")
	expectStatus(t, ans, http.StatusCreated)
	if f := w.Net.Fired()["INSERT INTO refunds"]; f != 1 {
		t.Fatalf("lost replies %v, want the insert's", w.Net.Fired())
	}
	expectPSPRefunds(t, w, 1)
	w.Clock.Advance(w.Timing.Deadline + w.Timing.Margin + time.Second)
	if err := w.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	expectPSPRefunds(t, w, 1)
	if n := refundRows(t, w, "SUCCEEDED"); n != 1 {
		t.Fatalf("%d SUCCEEDED refund rows, want 1", n)
	}
}

// The resolve's VOID insert committed and its reply was lost: the re-ask
// finds the VOID row, so the answer is 200 VOID ("not found, and it never
// will be"), not 503 "nothing ran"; a late original with that key is
// refused and nothing is charged.
func TestAResolveWhoseVoidInsertReplyWasLostAnswersVoidNotNothingRan(t *testing.T) {
	t.Parallel()
	w := newWorld(t, story.Options{FaultNet: true})
	armLost(t, w, "INSERT INTO payments", 1)
	ans := w.Resolve(ctx, "u1", "K1")
	expectStatus(t, ans, http.StatusOK)
	if f := w.Net.Fired()["INSERT INTO payments"]; f != 1 {
		t.Fatalf("lost replies %v, want the VOID insert's", w.Net.Fired())
	}
	expectVoidedAndNothingCharged(t, w)
}

// The VOID insert's reply and the re-ask's were both lost: the VOID row is
// there, so the answer is 503 ledger-unconfirmed, never ledger-unavailable
// ("nothing ran"); the next resolve answers VOID and a late original with
// the key is refused, nothing charged.
func TestAResolveWhoseVoidInsertAndReAskRepliesWereLostIsAnsweredUnconfirmed(t *testing.T) {
	t.Parallel()
	w := newWorld(t, story.Options{FaultNet: true})
	armLost(t, w, "INSERT INTO payments", 2)
	ans := w.Resolve(ctx, "u1", "K1")
	expectStatus(t, ans, http.StatusServiceUnavailable)
	if pt := problemType(t, ans); pt != problem.TypeLedgerUnconfirmed {
		t.Fatalf("the resolve whose VOID committed answered %s: it may say nothing ran only when nothing did", ans.Body)
	}
	if f := w.Net.Fired()["INSERT INTO payments"]; f != 2 {
		t.Fatalf("lost replies %v, want the insert's and the re-ask's", w.Net.Fired())
	}
	expectStatus(t, w.Resolve(ctx, "u1", "K1"), http.StatusOK)
	expectVoidedAndNothingCharged(t, w)
}

func expectVoidedAndNothingCharged(t *testing.T, w *story.World) {
	t.Helper()
	if n, err := w.Int(ctx, `SELECT count(*) FROM payments WHERE payment_id = $1 AND state = 'VOID'`, pid7); err != nil || n != 1 {
		t.Fatalf("%d VOID rows (%v), want 1", n, err)
	}
	late := w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now())
	expectStatus(t, late, http.StatusConflict)
	if pt := problemType(t, late); pt != problem.TypeKeyVoided {
		t.Fatalf("the late original answered %s", late.Body)
	}
	if err := w.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(w.Charges("")); n != 0 {
		t.Fatalf("%d charges after a void", n)
	}
	expectNothingYet(t, w, "after the void", 0)
}
