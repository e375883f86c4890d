package resolver

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/awsclient/dynamoclient"
	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/outbox"
)

// Setup is what the environment gives a resolver: its configuration, its
// collaborators, and the clients they were built on.
type Setup struct {
	Config Config
	Deps   Deps
	AWS    aws.Config
	Pool   *pgxpool.Pool // the ledger's pool (the notif rows live there too)
}

// SetupFromEnv builds every collaborator the environment names: what the
// Lambda function runs.
func SetupFromEnv(ctx context.Context, log *slog.Logger) (Setup, error) {
	cfg, err := ConfigFromEnv()
	if err != nil {
		return Setup{}, err
	}
	core, err := boot.PaymentsFromEnv(ctx, log)
	if err != nil {
		return Setup{}, err
	}
	awsCfg, pool := core.AWS, core.Pool
	d := Deps{
		Ledger: ledger.New(pool), PSP: core.PSP, Claims: core.Claims,
		Log: log, Metrics: metrics.New(os.Stdout, "resolver"),
	}
	// The MRSC claim table has no TTL: this resolver sweeps it
	// (docs/regions.md). The stack sets the variable in that mode only.
	if os.Getenv(stackenv.ClaimsSweep) == "true" {
		table, err := boot.Require(stackenv.IdemTable)
		if err != nil {
			return Setup{}, err
		}
		d.ClaimSweeper = idem.NewSweeper(dynamoclient.New(awsCfg), table)
	}
	// Across Regions: a read-only ledger is a standby's wait, unless this
	// Region homes the callers (the stack sets the table in Region stacks).
	if d.IsHome, err = boot.IsHome(awsCfg); err != nil {
		return Setup{}, err
	}
	pub, err := boot.Outbox(awsCfg, log)
	if err != nil {
		return Setup{}, err
	}
	if pub != nil {
		sw, err := outbox.NewSweeper(pub, pool, outbox.SweepConfig{Logger: log, Metrics: d.Metrics})
		if err != nil {
			return Setup{}, err
		}
		d.Publisher, d.Sweeper = pub, sw
	}
	return Setup{Config: cfg, Deps: d, AWS: awsCfg, Pool: pool}, nil
}

// FromEnv is New over SetupFromEnv.
func FromEnv(ctx context.Context, log *slog.Logger) (*Resolver, error) {
	s, err := SetupFromEnv(ctx, log)
	if err != nil {
		return nil, err
	}
	return New(s.Config, s.Deps)
}
