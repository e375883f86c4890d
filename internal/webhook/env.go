package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/metrics"
)

// Environment variables of the webhook function.
const (
	// EnvSecret holds a fixed signing secret, for a handler run outside the
	// stack (cmd/frontdoor, a benchmark). The stack's function has none: it
	// reads the webhook secret's webhook_secret (ONCEPAY_WEBHOOK_SECRET_ARN)
	// at run time.
	EnvSecret = stackenv.WebhookSecret
	// EnvTolerance is the signature timestamp tolerance (a Go duration;
	// default 300s).
	EnvTolerance = "ONCEPAY_WEBHOOK_TOLERANCE"
)

// FromEnv builds a Handler with every collaborator taken from the
// environment: what the Lambda function runs.
func FromEnv(ctx context.Context, log *slog.Logger) (*Handler, error) {
	awsCfg, err := boot.AWS(ctx)
	if err != nil {
		return nil, err
	}
	var cfg Config
	read, ok, err := boot.Secret(ctx, awsCfg, log, stackenv.WebhookSecretArn, stackenv.PSPSecretWebhookSecret)
	switch {
	case err != nil:
		return nil, err
	case ok:
		cfg.SecretFrom = read.Read
	default:
		if cfg.Secret, err = boot.Require(EnvSecret); err != nil {
			return nil, fmt.Errorf("webhook: neither %s nor %s is set: %w", stackenv.WebhookSecretArn, EnvSecret, err)
		}
	}
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
	if pub, err := boot.Outbox(awsCfg, log); err != nil {
		return nil, err
	} else if pub != nil {
		d.Publisher = pub
	}
	return New(cfg, d)
}
