package infratests

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/resolver"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
)

// These tests put the payment path in front of the simulator behaving the
// way Stripe does where a tidy PSP would not (issue 22): a 500 saved after
// the charge, a search index that lags, a refund that settles later. They
// run the real ledger (PostgreSQL), key store (DynamoDB Local), outbox and
// resolver through internal/worldtest.

func runResolver(t *testing.T, r *resolver.Resolver) resolver.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := r.Run(ctx)
	if err != nil {
		t.Fatalf("resolver run: %v", err)
	}
	return rep
}

// Stripe saves a result once execution has begun, so the charge's key can
// answer 500 for 24 h while the money is taken. Replaying the key never
// gets past that 500; the resolver reaches the truth by looking the payment
// up by our reference — once the search index has caught up.
func TestASaved500AfterTheChargeIsSettledByLookUpOnceSearchCatchesUp(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	if err := w.Sim.SetSearchLag(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	pid := ids.PaymentID(ids.Scope("u1", "K1"))
	if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.ChargeKey(pid)}, Kind: pspsim.FaultError5xxAfterCharge}); err != nil {
		t.Fatal(err)
	}
	if r := w.Pay("u1", "K1", worldtest.Body3000); r.Status != http.StatusAccepted {
		t.Fatalf("first call = %d %s, want 202 (the PSP's 500 leaves it open)", r.Status, r.Body)
	}
	charges := w.Sim.Charges()
	if len(charges) != 1 || charges[0].Amount != 3000 {
		t.Fatalf("charges = %+v, want the one 3000 charge behind the 500", charges)
	}
	res := w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{})

	// Inside the search lag: the replay answers the saved 500, the look-up
	// finds nothing yet, and inside the key window that proves nothing.
	rep := runResolver(t, res)
	if rep.Claimed != 1 || rep.Open != 1 {
		t.Fatalf("run inside the lag = %+v, want the payment left open", rep)
	}
	if p := w.Row("u1", "K1"); p.State != ledger.Unknown {
		t.Fatalf("row = %s inside the search lag, want UNKNOWN (NotFound is no proof yet)", p.State)
	}

	w.Sim.Advance(2 * time.Second) // the index catches up
	w.Clock.Advance(16 * time.Minute)
	rep = runResolver(t, res)
	if rep.Claimed != 1 || rep.Succeeded != 1 {
		t.Fatalf("run after the lag = %+v, want the payment settled SUCCEEDED by look-up", rep)
	}
	p := w.Row("u1", "K1")
	if p.State != ledger.Succeeded || p.PSPCharge != charges[0].ID {
		t.Fatalf("row = %s with %q, want SUCCEEDED with %s", p.State, p.PSPCharge, charges[0].ID)
	}
	if n := len(w.Sim.Charges()); n != 1 {
		t.Fatalf("%d charges: the resolver charged again", n)
	}
	if n := w.Count(`SELECT count(*) FROM outbox_intents WHERE payment_id = $1`, pid); n != 1 {
		t.Fatalf("%d outbox intents, want the one SUCCEEDED event that credits the merchant", n)
	}
}

// A Stripe refund can answer "pending" and settle later, as succeeded or
// failed (refund.updated, refund.failed, charge.refund.updated). Replaying
// the refund's key returns the saved "pending" for 24 h whatever happened
// since, so a refund that is only ever retried under its key never learns
// its outcome. The ledger's refund row must reach the PSP's final state.
//
// This test fails on today's code (internal/refund treats Pending like
// Unknown and only replays the key; nothing reads GET /v1/refunds/{id} or
// the refund webhooks): it is the specification for that fix.
func TestAPendingRefundReachesItsFinalStateInTheLedger(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fault   pspsim.FaultKind
		pspWant string // the refund's status at the PSP once settled
		want    ledger.RefundState
	}{
		{"settles succeeded", pspsim.FaultRefundPending, "succeeded", ledger.RefundSucceeded},
		{"settles failed", pspsim.FaultRefundFail, "failed", ledger.RefundFailed},
		// Stripe's test card 4000000000005126: the refund answers
		// succeeded, then fails; the ledger must not keep SUCCEEDED.
		{"succeeds then fails", pspsim.FaultRefundFailLater, "failed", ledger.RefundFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := worldtest.New(t, worldtest.Options{Timing: worldtest.SteadyTiming()})
			if r := w.Pay("u1", "K1", worldtest.Body3000); r.Status != http.StatusCreated {
				t.Fatalf("pay = %d %s", r.Status, r.Body)
			}
			pid := ids.PaymentID(ids.Scope("u1", "K1"))
			if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.RefundKey(pid)}, Kind: tc.fault,
				DelayMS: time.Hour.Milliseconds()}); err != nil {
				t.Fatal(err)
			}
			r := w.Refund("u1", "K1", "R1")
			if r.Status != http.StatusAccepted && r.Status != http.StatusOK && r.Status != http.StatusCreated {
				t.Fatalf("refund = %d %s", r.Status, r.Body)
			}
			refunds := w.Sim.Refunds()
			if len(refunds) != 1 {
				t.Fatalf("PSP refunds = %+v after the refund's %d %s, want one", refunds, r.Status, r.Body)
			}
			if st, _ := w.Sim.RefundStatus(refunds[0].ID); st != "pending" && tc.fault != pspsim.FaultRefundFailLater {
				t.Fatalf("PSP refund %s, want pending", st)
			}

			w.Sim.Advance(time.Hour) // the PSP settles it
			if st, _ := w.Sim.RefundStatus(refunds[0].ID); st != tc.pspWant {
				t.Fatalf("PSP refund %s after settling, want %s", st, tc.pspWant)
			}
			if _, err := w.Sim.FlushWebhooks(context.Background()); err != nil {
				t.Fatalf("webhooks: %v", err)
			}
			res := w.Resolver(w.ResolverConfig(), worldtest.ResolverOptions{})
			for range 3 { // the retries the refund backoff allows within a few hours
				w.Clock.Advance(2 * time.Hour)
				runResolver(t, res)
			}
			row, err := w.Ledger.GetRefundByKey(context.Background(), "u1", "R1")
			if err != nil {
				t.Fatal(err)
			}
			if row.State != tc.want || row.PSPRefund != refunds[0].ID {
				t.Fatalf("ledger refund = %s (psp_refund %q, %d attempts), want %s with %s: "+
					"the PSP settled the refund, the ledger never learnt it", row.State, row.PSPRefund, row.Attempts, tc.want, refunds[0].ID)
			}
		})
	}
}

// Stripe's search lags behind writes (seconds, no stated bound). A refund
// asked for right after the payment must not depend on it: the ledger
// already knows the charge, and Stripe refunds by charge (or by the
// PaymentIntent's id) without a search.
// (internal/refund refunds by the ledger's ch_ id; before that fix it
// searched, and under a search lag the caller heard 202 PROCESSING.)
func TestARefundRightAfterThePaymentDoesNotWaitForSearch(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{Timing: worldtest.SteadyTiming()})
	if err := w.Sim.SetSearchLag(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	if r := w.Pay("u1", "K1", worldtest.Body3000); r.Status != http.StatusCreated {
		t.Fatalf("pay = %d %s", r.Status, r.Body)
	}
	r := w.Refund("u1", "K1", "R1")
	refunds := w.Sim.Refunds()
	if r.Status != http.StatusCreated || len(refunds) != 1 || refunds[0].Amount != 3000 {
		t.Fatalf("refund = %d %s, PSP refunds %+v; want 201 and one 3000 refund made at once (no search needed)",
			r.Status, r.Body, refunds)
	}
}
