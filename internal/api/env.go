package api

import (
	"context"
	"log/slog"
	"os"

	"github.com/oncepay/oncepay/cdk/oncepay/config"
	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/albauth"
	"github.com/oncepay/oncepay/internal/boot"
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
	// Behind a load balancer (the ALB front door), its signed claims name
	// the caller: ONCEPAY_ALB_ARN is the load balancer, whose keys are read
	// from ONCEPAY_ALB_KEYS_URL (default: the Region's public endpoint).
	var alb *albauth.Verifier
	if arn := os.Getenv(stackenv.AlbArn); arn != "" {
		keys := os.Getenv(stackenv.AlbKeysURL)
		if keys == "" {
			keys = albauth.PublicKeysURL(core.AWS.Region)
		}
		if alb, err = albauth.New(arn, albauth.HTTPKeys(keys, nil), nil); err != nil {
			return nil, err
		}
	}
	router, err := boot.HomeRouter(core.AWS)
	if err != nil {
		return nil, err
	}
	var homes Homes
	if router != nil {
		homes = router // a typed nil would make a non-nil interface
	}
	return New(Deps{
		Homes:     homes,
		ALB:       alb,
		Publisher: pub,
		Claims:    core.Claims,
		Ledger:    ledger.New(core.Pool),
		PSP:       core.PSP,
		Timing:    timing,
		Log:       log,
		Metrics:   metrics.New(os.Stdout, "api"),
	}), nil
}
