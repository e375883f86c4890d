package regions_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/reconcile"
	"github.com/oncepay/oncepay/internal/testkit/regions"
	"github.com/oncepay/oncepay/internal/testkit/story"
)

// The ledger's RPO, closed: a payment R1 charged, answered, credited and
// pushed inside its last lag is lost from the home ledger by the failover
// (the standby never saw it). R2's reconciliation adopts it from the
// charge's metadata; R2's relay and worker credit m1 once and push it
// again under the same replace id; a second run moves nothing.
func TestAPaymentLostWithR1IsAdoptedByR2sReconciliation(t *testing.T) {
	s := newSystem(t, regions.Options{Standby: true, Lag: 3 * time.Second})
	ctx := context.Background()
	pid := story.PaymentID("u1", "K1")
	s.R1.SetClock(0.02)
	a := s.R1.Pay(ctx, "u1", "K1", story.Body, s.R1.At(0.02))
	if a.Status != http.StatusCreated {
		t.Fatalf("pay in R1: %d %s", a.Status, a.Body)
	}
	if _, err := s.R1.Stream.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.R1.Queue.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.R1.AwaitPushes(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	s.Fail()
	if _, err := s.Failover(ctx); err != nil {
		t.Fatal(err)
	}
	r1Credits, err := s.R1.Int(ctx, `SELECT count(*) FROM credits WHERE event_id = $1`, ids.EventID(pid, string(ledger.Succeeded)))
	if err != nil || r1Credits != 1 || len(s.R1.PushLog()) != 1 {
		t.Fatalf("R1 before it failed: %d credit(s) (%v), %d push(es); want the payment credited and pushed in R1", r1Credits, err, len(s.R1.PushLog()))
	}
	if _, err := s.R2.Ledger.Get(ctx, pid); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the home ledger after the failover: %v; want the payment lost with R1's last lag", err)
	}

	rec, err := s.Reconciler(nil)
	if err != nil {
		t.Fatal(err)
	}
	from, to := s.Span()
	rep, err := rec.Run(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts[string(reconcile.Adopted)] != 1 || rep.Findings != 0 || len(rep.Counts) != 1 {
		t.Fatalf("R2's reconciliation: %+v; want the one payment adopted, no finding", rep)
	}
	if err := s.R2.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.R2.AwaitPushes(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	row, err := s.R2.Ledger.Get(ctx, pid)
	charges := s.Sim.Charges()
	if err != nil || len(charges) != 1 || row.State != ledger.Succeeded || row.PSPCharge != charges[0].ID {
		t.Fatalf("the home row %+v (%v), the PSP's charges %v; want SUCCEEDED with the one charge", row, err, charges)
	}
	credits, err := s.R2.Int(ctx, `SELECT count(*) FROM credits WHERE event_id LIKE $1 || ':%'`, pid)
	if err != nil {
		t.Fatal(err)
	}
	bal, err := s.R2.Balance(ctx, "m1")
	if err != nil {
		t.Fatal(err)
	}
	if credits != 1 || bal != 12000+charges[0].Amount {
		t.Errorf("home ledger: %d credit(s), m1 %d; want 1 and %d", credits, bal, 12000+charges[0].Amount)
	}
	if p := s.R2.PushLog(); len(p) != 1 || p[0].ReplaceID != pid || p[0].State != string(ledger.Succeeded) {
		t.Errorf("R2's pushes %+v; want one SUCCEEDED push replacing R1's (replace id %s)", p, pid)
	}
	again, err := rec.Run(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if again.Counts[string(reconcile.Agree)] != 1 || len(again.Counts) != 1 || again.Findings != 0 {
		t.Errorf("the second run: %+v; want one agree and nothing moved", again)
	}
}
