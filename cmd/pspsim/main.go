// Command pspsim runs oncepay's PSP simulator (internal/pspsim): the subset of
// Stripe's API the PSP client uses, with Stripe's idempotency semantics,
// signed webhooks and fault injection under /_sim/.
//
//	pspsim -addr 127.0.0.1:8090 -webhook-url http://127.0.0.1:8080/webhooks/psp
//
// The webhook signing secret comes from -webhook-secret or, to keep it out of
// the process list, from PSPSIM_WEBHOOK_SECRET.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
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
	webhookSecret := flag.String("webhook-secret", os.Getenv("PSPSIM_WEBHOOK_SECRET"), "webhook signing secret (default $PSPSIM_WEBHOOK_SECRET)")
	keyWindow := flag.Duration("key-window", 24*time.Hour, "how long idempotency keys and their results are kept at least (24h or more, as Stripe)")
	searchLag := flag.Duration("search-lag", 0, "how long a new PaymentIntent stays invisible to search (Stripe's search is eventually consistent); POST /_sim/search_lag changes it")
	events := flag.String("webhook-events", "", "comma-separated event types the endpoint is subscribed to, * for all (default payment_intent.succeeded,payment_intent.payment_failed)")
	flag.Parse()

	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	slog.SetDefault(log)
	if *webhookURL != "" && *webhookSecret == "" {
		return errors.New("-webhook-url needs -webhook-secret (or PSPSIM_WEBHOOK_SECRET)")
	}

	cfg := pspsim.Config{
		KeyWindow:     *keyWindow,
		SearchLag:     *searchLag,
		WebhookURL:    *webhookURL,
		WebhookSecret: *webhookSecret,
		Logger:        log,
	}
	if *events != "" {
		cfg.WebhookEvents = strings.Split(*events, ",")
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	sim := pspsim.New(cfg)
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
	log.Info("pspsim listening", "addr", ln.Addr().String(), "webhook_url", *webhookURL, "key_window", keyWindow.String(), "search_lag", searchLag.String())

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
