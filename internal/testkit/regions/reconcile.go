package regions

import (
	"io"
	"log/slog"
	"time"

	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/reconcile"
)

// Reconciler is the reconciliation function as it runs in R2 after a
// failover: R2's ledger (the promoted standby), the PSP both Regions
// share, R2's outbox, so what it adopts or settles is credited and pushed
// by R2's relay and worker. Its clock is the simulator's, which stamps the
// objects the run lists. log receives its JSON log; nil discards it.
func (s *System) Reconciler(log io.Writer) (*reconcile.Reconciler, error) {
	if log == nil {
		log = io.Discard
	}
	return reconcile.New(reconcile.Config{Now: s.Sim.Now}, reconcile.Deps{
		Ledger: s.R2.Ledger, PSP: s.R2.PSP, Publisher: s.R2.Outbox,
		Metrics: metrics.New(s.R2.EMF, "reconcile"), Log: slog.New(slog.NewJSONHandler(log, nil)),
	})
}

// Span is the span a reconciliation of everything the System did covers:
// from the System's start to the simulator's now, whole seconds (the
// simulator, the ledgers and the System share the real clock).
func (s *System) Span() (from, to time.Time) {
	return s.T0, s.Sim.Now().UTC().Truncate(time.Second).Add(time.Second)
}
