package api

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/config"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/metrics"
)

// FromEnv builds a Handler with every collaborator taken from the
// environment: what the Lambda function and the local front door both run.
func FromEnv(ctx context.Context, log *slog.Logger) (*Handler, error) {
	timing, err := config.FromEnv()
	if err != nil {
		return nil, err
	}
	cfg, err := boot.AWS(ctx)
	if err != nil {
		return nil, err
	}
	claims, err := boot.Claims(cfg)
	if err != nil {
		return nil, err
	}
	pool, err := boot.Ledger(ctx)
	if err != nil {
		return nil, err
	}
	pspClient, err := boot.PSP(log)
	if err != nil {
		return nil, fmt.Errorf("api: psp: %w", err)
	}
	var pub Publisher
	if p, err := boot.Outbox(cfg, log); err != nil {
		return nil, err
	} else if p != nil {
		pub = p // only a non-nil publisher: a typed nil would make a non-nil interface
	}
	return New(Deps{
		Publisher: pub,
		Claims:    claims,
		Ledger:    ledger.New(pool),
		PSP:       pspClient,
		Timing:    timing,
		Log:       log,
		Metrics:   metrics.New(os.Stdout, "api"),
	}), nil
}
