package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/reconcile"
)

// reconcileAfter is the last invariant: after the run and a reconciliation
// over the schedule's span, the PSP and the ledger agree on every payment
// and refund of the schedule, and a second run over the same span moves
// nothing. It runs after check, so what the path alone left behind is
// judged there and never excused by what the reconciliation repaired.
//
// The span is on the simulator's clock, which runs ahead of the real one
// by every move the runner made for a delayed refund: from the schedule's
// first PSP-clock second to the simulator's now. Its objects carry those
// stamps. The ledger's SUCCEEDED rows are found by the database's clock,
// so a row the PSP holds nothing of is seen here only while the two agree;
// check's "SUCCEEDED with charge X, the PSP holds none" covers it always.
// The span's first second may hold the previous schedule's last objects:
// judged again, they agree.
func (r *Runner) reconcileAfter(ctx context.Context, s *schedule) error {
	w := r.w
	rec, err := reconcile.New(reconcile.Config{Now: w.Sim.Now}, reconcile.Deps{
		Ledger: w.Ledger, PSP: w.PSP, Publisher: w.Outbox, Metrics: metrics.New(w.EMF, "reconcile"),
		Log: slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	from, to := s.simStart.UTC().Truncate(time.Second), w.Sim.Now().UTC().Truncate(time.Second).Add(time.Second)
	rep, err := rec.Run(ctx, from, to)
	if err != nil {
		return fmt.Errorf("seed %d: reconciliation: %w", s.seed, err)
	}
	s.reconciled = rep.Counts
	if err := r.findings(ctx, s, rep, "the reconciliation"); err != nil {
		return err
	}
	// A span that misses the schedule's PSP objects would agree on nothing
	// and pass: the run must have judged at least every payment of the
	// schedule the PSP charged or refunded.
	judged := 0
	for _, n := range rep.Counts {
		judged += n
	}
	if held := r.pspHeld(s); judged < held {
		s.violate("the reconciliation over [%s, %s) judged %d payment(s); the PSP holds charges or refunds of %d of the schedule's",
			from.Format(time.TimeOnly), to.Format(time.TimeOnly), judged, held)
	}
	// What the run moved goes out as ordinary events: the relay and the
	// worker carry them before the ledger is read.
	open, err := w.InTransit(ctx)
	if err != nil {
		return err
	}
	if moved(rep) || open > 0 {
		if err := r.settle(ctx, s); err != nil {
			return err
		}
	}
	if err := r.agree(ctx, s); err != nil {
		return err
	}

	before, err := r.digest(ctx, s)
	if err != nil {
		return err
	}
	again, err := rec.Run(ctx, from, to)
	if err != nil {
		return fmt.Errorf("seed %d: second reconciliation: %w", s.seed, err)
	}
	s.reconciledAgain = again.Counts
	if err := r.findings(ctx, s, again, "the second reconciliation"); err != nil {
		return err
	}
	if moved(again) {
		s.violate("the second reconciliation over the same span moved something: %v", again.Counts)
	}
	after, err := r.digest(ctx, s)
	if err != nil {
		return err
	}
	if after != before {
		s.violate("the second reconciliation over the same span changed the ledger or the PSP:\n  before: %s\n  after:  %s", before, after)
	}
	return nil
}

// pspHeld counts the schedule's payments the PSP made a charge or a
// refund of.
func (r *Runner) pspHeld(s *schedule) int {
	mine := map[string]bool{}
	for _, p := range s.payments {
		mine[p.pid] = true
	}
	held := map[string]bool{}
	charges, refunds := r.w.Sim.Charges(), r.w.Sim.Refunds()
	for _, c := range charges[min(s.chargesBefore, len(charges)):] {
		held[paymentOfKey(c.IdempotencyKey)] = mine[paymentOfKey(c.IdempotencyKey)]
	}
	for _, rf := range refunds[min(s.refundsBefore, len(refunds)):] {
		held[paymentOfKey(rf.IdempotencyKey)] = mine[paymentOfKey(rf.IdempotencyKey)]
	}
	n := 0
	for _, ok := range held {
		if ok {
			n++
		}
	}
	return n
}

// moved reports a run whose counts name any outcome but agreement or an
// answer not final yet.
func moved(rep reconcile.Report) bool {
	for o, n := range rep.Counts {
		if n > 0 && o != string(reconcile.Agree) && o != string(reconcile.Open) {
			return true
		}
	}
	return false
}

// findings records a run's findings as violations: the single-Region path
// never corrupts the ledger, so nothing it leaves is a human's to decide.
func (r *Runner) findings(ctx context.Context, s *schedule, rep reconcile.Report, what string) error {
	if rep.Findings == 0 && rep.Counts[string(reconcile.NeedsHuman)] == 0 {
		return nil
	}
	fs, err := r.w.Ledger.Findings(ctx, rep.RunID)
	if err != nil {
		return err
	}
	for _, f := range fs {
		s.violate("%s found what only a human can decide: %s %s: %s", what, f.PaymentID, f.Kind, f.Detail)
	}
	if len(fs) == 0 {
		s.violate("%s counted %d needs_human outcome(s) and recorded no finding", what, rep.Counts[string(reconcile.NeedsHuman)])
	}
	return nil
}

// agree checks the schedule's payments and refunds against the PSP's own
// records after the reconciliation: every charge is the SUCCEEDED row's
// of its payment, every succeeded refund the ledger's SUCCEEDED refund or
// a reversal's. A charge the reconciliation reversed is agreement, and
// still a violation: the single-Region path must never leave a charge the
// ledger holds FAILED or VOID, nor a second charge.
func (r *Runner) agree(ctx context.Context, s *schedule) error {
	w := r.w
	byPID := map[string]bool{}
	for _, p := range s.payments {
		byPID[p.pid] = true
	}
	charges, refunds := w.Sim.Charges(), w.Sim.Refunds()
	reversed := map[string]string{} // PaymentIntent -> the reversal's state
	rows, err := w.Ledger.Reversals(ctx, s.pids())
	if err != nil {
		return fmt.Errorf("check: reversals: %w", err)
	}
	for _, v := range rows {
		if byPID[v.PaymentID] {
			reversed[v.PSPPaymentIntent] = string(v.State)
		}
	}
	for _, c := range charges[min(s.chargesBefore, len(charges)):] {
		pid := paymentOfKey(c.IdempotencyKey)
		if !byPID[pid] {
			continue // check reported it
		}
		x, err := r.row(ctx, pid)
		if err != nil {
			return err
		}
		if (x.state == "SUCCEEDED" || x.state == "REFUNDED") && x.charge == c.ID {
			continue
		}
		why := "not reversed"
		if st, ok := reversed[c.PaymentIntent]; ok {
			why = "reversed by the reconciliation (its refund " + st + ")"
		}
		s.violate("%s: the PSP's charge %s (key %s) is not the payment's: the ledger holds %q with charge %q; %s",
			pid, c.ID, c.IdempotencyKey, x.state, x.charge, why)
	}
	for _, rf := range refunds[min(s.refundsBefore, len(refunds)):] {
		pid := paymentOfKey(rf.IdempotencyKey)
		if !byPID[pid] {
			continue
		}
		if st, _ := w.Sim.RefundStatus(rf.ID); st != "succeeded" {
			continue
		}
		if msg, err := r.refundAgrees(ctx, pid, rf); err != nil {
			return err
		} else if msg != "" {
			s.violate("%s: the PSP's refund %s (key %s, %d) succeeded; %s", pid, rf.ID, rf.IdempotencyKey, rf.Amount, msg)
		}
	}
	return nil
}

// refundAgrees says how the ledger disagrees with a refund the PSP
// succeeded, or "".
func (r *Runner) refundAgrees(ctx context.Context, pid string, rf pspsim.Refund) (string, error) {
	w := r.w
	switch {
	case rf.IdempotencyKey == ids.RefundKey(pid):
		var state, pspRefund string
		err := w.Pool.QueryRow(ctx, `SELECT state, COALESCE(psp_refund, '') FROM refunds WHERE payment_id = $1`, pid).Scan(&state, &pspRefund)
		if err != nil {
			return fmt.Sprintf("the ledger holds no refund of it (%v)", err), nil
		}
		if state != "SUCCEEDED" || (pspRefund != "" && pspRefund != rf.ID) {
			return fmt.Sprintf("the ledger's refund is %s with refund %q", state, pspRefund), nil
		}
	case strings.HasPrefix(rf.IdempotencyKey, ids.ReversalKey(pid, "")):
		var state, pspRefund string
		err := w.Pool.QueryRow(ctx, `SELECT state, COALESCE(psp_refund, '') FROM reversals WHERE refund_key = $1`, rf.IdempotencyKey).Scan(&state, &pspRefund)
		if err != nil {
			return fmt.Sprintf("the ledger holds no reversal under its key (%v)", err), nil
		}
		if state != "SUCCEEDED" || pspRefund != rf.ID {
			return fmt.Sprintf("the ledger's reversal is %s with refund %q", state, pspRefund), nil
		}
	default:
		return "it was made under a key neither the refund path nor the reconciliation derives", nil
	}
	return "", nil
}

// digest is what a run that moves nothing leaves unchanged: the schedule's
// rows of every table a reconciliation writes, and the PSP's refunds.
func (r *Runner) digest(ctx context.Context, s *schedule) (string, error) {
	var d string
	err := r.w.Pool.QueryRow(ctx, `SELECT COALESCE(string_agg(x, ' ' ORDER BY x), '') FROM (
		SELECT payment_id || ':' || state || ':' || COALESCE(psp_charge, '') AS x FROM payments WHERE payment_id = ANY($1)
		UNION ALL SELECT event_id FROM outbox_intents WHERE payment_id = ANY($1)
		UNION ALL SELECT payment_id || ':refund:' || state FROM refunds WHERE payment_id = ANY($1)
		UNION ALL SELECT refund_key || ':' || state FROM reversals WHERE payment_id = ANY($1)) t`, s.pids()).Scan(&d)
	if err != nil {
		return "", fmt.Errorf("check: digest: %w", err)
	}
	return fmt.Sprintf("%s; psp refunds %d", d, len(r.w.Sim.Refunds())), nil
}
