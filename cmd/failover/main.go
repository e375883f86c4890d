// Command failover is the failover runbook's fourth step (docs/regions.md):
// in the Region taking over, it moves every caller homed in the failed
// Region — the default record "*" among them — to this Region, each with
// version + 1 and a condition on the version it read, and prints the
// records it wrote as JSON lines. Run it with the operator's credentials
// (no function may move callers), after the standby's ledger is promoted:
//
//	AWS_REGION=us-west-2 go run ./cmd/failover -table Oncepay-homes -from us-east-1 -default us-east-1
//
// -to defaults to AWS_REGION; -default is the deployment's primary (the
// home of callers with no record while "*" has none either).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/oncepay/oncepay/internal/awsclient/dynamoclient"
	"github.com/oncepay/oncepay/internal/awsclient/fullconfig"
	"github.com/oncepay/oncepay/internal/home"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "failover:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("failover", flag.ContinueOnError)
	table := fs.String("table", "", "the home record table (output HomesTableName)")
	from := fs.String("from", "", "the failed Region")
	to := fs.String("to", "", "the Region taking over (default: AWS_REGION)")
	def := fs.String("default", "", "the deployment's primary Region (ONCEPAY_HOME_DEFAULT)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := fullconfig.Load(ctx)
	if err != nil {
		return err
	}
	if *to == "" {
		*to = cfg.Region
	}
	if *table == "" || *from == "" || *to == "" || *def == "" {
		return errors.New("-table, -from, -default and a Region (-to or AWS_REGION) are required")
	}
	if *from == *to {
		return fmt.Errorf("-from and -to are both %s", *from)
	}
	if *to != cfg.Region {
		// The moves are written in the Region the client signs for: run it
		// in the Region taking over, never into another's replica (the
		// failed one's least of all).
		return fmt.Errorf("-to %s is not this client's Region %s: run the failover with AWS_REGION=%s", *to, cfg.Region, *to)
	}
	mover := home.NewMover(dynamoclient.New(cfg), *table)
	moved, err := mover.Failover(ctx, *from, *to, *def)
	enc := json.NewEncoder(out)
	for _, r := range moved {
		_ = enc.Encode(map[string]any{"caller": r.Caller, "region": r.Region, "version": r.Version, "moved_at": r.MovedAt})
	}
	if err != nil {
		return fmt.Errorf("after %d move(s): %w", len(moved), err)
	}
	fmt.Fprintf(errOut, "failover: %d record(s) moved from %s to %s\n", len(moved), *from, *to)
	// Without a "*" record, callers with no record of their own follow
	// each stack's ONCEPAY_HOME_DEFAULT, which this command cannot read: a
	// -default that is not the deployment's leaves them where it says.
	_, all, _, found, err := mover.Store().Read(ctx, home.Everyone)
	if err != nil {
		return fmt.Errorf("read the default record: %w", err)
	}
	if !found {
		fmt.Fprintf(errOut, "failover: WARNING: no default record (\"*\"): callers without a record of their own stay homed in each stack's ONCEPAY_HOME_DEFAULT. If that is %s (the deployment's primary, output of the primary's stack), rerun with -default %s.\n", *from, *from)
	} else {
		fmt.Fprintf(errOut, "failover: callers without a record of their own are homed in %s (the default record, version %d)\n", all.Region, all.Version)
	}
	return nil
}
