package inbox_test

import (
	"context"
	"testing"

	"github.com/oncepay/oncepay/internal/inbox"
)

// A refund that succeeded and then failed at the PSP (Stripe's
// refund.failed) published REFUNDED, which debited the merchant; its
// compensating REFUND_FAILED event credits the merchant back exactly once,
// however often it is delivered, and tells the buyer with the payment's
// replace id, so the "refunded" push is replaced.
func TestARefundFailedEventCreditsTheMerchantBackOnceAndReplacesTheRefundedPush(t *testing.T) {
	w := newWorld(t, nil)
	ctx := context.Background()
	for _, e := range []struct {
		state string
	}{{inbox.Refunded}, {inbox.RefundFailed}, {inbox.RefundFailed}} {
		if _, err := w.w.Process(ctx, payment("pay_rf", "m1", e.state, 3000)); err != nil {
			t.Fatalf("%s: %v", e.state, err)
		}
	}
	if b := w.balance(t, "m1"); b != 12000 {
		t.Fatalf("m1 balance = %d, want 12000: debited by the refund, credited back once by its failure", b)
	}
	if n := w.count(t, `SELECT count(*) FROM credits WHERE event_id = 'pay_rf:REFUND_FAILED' AND cents = 3000`); n != 1 {
		t.Fatalf("%d credits for the failed refund, want one", n)
	}
	if s := w.notif(t, "pay_rf:REFUND_FAILED"); s != inbox.NotifSent {
		t.Fatalf("notif %s", s)
	}
	got := w.pusher.pushes
	if len(got) != 2 || got[1].State != inbox.RefundFailed || got[1].ReplaceID != "pay_rf" || got[0].ReplaceID != "pay_rf" {
		t.Fatalf("pushes = %+v, want REFUNDED then REFUND_FAILED, both replacing pay_rf", got)
	}
}
