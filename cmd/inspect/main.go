// Command inspect prints, as one JSON object, everything the local cloud
// holds about one payment (package localcloud/inspect; the shape is
// documented in docs/localcloud.md):
//
//	inspect --payment pay_...        (make -s inspect PAYMENT=pay_...)
//
// Exit codes: 0 printed; 1 no such payment, or the ledger cannot be read;
// 2 usage.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/localcloud/inspect"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/localcloud/phone"
)

const usage = `usage: inspect --payment <payment_id> [--dsn <ledger DSN>] [--phone <pushes file>]

Prints one JSON object: the payment row, its refund, its events, credits,
debits, notification intents per channel, the pushes the local phone
received for it and the emails the local SES took (docs/localcloud.md
describes every field).

`

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("inspect", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	pid := fs.String("payment", "", "the payment id (pay_...)")
	dsn := fs.String("dsn", "", "the ledger's DSN (default: "+stackenv.LedgerDSN+" from .local/env)")
	phonePath := fs.String("phone", "", "the phone's pushes file (default: .local/phone/pushes.jsonl, or $"+phone.EnvFile+")")
	printUsage := func(w io.Writer) {
		fmt.Fprint(w, usage)
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout)
			return 0
		}
		fmt.Fprintln(stderr, "inspect:", err)
		printUsage(stderr)
		return 2
	}
	if *pid == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "inspect: --payment is required (make -s inspect PAYMENT=<payment_id>)")
		printUsage(stderr)
		return 2
	}
	// Each default is read only when its flag is absent: the phone's path
	// needs the checkout's root, the DSN the provisioned .local/env.
	if *dsn == "" {
		env, err := localenv.Load()
		if err != nil {
			fmt.Fprintln(stderr, "inspect:", err)
			return 1
		}
		*dsn = env.Get(stackenv.LedgerDSN)
	}
	if *phonePath == "" {
		root, err := localenv.Root()
		if err != nil {
			fmt.Fprintln(stderr, "inspect:", err)
			return 1
		}
		*phonePath = phone.DefaultPath(filepath.Join(root, ".local"))
	}
	if *dsn == "" {
		fmt.Fprintf(stderr, "inspect: no ledger DSN: %s is not in .local/env (run `make up`) and --dsn is not set\n", stackenv.LedgerDSN)
		return 1
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, *dsn)
	if err != nil {
		fmt.Fprintln(stderr, "inspect: connect to the ledger:", err)
		return 1
	}
	defer conn.Close(context.Background())
	r, err := inspect.Read(ctx, conn, *phonePath, *pid)
	if errors.Is(err, inspect.ErrUnknownPayment) {
		fmt.Fprintf(stderr, "inspect: the ledger (%s) has no payment %s\n", conn.Config().Database, *pid)
		return 1
	}
	if err != nil {
		fmt.Fprintln(stderr, "inspect:", err)
		return 1
	}
	// The emails are moto's to tell (the endpoint .local/env names); a
	// moto that cannot be read leaves them [] and says so.
	if env, err := localenv.Load(); err == nil && env.Get("AWS_ENDPOINT_URL") != "" {
		if all, err := phone.Emails(ctx, env.Get("AWS_ENDPOINT_URL")); err != nil {
			fmt.Fprintln(stderr, "inspect: emails not read:", err)
		} else {
			r.AddEmails(all)
		}
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		fmt.Fprintln(stderr, "inspect:", err)
		return 1
	}
	fmt.Fprintln(stdout, string(b))
	return 0
}
