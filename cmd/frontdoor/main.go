// Command frontdoor is the local front door of the payment API.
//
//	frontdoor serve [--addr 127.0.0.1:8080]   serve the API with the real handler
//	frontdoor serve --template cdk.out/Oncepay.template.json
//	                                          serve every route of the template
//	frontdoor token --caller u1               print a bearer token for caller u1
//
// With --template the door plays the template's HTTP API (frontdoor.Gateway):
// every route, the gateway's own answers, the webhook route without a JWT.
// This command runs the routes' functions in process (the api handler for
// the /payments routes, the webhook handler for /webhooks/psp when
// ONCEPAY_WEBHOOK_SECRET is set); the live stack composes the same Gateway
// with the function runner instead.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/localcloud/frontdoor"
	"github.com/oncepay/oncepay/internal/localcloud/invoke"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/webhook"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "frontdoor:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: frontdoor serve|token [flags]")
	}
	root, err := localenv.Root()
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	caller := fs.String("caller", "", "the caller a token names")
	ttl := fs.Duration("ttl", 24*time.Hour, "token lifetime")
	keyPath := fs.String("key", filepath.Join(root, ".local", "frontdoor.key"), "HMAC key of local tokens")
	template := fs.String("template", "", "serve the routes of this synthesized template (empty: every request to the api handler)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	secret, err := frontdoor.LoadOrCreateSecret(*keyPath)
	if err != nil {
		return err
	}
	switch args[0] {
	case "token":
		tok, err := frontdoor.Mint(secret, *caller, *ttl, time.Now())
		if err != nil {
			return err
		}
		fmt.Println(tok)
		return nil
	case "serve":
		env, err := localenv.Load()
		if err != nil {
			return err
		}
		if err := env.Export(); err != nil {
			return err
		}
		log := boot.Logger("api")
		h, err := api.FromEnv(context.Background(), log)
		if err != nil {
			return err
		}
		var door http.Handler = &frontdoor.Server{Invoke: h.HandleAPIGatewayV2, Secret: secret}
		if *template != "" {
			if door, err = templateDoor(*template, h, secret, log); err != nil {
				return err
			}
		}
		srv := &http.Server{Addr: *addr, Handler: door, ReadHeaderTimeout: 5 * time.Second}
		log.Info("front door listening", "addr", *addr, "template", *template)
		return srv.ListenAndServe()
	}
	return fmt.Errorf("unknown command %q", args[0])
}

// templateDoor serves the template's routes with the handlers this process
// holds: the api's for the /payments routes and, when its secret is set,
// the webhook's for /webhooks/psp. A route whose function is not held here
// answers 500, as a function that cannot start would.
func templateDoor(path string, h *api.Handler, secret []byte, log *slog.Logger) (http.Handler, error) {
	routes, err := frontdoor.LoadRoutes(path)
	if err != nil {
		return nil, err
	}
	fns := invoke.Func{}
	for _, r := range routes {
		switch {
		case strings.HasPrefix(r.Key, "POST /payments"):
			fns[r.Function] = inProcess(h.Invoke)
		case r.Key == "POST /webhooks/psp":
			if os.Getenv(webhook.EnvSecret) == "" && os.Getenv(stackenv.WebhookSecretArn) == "" {
				log.Warn("no webhook secret: the webhook route is not served", "env", webhook.EnvSecret, "or", stackenv.WebhookSecretArn)
				continue
			}
			wh, err := webhook.FromEnv(context.Background(), boot.Logger("webhook"))
			if err != nil {
				return nil, err
			}
			fns[r.Function] = inProcess(wh.Invoke)
		}
	}
	return frontdoor.NewGateway(routes, fns, secret, frontdoor.WithLogger(log))
}

// inProcess runs a Lambda entry point as the runtime would: the payload in,
// the answer marshalled out.
func inProcess(h func(context.Context, json.RawMessage) (any, error)) func(context.Context, []byte) ([]byte, error) {
	return func(ctx context.Context, payload []byte) ([]byte, error) {
		out, err := h(ctx, payload)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	}
}
