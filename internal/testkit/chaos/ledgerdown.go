package chaos

// The ledger outage: every function's ledger pool (the API's, the
// resolver's and its outbox sweep's, the webhook endpoint's, the worker's
// and its notification sweep's) reaches PostgreSQL through the world's
// faultnet proxy, so faultnet.Proxy.Down makes the ledger unreachable for
// all of them at once: new connections refused, statements on open ones
// failing before they reach the server. It lasts a few calls (or, a
// quarter of the time, until quiescence) and always recovers before the
// world settles. Kept in a file of its own: the draw, the tolerance and
// the recovery are one line each in chaos.go.

import (
	"context"
	"fmt"
	"maps"
	"net/http"

	"github.com/oncepay/oncepay/internal/problem"
)

// LedgerDown counts the ledger calls an outage failed.
const LedgerDown = "ledger.down"

// ledgerOutage takes the ledger down for its next few calls.
func (r *Runner) ledgerOutage(s *schedule) error {
	n := 1 + s.rng.IntN(12)
	if s.rng.IntN(4) == 0 {
		n = 1 << 20 // down until quiescence
	}
	if r.w.Net == nil {
		return nil
	}
	if err := r.w.Net.Down(n); err != nil {
		return fmt.Errorf("take the ledger down: %w", err)
	}
	s.log("ledger down for its next %d calls", n)
	return nil
}

// inLedgerOutage runs a hop; an invocation that failed on the ledger
// outage (the resolver's run, a worker step) is what Lambda retries: an
// outcome, not a broken schedule. Only a ledger error is excused
// (isLedgerError): any other error in the hop fails the schedule.
func (r *Runner) inLedgerOutage(s *schedule, f func() error) func() error {
	return func() error {
		if r.w.Net == nil {
			return f()
		}
		before := r.w.Net.DownFired()
		err := f()
		if fired := r.w.Net.DownFired() - before; fired > 0 && isLedgerError(err) {
			// Not the error itself: it names this world's database and
			// port, and the trace must replay byte for byte from the seed.
			s.log("  the invocation failed in the ledger outage (%d calls failed)", fired)
			return nil
		}
		return err
	}
}

// recoverLedger ends the outage before quiescence and counts what fired.
func (r *Runner) recoverLedger() {
	if r.w.Net != nil {
		r.coverN(LedgerDown, r.w.Net.Up())
	}
}

// beforeStep is what checkNothingRan compares a step's answers against:
// the payments' states and the payments holding a refund row before it.
type beforeStep struct {
	states  map[string]string
	refunds map[string]refundRow
	from    int // the index of the step's first answer
}

func (r *Runner) beforeStep(ctx context.Context, s *schedule) (beforeStep, error) {
	refunds, err := r.refundRows(ctx, s)
	return beforeStep{states: maps.Clone(s.states), refunds: refunds, from: len(s.answers)}, err
}

// checkNothingRan holds the step's "nothing was run" answers (503
// ledger-unavailable) against the ledger: a payment (or a refund) with no
// row before the step and one after it was written by the step's own
// request — unless the row is of a kind that request does not write, or
// another request of its kind in the step saw the row (it may be the
// writer), a paused owner stays frozen, and only a refund request writes a
// refund row — so that
// request's insert committed, and a client that believed it and tried
// again under a new key would pay (or be refunded by the resolver) twice.
// Run after observe, which brings the states up to date.
func (r *Runner) checkNothingRan(ctx context.Context, s *schedule, before beforeStep) error {
	nothingRan := func(a answer) bool {
		return a.status == http.StatusServiceUnavailable && a.ptype == problem.TypeLedgerUnavailable
	}
	// A step may play more than one request for a payment (a pay, then the
	// resolve its 202 names). The row's state says which family wrote it:
	// a resolve writes only VOID rows (InsertVoid), the pay family only
	// the others (InsertPending). A "nothing was run" answer is blamed
	// unless the row is of the other family's kind, or another request of
	// its own family in the step answered what only a writer (or a reader)
	// of that row answers: 201, 202 or 402 for a pay, 200 VOID for a
	// resolve. A 409, a 422, a crash or a "not confirmed" proves no row.
	voidFamily := func(kind string) bool { return kind == "resolve" }
	sawRow := map[string]map[bool]bool{} // pid -> family (void?) -> an answer that saw its row
	for _, a := range s.answers[before.from:] {
		if a.kind == "refund" {
			continue
		}
		void := voidFamily(a.kind)
		saw := (void && a.status == http.StatusOK && a.state == "VOID") ||
			(!void && (a.status == http.StatusCreated || a.status == http.StatusAccepted || a.status == http.StatusPaymentRequired))
		if saw {
			if sawRow[a.p.pid] == nil {
				sawRow[a.p.pid] = map[bool]bool{}
			}
			sawRow[a.p.pid][void] = true
		}
	}
	otherWriter := func(a answer) bool {
		void := voidFamily(a.kind)
		if rowVoid := s.states[a.p.pid] == "VOID"; rowVoid != void {
			return true // the other family's row: not this request's insert
		}
		return sawRow[a.p.pid][void]
	}
	var refunds map[string]refundRow
	for _, a := range s.answers[before.from:] {
		if !nothingRan(a) {
			continue
		}
		if a.kind != "refund" {
			if before.states[a.p.pid] == "" && s.states[a.p.pid] != "" && !otherWriter(a) {
				s.violate("step %d %s %s/%s answered 503 ledger-unavailable (nothing was run), yet its payment's row was written in that step (%s)",
					a.step, a.kind, a.p.caller, a.p.key, s.states[a.p.pid])
			}
			continue
		}
		if refunds == nil {
			var err error
			if refunds, err = r.refundRows(ctx, s); err != nil {
				return err
			}
		}
		_, had := before.refunds[a.p.pid]
		if _, has := refunds[a.p.pid]; !had && has {
			s.violate("step %d refund %s/%s answered 503 ledger-unavailable (nothing was run), yet its refund row was written in that step",
				a.step, a.p.caller, a.p.key)
		}
	}
	return nil
}
