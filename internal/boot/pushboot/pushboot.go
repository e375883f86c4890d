// Package pushboot builds, from the environment, the push side of the
// consumer: the Notifier the worker pushes through and the NotifSweeper
// that finishes the notifications it could not send (run on the worker
// function's own schedule).
// It lives apart from package boot so that only the functions that push
// link the SNS client.
//
// Variables: ONCEPAY_LEDGER_DSN (through boot.Ledger), and
// ONCEPAY_PUSH_TOPIC_FALLBACK: "true" sends a push for a caller with no
// enabled device to the topic ONCEPAY_PUSH_TOPIC_ARN (a sandbox's choice:
// every subscriber sees it); "false" or unset keeps it waiting for a
// device, UNDELIVERABLE after the sweep's device horizon (production).
package pushboot

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/awsclient/sesclient"
	"github.com/oncepay/oncepay/internal/awsclient/snsclient"
	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/dedup"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/notify"
)

// TopicFallback reads ONCEPAY_PUSH_TOPIC_FALLBACK: whether a push no device
// can take goes to the topic. Unset is false: the safe choice.
func TopicFallback() (bool, error) {
	switch v := os.Getenv(notify.EnvTopicFallback); v {
	case "true":
		return true, nil
	case "", "false":
		return false, nil
	default:
		return false, fmt.Errorf("pushboot: %s must be true or false, got %q", notify.EnvTopicFallback, v)
	}
}

// Email returns the worker's email channel when ONCEPAY_EMAIL_FROM names
// the identity it sends from (ok false when it is unset: no email channel),
// under ONCEPAY_EMAIL_CONFIGURATION_SET when set.
func Email(cfg aws.Config, pool *pgxpool.Pool, log *slog.Logger) (notify.EmailSender, bool) {
	from := os.Getenv(stackenv.EmailFrom)
	if from == "" {
		log.Info("no email channel", "reason", stackenv.EmailFrom+" unset")
		return notify.EmailSender{}, false
	}
	log.Info("email channel", "configuration_set", os.Getenv(stackenv.EmailConfigurationSet))
	return notify.EmailSender{SES: sesclient.NewSender(cfg), DB: pool, From: from, ConfigurationSet: os.Getenv(stackenv.EmailConfigurationSet)}, true
}

// Reminders returns the dedup gate of the logical messages when
// ONCEPAY_DEDUP_CACHE_URL names the cache (ok false when it is unset: no
// reminders are raised).
func Reminders(log *slog.Logger, m *metrics.Emitter) (*dedup.Gate, bool, error) {
	url := os.Getenv(stackenv.DedupCacheURL)
	if url == "" {
		log.Info("no reminders", "reason", stackenv.DedupCacheURL+" unset")
		return nil, false, nil
	}
	cache, err := dedup.NewRedis(url)
	if err != nil {
		return nil, false, err
	}
	g, err := dedup.New(cache, dedup.Config{Logger: log, Metrics: m})
	if err != nil {
		return nil, false, err
	}
	return g, true, nil
}

// Notifier returns the Notifier over the caller's devices in pool's devices
// table, with the topic fallback as the environment chooses it.
func Notifier(cfg aws.Config, pool *pgxpool.Pool, log *slog.Logger, m *metrics.Emitter) (*notify.Notifier, error) {
	fallback, err := TopicFallback()
	if err != nil {
		return nil, err
	}
	nc := notify.Config{Logger: log, Metrics: m}
	if fallback {
		if nc.TopicArn, err = boot.Require(stackenv.PushTopicArn); err != nil {
			return nil, err
		}
	}
	log.Info("push targets", "topic_fallback", fallback)
	n, err := notify.New(snsclient.New(cfg), notify.NewDeviceStore(pool), nc)
	if err != nil {
		return nil, fmt.Errorf("pushboot: notifier: %w", err)
	}
	return n, nil
}
