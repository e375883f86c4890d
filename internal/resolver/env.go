package resolver

import (
	"context"
	"log/slog"
	"os"

	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/outbox"
)

// FromEnv builds a Resolver with every collaborator taken from the
// environment: what the Lambda function runs.
func FromEnv(ctx context.Context, log *slog.Logger) (*Resolver, error) {
	cfg, err := ConfigFromEnv()
	if err != nil {
		return nil, err
	}
	core, err := boot.PaymentsFromEnv(ctx, log)
	if err != nil {
		return nil, err
	}
	awsCfg, pool := core.AWS, core.Pool
	d := Deps{
		Ledger: ledger.New(pool), PSP: core.PSP, Claims: core.Claims,
		Log: log, Metrics: metrics.New(os.Stdout, "resolver"),
	}
	pub, err := boot.Outbox(awsCfg, log)
	if err != nil {
		return nil, err
	}
	if pub != nil {
		sw, err := outbox.NewSweeper(pub, pool, outbox.SweepConfig{Logger: log, Metrics: d.Metrics})
		if err != nil {
			return nil, err
		}
		d.Publisher, d.Sweeper = pub, sw
	}
	return New(cfg, d)
}
