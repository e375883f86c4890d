package resolver

import (
	"context"
	"fmt"
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
	awsCfg, err := boot.AWS(ctx)
	if err != nil {
		return nil, err
	}
	claims, err := boot.Claims(awsCfg)
	if err != nil {
		return nil, err
	}
	pool, err := boot.Ledger(ctx)
	if err != nil {
		return nil, err
	}
	pspClient, err := boot.PSP(log)
	if err != nil {
		return nil, fmt.Errorf("resolver: psp: %w", err)
	}
	d := Deps{
		Ledger: ledger.New(pool), PSP: pspClient, Claims: claims,
		Log: log, Metrics: metrics.New(os.Stdout, "resolver"),
	}
	pub, err := boot.Outbox(awsCfg, log)
	if err != nil {
		return nil, err
	}
	if pub != nil {
		sw, err := outbox.NewSweeper(pub, pool, outbox.SweepConfig{Logger: log})
		if err != nil {
			return nil, err
		}
		d.Publisher, d.Sweeper = pub, sw
	}
	return New(cfg, d)
}
