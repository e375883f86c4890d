package story_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/testkit/story"
)

// The PSP makes the refund and then answers 500, and saves that 500 under
// the refund key (Stripe saves a result once execution has begun), so
// every replay of the key answers 500 for 24 h; a refund that succeeded at
// once raises only refund.created and charge.refunded, which move nothing.
// The 5xx is settled from the PSP's list of the charge's refunds: the
// refund row is SUCCEEDED (its REFUNDED event published), m1 debited once, the buyer
// told once, and the PSP holds one refund.
func TestASaved500AfterTheRefundRanIsSettledFromThePSPsRefunds(t *testing.T) {
	t.Parallel()
	w := newWorld(t, story.Options{})
	pid := story.PaymentID("u1", "K1")
	expectStatus(t, w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now()), http.StatusCreated)
	expectCount(t, w, theSeedsCount)
	if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.RefundKey(pid)}, Kind: pspsim.FaultError5xxAfterCharge}); err != nil {
		t.Fatal(err)
	}
	r := w.Refund(ctx, "u1", "K1", "RK1")
	if r.Status != http.StatusCreated && r.Status != http.StatusAccepted {
		t.Fatalf("refund: %d %s", r.Status, r.Body)
	}
	settle(t, w)

	// The refund is its own row (the payment's stays SUCCEEDED); its
	// REFUNDED event is what debits and notifies.
	var refundState string
	if err := w.Pool.QueryRow(ctx, `SELECT state FROM refunds WHERE payment_id = $1`, pid).Scan(&refundState); err != nil {
		t.Fatal(err)
	}
	if refundState != "SUCCEEDED" {
		t.Fatalf("refund row %s, want SUCCEEDED", refundState)
	}
	var atPSP []pspsim.Refund
	for _, rf := range w.Sim.Refunds() {
		if rf.IdempotencyKey == ids.RefundKey(pid) {
			atPSP = append(atPSP, rf)
		}
	}
	if len(atPSP) != 1 || len(w.Sim.Refunds()) != 1 {
		t.Fatalf("PSP refunds %+v, want exactly one, under %s", w.Sim.Refunds(), ids.RefundKey(pid))
	}
	if b, err := w.Balance(ctx, "m1"); err != nil || b != theSeedsCount.Balance-3000 {
		t.Fatalf("m1 = %d (%v), want %d: debited once", b, err, theSeedsCount.Balance-3000)
	}
	if n, err := w.Int(ctx, `SELECT count(*) FROM debits WHERE event_id = $1`, ids.EventID(pid, "REFUNDED")); err != nil || n != 1 {
		t.Fatalf("%d debits (%v), want one", n, err)
	}
	if _, err := w.AwaitPushes(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	told := 0
	for _, p := range w.PushLog() {
		if p.State == event.Refunded {
			told++
			if p.EventID != ids.EventID(pid, "REFUNDED") || p.Amount != 3000 {
				t.Fatalf("refund push %+v", p)
			}
		}
	}
	if told != 1 {
		t.Fatalf("%d REFUNDED pushes in %+v, want one", told, w.PushLog())
	}
	// A repeat of the refund request answers from the row: refunded.
	if again := w.Refund(ctx, "u1", "K1", "RK1"); again.Status != http.StatusCreated {
		t.Fatalf("repeat: %d %s", again.Status, again.Body)
	}
}
