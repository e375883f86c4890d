// Command oncepay is a buyer's client for the payment API: it behaves the way
// a correct app must (internal/client): the key is made and journaled before
// the first send, reused on every retry, and resolved when the outcome is
// unknown.
//
//	oncepay pay --order 42 --amount 3000 --currency USD --method pm_card_visa [--merchant m1]
//	oncepay status --order 42
//	oncepay resolve            (resume every open intent)
//	oncepay token --caller u1  (local cloud only)
//
// Flags common to all: --url, --token (or $ONCEPAY_TOKEN), --journal, --json.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/oncepay/oncepay/internal/client"
	"github.com/oncepay/oncepay/internal/frontdoor"
	"github.com/oncepay/oncepay/internal/localenv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "oncepay:", err)
	}
	os.Exit(code)
}

func defaultJournal() string {
	if root, err := localenv.Root(); err == nil {
		return filepath.Join(root, ".local", "client.journal")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".oncepay.journal")
}

func run(ctx context.Context, args []string) (int, error) {
	if len(args) == 0 {
		return 2, errors.New("usage: oncepay pay|status|resolve|token [flags]")
	}
	cmd := args[0]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	baseURL := fs.String("url", envOr(localenv.FrontDoorURL, "http://127.0.0.1:8080"), "the API's base URL")
	token := fs.String("token", os.Getenv("ONCEPAY_TOKEN"), "bearer token (default $ONCEPAY_TOKEN)")
	journalPath := fs.String("journal", envOr("ONCEPAY_JOURNAL", defaultJournal()), "the app's journal file")
	asJSON := fs.Bool("json", false, "print JSON")
	order := fs.String("order", "", "order id")
	amount := fs.Int64("amount", 0, "amount in minor units")
	currency := fs.String("currency", "USD", "ISO 4217 currency")
	method := fs.String("method", "pm_card_visa", "payment method")
	merchant := fs.String("merchant", "m1", "merchant id")
	caller := fs.String("caller", "", "caller (token)")
	timeout := fs.Duration("timeout", 10*time.Second, "per-request timeout")
	if err := fs.Parse(args[1:]); err != nil {
		return 2, err
	}
	if cmd == "token" {
		root, err := localenv.Root()
		if err != nil {
			return 1, err
		}
		secret, err := frontdoor.LoadOrCreateSecret(filepath.Join(root, ".local", "frontdoor.key"))
		if err != nil {
			return 1, err
		}
		tok, err := frontdoor.Mint(secret, *caller, 24*time.Hour, time.Now())
		if err != nil {
			return 1, err
		}
		fmt.Println(tok)
		return 0, nil
	}
	j, err := client.OpenJournal(*journalPath)
	if err != nil {
		return 1, err
	}
	defer j.Close()
	cfg := client.Config{BaseURL: *baseURL, Token: *token, Timeout: *timeout}
	if !*asJSON {
		cfg.Progress = func(attempt int, wait time.Duration, why string) {
			fmt.Fprintf(os.Stderr, "  retry %d in %s (%s), same key\n", attempt, wait.Round(time.Millisecond), why)
		}
	}
	crashPoints(&cfg)
	c := client.New(cfg, j)
	switch cmd {
	case "pay":
		if *order == "" || *amount <= 0 {
			return 2, errors.New("pay needs --order and --amount")
		}
		p := client.Payment{MerchantID: *merchant, OrderID: *order, Amount: *amount, Currency: *currency, PaymentMethod: *method}
		r, err := c.Pay(ctx, p)
		if err != nil {
			return 1, err
		}
		return print(r, *asJSON), nil
	case "resolve":
		rs, err := c.Resume(ctx)
		if err != nil {
			return 1, err
		}
		code := 0
		for _, r := range rs {
			code = max(code, print(r, *asJSON))
		}
		if len(rs) == 0 && !*asJSON {
			fmt.Println("nothing open in the journal")
		}
		return code, nil
	case "status":
		in, err := j.ForOrder(*order)
		if err != nil {
			return 1, err
		}
		if *asJSON {
			b, _ := json.Marshal(in)
			fmt.Println(string(b))
		} else {
			fmt.Printf("order %s: key %s, %s %s, %d attempt(s)\n", in.Payment.OrderID, in.Key, in.State, in.Outcome, in.Attempts)
		}
		return 0, nil
	}
	return 2, fmt.Errorf("unknown command %q", cmd)
}

// print writes the result and returns the exit code: 0 paid, 3 declined or
// rejected, 4 voided (a new tap may pay), 5 still unknown (run resolve later).
func print(r client.Result, asJSON bool) int {
	if asJSON {
		b, _ := json.Marshal(r)
		fmt.Println(string(b))
	} else {
		msg := map[string]string{
			client.Succeeded: "paid", client.FailedPay: "declined", client.Void: "not charged, and it never will be",
			client.Unknown: "not confirmed yet: run `oncepay resolve` later (the same key will be used)", "REJECTED": "refused",
		}[r.State]
		fmt.Printf("%s: %s (key %s, payment %s, %d attempt(s)) %s\n", r.State, msg, r.Key, r.PaymentID, r.Attempts, r.Detail)
	}
	switch r.State {
	case client.Succeeded:
		return 0
	case client.Void:
		return 4
	case client.Unknown:
		return 5
	}
	return 3
}

// crashPoints lets tests kill the process at the client's crash points
// (ONCEPAY_CLIENT_CRASH=after-journal|after-send): SIGKILL, as kill -9.
func crashPoints(cfg *client.Config) {
	die := func() { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL); select {} }
	switch os.Getenv("ONCEPAY_CLIENT_CRASH") {
	case "after-journal":
		cfg.AfterJournal = die
	case "after-send":
		cfg.AfterSend = die
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
