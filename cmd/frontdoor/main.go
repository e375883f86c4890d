// Command frontdoor is the local front door of the payment API.
//
//	frontdoor serve [--addr 127.0.0.1:8080]   serve the API with the real handler
//	frontdoor token --caller u1               print a bearer token for caller u1
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/localcloud/frontdoor"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
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
		srv := &http.Server{Addr: *addr, Handler: &frontdoor.Server{Invoke: h.HandleAPIGatewayV2, Secret: secret}, ReadHeaderTimeout: 5 * time.Second}
		log.Info("front door listening", "addr", *addr)
		return srv.ListenAndServe()
	}
	return fmt.Errorf("unknown command %q", args[0])
}
