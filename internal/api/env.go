package api

import (
	"context"
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
	core, err := boot.PaymentsFromEnv(ctx, log)
	if err != nil {
		return nil, err
	}
	var pub Publisher
	if p, err := boot.Outbox(core.AWS, log); err != nil {
		return nil, err
	} else if p != nil {
		pub = p // only a non-nil publisher: a typed nil would make a non-nil interface
	}
	return New(Deps{
		Publisher: pub,
		Claims:    core.Claims,
		Ledger:    ledger.New(core.Pool),
		PSP:       core.PSP,
		Timing:    timing,
		Log:       log,
		Metrics:   metrics.New(os.Stdout, "api"),
	}), nil
}
