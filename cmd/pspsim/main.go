// Command pspsim runs oncepay's PSP simulator (internal/pspsim): the subset of
// Stripe's API the PSP client uses, with Stripe's idempotency semantics,
// signed webhooks and fault injection under /_sim/.
//
//	pspsim -addr 127.0.0.1:8090 -webhook-url http://127.0.0.1:8080/webhooks/psp
//
// The webhook signing secret comes from -webhook-secret or, to keep it out of
// the process list, from PSPSIM_WEBHOOK_SECRET: in the process environment,
// else in the local cloud's .local/env, where the provisioner writes the PSP
// secret's webhook_secret (the value the webhook function verifies). With
// no secret anywhere the simulator runs without webhooks and says so: a
// guessed secret would only have every delivery refused.
//
// The endpoint is subscribed to the event types the webhook function
// handles (webhook.Subscribed) unless -webhook-events says otherwise.
//
// State (keys and saved results, PaymentIntents, charges, refunds, pending
// deliveries) is kept in -state, .local/pspsim.state by default, across
// restarts; -state "" keeps it in memory only.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/webhook"
)

func main() {
	if err := run(); err != nil {
		slog.Error("pspsim stopped", "error", err.Error())
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:8090", "listen address")
	webhookURL := flag.String("webhook-url", "", "where to POST webhook events (empty: no webhooks)")
	webhookSecret := flag.String("webhook-secret", "", "webhook signing secret (default $PSPSIM_WEBHOOK_SECRET, from the environment or .local/env)")
	keyWindow := flag.Duration("key-window", 24*time.Hour, "how long idempotency keys and their results are kept at least (24h or more, as Stripe)")
	searchLag := flag.Duration("search-lag", 0, "how long a new PaymentIntent stays invisible to search (Stripe's search is eventually consistent); POST /_sim/search_lag changes it")
	events := flag.String("webhook-events", strings.Join(webhook.Subscribed, ","), "comma-separated event types the endpoint is subscribed to, * for all (default: those the webhook function handles)")
	state := flag.String("state", defaultStatePath(), `state file kept across restarts ("" for memory only)`)
	flag.Parse()

	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	slog.SetDefault(log)
	if *webhookSecret == "" {
		*webhookSecret = lookupSecret()
	}
	if *webhookURL != "" && *webhookSecret == "" {
		log.Warn("no webhook signing secret: webhooks are off", "webhook_url", *webhookURL,
			"want", secretEnv+" in the environment or .local/env (make up writes it)")
		*webhookURL = ""
	}

	cfg := pspsim.Config{
		KeyWindow:     *keyWindow,
		SearchLag:     *searchLag,
		WebhookURL:    *webhookURL,
		WebhookSecret: *webhookSecret,
		StateFile:     *state,
		Logger:        log,
	}
	if *events != "" {
		cfg.WebhookEvents = strings.Split(*events, ",")
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	sim, err := pspsim.Open(cfg)
	if err != nil {
		return err
	}
	defer sim.Close()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	srv := &http.Server{Handler: sim, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("pspsim listening", "addr", ln.Addr().String(), "webhook_url", *webhookURL, "webhook_events", cfg.WebhookEvents,
		"state", *state, "key_window", keyWindow.String(), "search_lag", searchLag.String())

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shut down: %w", err)
	}
	log.Info("pspsim stopped")
	return nil
}

// secretEnv names the signing secret, which the provisioner writes.
const secretEnv = stackenv.PSPSimWebhookSecret

// lookupSecret reads the signing secret from the process environment, else
// from the local cloud's env file.
func lookupSecret() string {
	if v := os.Getenv(secretEnv); v != "" {
		return v
	}
	env, err := localenv.Load()
	if err != nil {
		return ""
	}
	return env.Get(secretEnv)
}

// defaultStatePath is .local/pspsim.state of the checkout, or memory only
// outside one.
func defaultStatePath() string {
	root, err := localenv.Root()
	if err != nil {
		return ""
	}
	return filepath.Join(root, ".local", "pspsim.state")
}
