package main

import (
	"context"
	"log/slog"

	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/localcloud/phone"
)

// startPhone runs the local phone's reader (package localcloud/phone) beside
// the stack until ctx ends, and returns a wait for its end. A phone that
// cannot start (no phone in .local/env: an older `make up`) or that stops
// on an error is logged, never a reason to stop the stack.
func startPhone(ctx context.Context, env localenv.Env, stateDir string, log *slog.Logger) (wait func()) {
	log = log.With("part", "phone")
	cfg, err := phone.FromEnv(ctx, env, stateDir, log)
	if err != nil {
		log.Warn("phone not started", "err", err.Error())
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		log.Info("phone reading", "queue", cfg.QueueURL, "devices", cfg.PlatformApplicationArn, "file", cfg.Path)
		if err := phone.Run(ctx, cfg); err != nil {
			log.Error("phone stopped", "err", err.Error())
		}
	}()
	return func() { <-done }
}
