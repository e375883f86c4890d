package reconcile_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/psp"
	"github.com/oncepay/oncepay/internal/reconcile"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
)

var ctx = context.Background()

// rec builds a reconciler over the world's ledger, PSP and outbox, with the
// wall clock (the simulator stamps its objects with it).
func rec(t *testing.T, w *worldtest.World, l reconcile.Ledger, p reconcile.PSP) *reconcile.Reconciler {
	t.Helper()
	return recWith(t, w, l, p, reconcile.Config{CheckpointEvery: 2})
}

func recWith(t *testing.T, w *worldtest.World, l reconcile.Ledger, p reconcile.PSP, cfg reconcile.Config) *reconcile.Reconciler {
	t.Helper()
	if l == nil {
		l = w.Ledger
	}
	if p == nil {
		p = w.PSP
	}
	r, err := reconcile.New(cfg, reconcile.Deps{
		Ledger: l, PSP: p, Publisher: w.Outbox, Metrics: metrics.New(w.Logs, "reconcile"), Log: w.Log,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// span is a span around now on the simulator's clock, whole seconds.
func span(w *worldtest.World) (time.Time, time.Time) {
	now := w.Sim.Now().UTC().Truncate(time.Second)
	return now.Add(-time.Hour), now.Add(time.Hour)
}

func pid(key string) string { return ids.PaymentID(ids.Scope("u1", key)) }

func body(pm string) string {
	return `{"merchant_id":"m1","order_id":"42","amount":3000,"currency":"USD","payment_method":"` + pm + `"}`
}

// chargeAside charges at the PSP the way an older or a zombie attempt
// would have, outside the ledger: under key, with the payment's id and the
// row's fields in metadata.
func chargeAside(t *testing.T, w *worldtest.World, key, paymentID string) {
	t.Helper()
	res, err := w.PSP.Charge(ctx, psp.ChargeRequest{
		IdempotencyKey: key, PaymentID: paymentID, MerchantID: "m1", CallerID: "u1", ClientKey: "K?", Fingerprint: "fp",
		Amount: 3000, Currency: "USD", PaymentMethod: "pm_card_visa",
	})
	if err != nil || res.Outcome != psp.Succeeded {
		t.Fatalf("charge aside = %+v %v", res, err)
	}
}

// snapshot is what a re-run must leave unchanged: every ledger table's
// rows and the PSP's charges and refunds.
func snapshot(t *testing.T, w *worldtest.World) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		`SELECT payment_id || state || COALESCE(psp_charge, '') FROM payments`,
		`SELECT payment_id || posting || account || amount FROM journal_entries`,
		`SELECT event_id FROM outbox_intents`,
		`SELECT refund_key || state || COALESCE(psp_refund, '') FROM reversals`,
		`SELECT payment_id || state FROM refunds`,
	} {
		rows, err := w.Pool.Query(ctx, q+` ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			b.WriteString(s + "\n")
		}
		rows.Close()
	}
	for _, c := range w.Sim.Charges() {
		b.WriteString(c.ID + "\n")
	}
	for _, r := range w.Sim.Refunds() {
		b.WriteString(r.ID + "\n")
	}
	return b.String()
}

// Every difference the PSP's records and the ledger can have after the
// payment path's failures, in one span: each settled by an allowed move,
// once, and a second run over the same span moves nothing.
func TestARunSettlesEveryDifferenceOnceAndARerunChangesNothing(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	// K1: paid, nothing to do.
	if r := w.Pay("u1", "K1", body("pm_card_visa")); r.Status != http.StatusCreated {
		t.Fatalf("K1 = %d %s", r.Status, r.Body)
	}
	// K2: paid, then its row, journal and event lost (a failover's RPO).
	if r := w.Pay("u1", "K2", body("pm_card_visa")); r.Status != http.StatusCreated {
		t.Fatalf("K2 = %d %s", r.Status, r.Body)
	}
	lost := w.Row("u1", "K2")
	for _, q := range []string{`DELETE FROM journal_entries WHERE payment_id = $1`, `DELETE FROM outbox_intents WHERE payment_id = $1`,
		`DELETE FROM payments WHERE payment_id = $1`} {
		if _, err := w.Pool.Exec(ctx, q, lost.ID); err != nil {
			t.Fatal(err)
		}
	}
	// K3: charged, its reply lost: UNKNOWN, and the resolver never came.
	if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.ChargeKey(pid("K3"))}, Kind: pspsim.FaultLoseReply, DelayMS: 3000}); err != nil {
		t.Fatal(err)
	}
	if r := w.Pay("u1", "K3", body("pm_card_visa")); r.Status != http.StatusAccepted {
		t.Fatalf("K3 = %d %s, want 202", r.Status, r.Body)
	}
	// K4: voided by a resolve call ("never ran"), then a zombie charged it.
	if r := w.Resolve("u1", "K4"); r.Status != http.StatusNotFound && r.Status != http.StatusGone && r.Status != http.StatusOK {
		t.Fatalf("K4 resolve = %d %s", r.Status, r.Body)
	}
	if p := w.Row("u1", "K4"); p.State != ledger.Void {
		t.Fatalf("K4 = %s, want VOID", p.State)
	}
	chargeAside(t, w, ids.ChargeKey(pid("K4")), pid("K4"))
	// K5: declined, so FAILED; an older attempt under another key charged.
	if r := w.Pay("u1", "K5", body("pm_card_chargeDeclined")); r.Status != http.StatusPaymentRequired {
		t.Fatalf("K5 = %d %s, want 402", r.Status, r.Body)
	}
	chargeAside(t, w, pid("K5")+":attempt-0", pid("K5"))
	// K6: paid, and charged a second time under another key.
	if r := w.Pay("u1", "K6", body("pm_card_visa")); r.Status != http.StatusCreated {
		t.Fatalf("K6 = %d %s", r.Status, r.Body)
	}
	chargeAside(t, w, pid("K6")+":attempt-0", pid("K6"))
	// K7: SUCCEEDED in the ledger with a charge the PSP never made.
	if _, err := w.Pool.Exec(ctx, `INSERT INTO payments (payment_id, caller_id, client_key, fingerprint, amount, currency, merchant_id, state, psp_charge)
		VALUES ($1, 'u1', 'K7', 'fp', 3000, 'USD', 'm1', 'SUCCEEDED', 'ch_nowhere')`, pid("K7")); err != nil {
		t.Fatal(err)
	}
	chargesBefore := len(w.Sim.Charges())

	from, to := span(w)
	rep, err := rec(t, w, nil, nil).Run(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"agree": 1, "adopted": 1, "settled": 1, "reversed": 3, "needs_human": 1}
	for k, n := range want {
		if rep.Counts[k] != n {
			t.Errorf("counts[%s] = %d, want %d (all: %v)", k, rep.Counts[k], n, rep.Counts)
		}
	}

	// K2 adopted: the same guard, fingerprint and charge as the lost row,
	// its journal and its SUCCEEDED event once.
	got := w.Row("u1", "K2")
	if got.ID != lost.ID || got.State != ledger.Succeeded || got.PSPCharge != lost.PSPCharge || got.Fingerprint != lost.Fingerprint ||
		got.Amount != lost.Amount || got.MerchantID != lost.MerchantID {
		t.Errorf("adopted row = %+v, the lost one %+v", got, lost)
	}
	if n := w.Count(`SELECT count(*) FROM journal_entries WHERE payment_id = $1 AND posting = 'charge'`, lost.ID); n != 2 {
		t.Errorf("K2 journal entries = %d, want 2", n)
	}
	// K3 settled SUCCEEDED with the charge the PSP made.
	if p := w.Row("u1", "K3"); p.State != ledger.Succeeded || p.PSPCharge == "" {
		t.Errorf("K3 = %s %q, want SUCCEEDED with its charge", p.State, p.PSPCharge)
	}
	for _, k := range []string{"K2", "K3"} {
		if n := w.Count(`SELECT count(*) FROM outbox_intents WHERE event_id = $1`, ids.EventID(pid(k), event.Succeeded)); n != 1 {
			t.Errorf("%s SUCCEEDED intents = %d, want 1", k, n)
		}
	}
	// K4, K5 and K6's extra: each refunded once, under its derived key, the
	// buyer told; the ledger's rows keep their states.
	refunds := map[string]int{}
	for _, r := range w.Sim.Refunds() {
		refunds[r.IdempotencyKey]++
	}
	for _, k := range []string{"K4", "K5", "K6"} {
		var pi string
		for _, c := range w.Sim.Charges() {
			if c.Metadata[psp.MetaPaymentID] == pid(k) && (k != "K6" || c.IdempotencyKey != ids.ChargeKey(pid(k))) {
				pi = c.PaymentIntent
			}
		}
		if n := refunds[ids.ReversalKey(pid(k), pi)]; n != 1 {
			t.Errorf("%s: %d refunds under %s, want 1 (all: %v)", k, n, ids.ReversalKey(pid(k), pi), refunds)
		}
		if n := w.Count(`SELECT count(*) FROM outbox_intents WHERE event_id = $1`, ids.EventID(pid(k), event.Reversed)); n != 1 {
			t.Errorf("%s REVERSED intents = %d, want 1", k, n)
		}
	}
	if len(w.Sim.Refunds()) != 3 || len(w.Sim.Charges()) != chargesBefore {
		t.Errorf("PSP: %d refunds (want 3), %d charges (want %d)", len(w.Sim.Refunds()), len(w.Sim.Charges()), chargesBefore)
	}
	for k, st := range map[string]ledger.State{"K4": ledger.Void, "K5": ledger.Failed, "K6": ledger.Succeeded} {
		if p := w.Row("u1", k); p.State != st {
			t.Errorf("%s = %s, want %s", k, p.State, st)
		}
	}
	// K6's own charge is not refunded.
	if n := refunds[ids.RefundKey(pid("K6"))]; n != 0 {
		t.Errorf("K6's own charge refunded")
	}
	// K7: a finding, and no change.
	fs, err := w.Ledger.Findings(ctx, rep.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 || fs[0].PaymentID != pid("K7") || fs[0].Kind != reconcile.FindLedgerWithoutCharge {
		t.Errorf("findings = %+v, want K7's ledger_without_charge", fs)
	}
	if p := w.Row("u1", "K7"); p.State != ledger.Succeeded || p.PSPCharge != "ch_nowhere" {
		t.Errorf("K7 changed: %+v", p)
	}
	if m := w.Metric("ReconcileNeedsHuman"); m != 1 {
		t.Errorf("ReconcileNeedsHuman = %v, want 1", m)
	}

	// A second run over the span: a new report row, nothing moved.
	before := snapshot(t, w)
	again, err := rec(t, w, nil, nil).Run(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if again.RunID == rep.RunID || again.Resumed {
		t.Errorf("second run = %+v, want a run of its own", again)
	}
	if after := snapshot(t, w); after != before {
		t.Errorf("the second run changed the ledger or the PSP:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if again.Counts["agree"] != 6 || again.Counts["needs_human"] != 1 || len(again.Counts) != 2 {
		t.Errorf("second run counts = %v, want 6 agree and K7's finding", again.Counts)
	}
	runs, err := w.Ledger.ReconcileRuns(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 || runs[0].FinishedAt.IsZero() || runs[1].FinishedAt.IsZero() || runs[0].Counts["adopted"] != 1 {
		t.Errorf("report rows = %+v, want two finished runs", runs)
	}
}

// failingLedger fails its n-th Settle or Adopt, standing in for a
// function that dies mid-run.
type failingLedger struct {
	*ledger.Store
	left int
}

var errCutOff = errors.New("cut off")

func (f *failingLedger) cut() error {
	f.left--
	if f.left == 0 {
		return errCutOff
	}
	return nil
}

func (f *failingLedger) Settle(ctx context.Context, id string, o ledger.Outcome, now time.Time, h ...ledger.Hook) (ledger.Payment, *event.Event, bool, error) {
	if err := f.cut(); err != nil {
		return ledger.Payment{}, nil, false, err
	}
	return f.Store.Settle(ctx, id, o, now, h...)
}

// A run cut off mid-span keeps its checkpoint and counts; the next
// invocation resumes the same run after the checkpoint and finishes it,
// every payment judged once.
func TestARunCutOffResumesFromItsCheckpoint(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	var keys []string
	for _, k := range []string{"A1", "A2", "A3", "A4", "A5"} {
		if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.ChargeKey(pid(k))}, Kind: pspsim.FaultLoseReply, DelayMS: 3000}); err != nil {
			t.Fatal(err)
		}
		if r := w.Pay("u1", k, body("pm_card_visa")); r.Status != http.StatusAccepted {
			t.Fatalf("%s = %d %s", k, r.Status, r.Body)
		}
		keys = append(keys, k)
	}
	from, to := span(w)
	// Checkpoints every 2 payments; the 4th settle dies.
	_, err := rec(t, w, &failingLedger{Store: w.Ledger, left: 4}, nil).Run(ctx, from, to)
	if !errors.Is(err, errCutOff) {
		t.Fatalf("first run = %v, want the cut", err)
	}
	runs, err := w.Ledger.ReconcileRuns(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 1 || !runs[0].FinishedAt.IsZero() || runs[0].Checkpoint == "" || runs[0].Counts["settled"] != 2 {
		t.Fatalf("after the cut: %+v, want one open run with a checkpoint after 2 settled", runs)
	}
	rep, err := rec(t, w, nil, nil).Run(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	// The payment settled after the checkpoint, before the cut, is judged
	// again and agrees: 4 settled (2 before the checkpoint), 1 agree.
	if rep.RunID != runs[0].ID || !rep.Resumed || rep.Counts["settled"] != 4 || rep.Counts["agree"] != 1 {
		t.Fatalf("resumed run = %+v, want run %d resumed to 4 settled and 1 agree", rep, runs[0].ID)
	}
	for _, k := range keys {
		if p := w.Row("u1", k); p.State != ledger.Succeeded {
			t.Errorf("%s = %s", k, p.State)
		}
		if n := w.Count(`SELECT count(*) FROM outbox_intents WHERE payment_id = $1`, pid(k)); n != 1 {
			t.Errorf("%s: %d intents", k, n)
		}
	}
}

// brokenList fails the PSP's list part-way: a span not read whole.
type brokenList struct{ *psp.Client }

func (b brokenList) ListPaymentIntents(ctx context.Context, from, to time.Time, each func(psp.Listed) error) error {
	if err := b.Client.ListPaymentIntents(ctx, from, to, each); err != nil {
		return err
	}
	return errors.New("psp: the second page answered 500")
}

// A list that fails part-way moves nothing: the span was not read whole,
// and "not in the list" would mean nothing.
func TestAListNotReadWholeMovesNothing(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.ChargeKey(pid("B1"))}, Kind: pspsim.FaultLoseReply, DelayMS: 3000}); err != nil {
		t.Fatal(err)
	}
	if r := w.Pay("u1", "B1", body("pm_card_visa")); r.Status != http.StatusAccepted {
		t.Fatalf("B1 = %d", r.Status)
	}
	before := snapshot(t, w)
	from, to := span(w)
	if _, err := rec(t, w, nil, brokenList{w.PSP}).Run(ctx, from, to); err == nil {
		t.Fatal("a run over a broken list succeeded")
	}
	if after := snapshot(t, w); after != before {
		t.Fatalf("a broken list moved something:\n%s\n%s", before, after)
	}
}

// The refunds: one the PSP finished while the ledger has it open, one the
// PSP failed after it succeeded (its webhook never came).
func TestRefundsTheLedgerHasWrongAreSettledOnce(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	for _, k := range []string{"R1", "R2"} {
		if r := w.Pay("u1", k, body("pm_card_visa")); r.Status != http.StatusCreated {
			t.Fatalf("%s = %d", k, r.Status)
		}
	}
	// R1's refund: its reply lost, so the ledger's refund is open.
	if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.RefundKey(pid("R1"))}, Kind: pspsim.FaultLoseReply, DelayMS: 3000}); err != nil {
		t.Fatal(err)
	}
	if r := w.Refund("u1", "R1", "RF1"); r.Status != http.StatusAccepted {
		t.Fatalf("refund R1 = %d %s, want 202", r.Status, r.Body)
	}
	// R2's refund succeeds, then fails later; no webhook is delivered.
	if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.RefundKey(pid("R2"))}, Kind: pspsim.FaultRefundFailLater, DelayMS: 1000}); err != nil {
		t.Fatal(err)
	}
	if r := w.Refund("u1", "R2", "RF2"); r.Status != http.StatusCreated {
		t.Fatalf("refund R2 = %d %s", r.Status, r.Body)
	}
	time.Sleep(1100 * time.Millisecond)
	from, to := span(w)
	rep, err := rec(t, w, nil, nil).Run(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts["refund_settled"] != 1 || rep.Counts["refund_failed"] != 1 {
		t.Errorf("counts = %v, want one refund settled and one failed later", rep.Counts)
	}
	r1, err := w.Ledger.GetRefund(ctx, pid("R1"))
	if err != nil || r1.State != ledger.RefundSucceeded || r1.PSPRefund == "" {
		t.Errorf("R1's refund = %+v %v, want SUCCEEDED", r1, err)
	}
	r2, err := w.Ledger.GetRefund(ctx, pid("R2"))
	if err != nil || r2.State != ledger.RefundFailed {
		t.Errorf("R2's refund = %+v %v, want FAILED", r2, err)
	}
	for id, n := range map[string]int{ids.EventID(pid("R1"), event.Refunded): 1, ids.EventID(pid("R2"), event.RefundFailed): 1} {
		if got := w.Count(`SELECT count(*) FROM outbox_intents WHERE event_id = $1`, id); got != n {
			t.Errorf("%s intents = %d, want %d", id, got, n)
		}
	}
	if n := len(w.Sim.Refunds()); n != 2 {
		t.Errorf("PSP refunds = %d, want 2 (no refund sent by the run)", n)
	}
	before := snapshot(t, w)
	if _, err := rec(t, w, nil, nil).Run(ctx, from, to); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(t, w); after != before {
		t.Errorf("the second run changed something:\n%s\n%s", before, after)
	}
}

// racingLedger settles the row with another charge just before the run's
// own settle: the resolver or the webhook got there first.
type racingLedger struct {
	*ledger.Store
	charge string
}

func (r *racingLedger) Settle(ctx context.Context, id string, o ledger.Outcome, now time.Time, h ...ledger.Hook) (ledger.Payment, *event.Event, bool, error) {
	if _, _, _, err := r.Store.Settle(ctx, id, ledger.Outcome{State: ledger.Succeeded, PSPCharge: r.charge}, now); err != nil {
		return ledger.Payment{}, nil, false, err
	}
	return r.Store.Settle(ctx, id, o, now, h...)
}

// An open row with two charges at the PSP: the run plans to settle it with
// the older and reverse the other, but the resolver settles it with the
// other first. The run must not refund the charge the row now holds; the
// next run reverses the one it does not.
func TestARowSettledByAnotherSinceTheReadKeepsItsCharge(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	chargeAside(t, w, pid("C1")+":attempt-0", pid("C1")) // the older, stray charge
	if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.ChargeKey(pid("C1"))}, Kind: pspsim.FaultLoseReply, DelayMS: 3000}); err != nil {
		t.Fatal(err)
	}
	if r := w.Pay("u1", "C1", body("pm_card_visa")); r.Status != http.StatusAccepted {
		t.Fatalf("C1 = %d %s", r.Status, r.Body)
	}
	var own, stray pspsim.Charge
	for _, c := range w.Sim.Charges() {
		switch c.IdempotencyKey {
		case ids.ChargeKey(pid("C1")):
			own = c
		case pid("C1") + ":attempt-0":
			stray = c
		}
	}
	from, to := span(w)
	rep, err := rec(t, w, &racingLedger{Store: w.Ledger, charge: own.ID}, nil).Run(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts["open"] != 1 || len(w.Sim.Refunds()) != 0 {
		t.Fatalf("counts %v, %d refunds: the run refunded on a stale read", rep.Counts, len(w.Sim.Refunds()))
	}
	if _, err := rec(t, w, nil, nil).Run(ctx, from, to); err != nil {
		t.Fatal(err)
	}
	rf := w.Sim.Refunds()
	if len(rf) != 1 || rf[0].PaymentIntent != stray.PaymentIntent {
		t.Fatalf("refunds %+v, want one, of the stray charge %s (the row holds %s)", rf, stray.PaymentIntent, own.ID)
	}
	if p := w.Row("u1", "C1"); p.State != ledger.Succeeded || p.PSPCharge != own.ID {
		t.Fatalf("C1 = %s %s, want SUCCEEDED with %s", p.State, p.PSPCharge, own.ID)
	}
}

// A reversal the PSP refuses (here a 401: a key rotated under the run)
// stays open with a finding, and the next run sends it: the buyer is
// repaid once.
func TestARefusedReversalStaysOpenWithAFindingAndIsSentLater(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	if r := w.Resolve("u1", "V1"); r.Status != http.StatusOK {
		t.Fatalf("resolve = %d %s", r.Status, r.Body)
	}
	chargeAside(t, w, ids.ChargeKey(pid("V1")), pid("V1"))
	pi := w.Sim.Charges()[0].PaymentIntent
	if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.ReversalKey(pid("V1"), pi)}, Kind: pspsim.FaultUnauthorized}); err != nil {
		t.Fatal(err)
	}
	from, to := span(w)
	rep, err := rec(t, w, nil, nil).Run(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := w.Ledger.Findings(ctx, rep.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Counts["needs_human"] != 1 || len(fs) != 1 || fs[0].Kind != reconcile.FindReversalRefused || len(w.Sim.Refunds()) != 0 {
		t.Fatalf("counts %v, findings %+v, %d refunds: want the refusal found and nothing refunded", rep.Counts, fs, len(w.Sim.Refunds()))
	}
	if n := w.Count(`SELECT count(*) FROM reversals WHERE state IN ('PENDING', 'UNKNOWN')`); n != 1 {
		t.Fatalf("%d open reversals, want the refused one open", n)
	}
	again, err := rec(t, w, nil, nil).Run(ctx, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if rf := w.Sim.Refunds(); len(rf) != 1 || rf[0].IdempotencyKey != ids.ReversalKey(pid("V1"), pi) {
		t.Fatalf("refunds after the second run %+v, want one under the reversal's key (counts %v)", rf, again.Counts)
	}
	if n := w.Count(`SELECT count(*) FROM outbox_intents WHERE event_id = $1`, ids.EventID(pid("V1"), event.Reversed)); n != 1 {
		t.Fatalf("REVERSED intents = %d", n)
	}
}

// A payment judged on a later day for its refund alone (its charge older
// than the span's widened read) is not reported as a SUCCEEDED row with no
// charge: the run looks the charge up before it calls a human.
func TestARefundOnALaterDayFindsNoMissingCharge(t *testing.T) {
	w := worldtest.New(t, worldtest.Options{})
	if r := w.Pay("u1", "L1", body("pm_card_visa")); r.Status != http.StatusCreated {
		t.Fatalf("L1 = %d", r.Status)
	}
	w.Sim.Advance(3 * time.Hour)
	if r := w.Refund("u1", "L1", "RL1"); r.Status != http.StatusCreated {
		t.Fatalf("refund = %d %s", r.Status, r.Body)
	}
	now := w.Sim.Now().UTC().Truncate(time.Second)
	rep, err := recWith(t, w, nil, nil, reconcile.Config{Now: w.Sim.Now}).Run(ctx, now.Add(-time.Minute), now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Findings != 0 || rep.Counts["agree"] != 1 {
		t.Fatalf("report %+v, want the refunded payment to agree with no finding", rep)
	}
}
