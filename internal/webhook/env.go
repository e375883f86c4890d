package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/metrics"
)

// Environment variables of the webhook function.
const (
	// EnvSecret holds the endpoint's signing secret (in AWS, injected from
	// Secrets Manager by the stack).
	EnvSecret = "ONCEPAY_WEBHOOK_SECRET"
	// EnvTolerance is the signature timestamp tolerance (a Go duration;
	// default 300s).
	EnvTolerance = "ONCEPAY_WEBHOOK_TOLERANCE"
)

// FromEnv builds a Handler with every collaborator taken from the
// environment: what the Lambda function runs.
func FromEnv(ctx context.Context, log *slog.Logger) (*Handler, error) {
	secret, err := boot.Require(EnvSecret)
	if err != nil {
		return nil, err
	}
	cfg := Config{Secret: secret}
	if v := os.Getenv(EnvTolerance); v != "" {
		if cfg.Tolerance, err = time.ParseDuration(v); err != nil {
			return nil, fmt.Errorf("webhook: %s: %w", EnvTolerance, err)
		}
	}
	pool, err := boot.Ledger(ctx)
	if err != nil {
		return nil, err
	}
	d := Deps{Ledger: ledger.New(pool), Log: log, Metrics: metrics.New(os.Stdout, "webhook")}
	awsCfg, err := boot.AWS(ctx)
	if err != nil {
		return nil, err
	}
	if pub, err := boot.Outbox(awsCfg, log); err != nil {
		return nil, err
	} else if pub != nil {
		d.Publisher = pub
	}
	return New(cfg, d)
}
