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
	"fmt"
	"net/http"

	"github.com/oncepay/oncepay/internal/problem"
)

// LedgerDown counts the ledger calls an outage failed.
const LedgerDown = "ledger.down"

// The coverage report requires it like the other outages.
func init() { Points = append(Points, LedgerDown) }

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

// checkNothingRan holds the step's "nothing was run" answers (503
// ledger-unavailable) against the ledger: a payment with no row before the
// step and one after it was written by the step's own request — a step
// plays one request at a time, and a paused owner stays frozen — so that
// request's insert committed, and a client that believed it and paid again
// under a new key would pay twice. before is the states seen before the
// step, from the index of its first answer. Refunds keep rows of their
// own and are not judged here.
func (s *schedule) checkNothingRan(before map[string]string, from int) {
	for _, a := range s.answers[from:] {
		if a.kind == "refund" || a.status != http.StatusServiceUnavailable || a.ptype != problem.TypeLedgerUnavailable {
			continue
		}
		if before[a.p.pid] == "" && s.states[a.p.pid] != "" {
			s.violate("step %d %s %s/%s answered 503 ledger-unavailable (nothing was run), yet its payment's row was written in that step (%s)",
				a.step, a.kind, a.p.caller, a.p.key, s.states[a.p.pid])
		}
	}
}
