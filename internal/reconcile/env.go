package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/metrics"
)

// FromEnv builds a Reconciler from what the stack gives the function: the
// ledger, the PSP client and the outbox (boot's shared wiring; no key
// record table: a reconciliation never reads or writes one).
func FromEnv(ctx context.Context, log *slog.Logger) (*Reconciler, error) {
	cfg, err := boot.AWS(ctx)
	if err != nil {
		return nil, err
	}
	pool, err := boot.Ledger(ctx)
	if err != nil {
		return nil, err
	}
	client, err := boot.PSP(ctx, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("reconcile: psp: %w", err)
	}
	d := Deps{Ledger: ledger.New(pool), PSP: client, Log: log, Metrics: metrics.New(os.Stdout, "reconcile")}
	pub, err := boot.Outbox(cfg, log)
	if err != nil {
		return nil, err
	}
	if pub != nil {
		d.Publisher = pub
	}
	return New(Config{}, d)
}
