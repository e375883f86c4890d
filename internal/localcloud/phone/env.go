package phone

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/oncepay/oncepay/internal/awsclient"
	"github.com/oncepay/oncepay/internal/awsclient/snsclient"
	"github.com/oncepay/oncepay/internal/awsclient/sqsclient"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
)

// FromEnv returns the reader's configuration for the local cloud's phone,
// from the environment `make up` wrote (.local/env, exported into the
// process first) and the state directory (.local): the phone's queue, its
// platform application's devices read from moto at AWS_ENDPOINT_URL, and
// the file DefaultPath(stateDir). The local cloud's service runs
// Run(ctx, cfg) with it.
func FromEnv(ctx context.Context, env localenv.Env, stateDir string, log *slog.Logger) (Config, error) {
	if env.Get(EnvQueueURL) == "" {
		return Config{}, fmt.Errorf("phone: %s is not in the local environment (run `make up`)", EnvQueueURL)
	}
	if err := env.Export(); err != nil {
		return Config{}, err
	}
	aws, err := awsclient.Config(ctx)
	if err != nil {
		return Config{}, fmt.Errorf("phone: %w", err)
	}
	return Config{
		SQS: sqsclient.New(aws), QueueURL: env.Get(EnvQueueURL),
		SNS: snsclient.New(aws), PlatformApplicationArn: env.Get(EnvPlatformApplicationArn), MotoURL: env.Get("AWS_ENDPOINT_URL"),
		Path: DefaultPath(stateDir), Logger: log,
	}, nil
}
