package webhook_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
)

// Stripe's refund that answers succeeded and fails later (test card
// 4000000000005126) raises refund.updated, refund.failed and
// charge.refund.updated. The first of them moves the ledger's refund
// SUCCEEDED -> FAILED with the refund's journal entries reversed and the
// compensating <payment_id>:REFUND_FAILED event recorded (and put on the
// outbox) beside the REFUNDED one, so the worker credits the merchant back;
// the other two, and any redelivery, change nothing.
func TestARefundFailedWebhookAfterTheRefundSucceededReversesItOnce(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	if r := w.Pay("u1", "K1", worldtest.Body3000); r.Status != http.StatusCreated {
		t.Fatalf("pay = %d %s", r.Status, r.Body)
	}
	flush(t, w, 1) // payment_intent.succeeded, late: changes nothing
	pid := ids.PaymentID(ids.Scope("u1", "K1"))
	if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.RefundKey(pid)}, Kind: pspsim.FaultRefundFailLater,
		DelayMS: time.Hour.Milliseconds()}); err != nil {
		t.Fatal(err)
	}
	if r := w.Refund("u1", "K1", "R1"); r.Status != http.StatusCreated {
		t.Fatalf("refund = %d %s, want 201 (the PSP answers succeeded)", r.Status, r.Body)
	}
	w.Sim.Advance(time.Hour)
	flush(t, w, 3)
	row, err := w.Ledger.GetRefundByKey(ctx, "u1", "R1")
	if err != nil {
		t.Fatal(err)
	}
	if row.State != ledger.RefundFailed || row.FailureReason == "" {
		t.Fatalf("refund = %s (%q), want FAILED with the PSP's reason", row.State, row.FailureReason)
	}
	if n := w.Count(`SELECT count(*) FROM outbox_intents WHERE event_id = $1`, ids.EventID(pid, "REFUND_FAILED")); n != 1 {
		t.Fatalf("%d REFUND_FAILED intents, want one", n)
	}
	if n := w.Count(`SELECT count(*) FROM journal_entries WHERE payment_id = $1 AND posting = 'refund_failed'`, pid); n != 2 {
		t.Fatalf("%d reversal entries, want two", n)
	}
	if n := w.Count(`SELECT COALESCE(sum(amount), 0)::int FROM journal_entries WHERE payment_id = $1 AND account = 'merchant_payable:' || (SELECT merchant_id FROM payments WHERE payment_id = $1)
		AND posting <> 'charge'`, pid); n != 0 {
		t.Fatalf("refund postings leave the merchant owed %d beside the charge, want 0", n)
	}
	if m := w.Metric("WebhookRefundSettled"); m != 1 {
		t.Fatalf("WebhookRefundSettled = %v, want 1 (one of three events moves it)", m)
	}
}
