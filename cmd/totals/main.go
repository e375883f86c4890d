// Command totals prints, as one JSON object, a merchant's total for a day
// from the stream job's sink (package totals; docs/stream-job.md):
//
//	totals --merchant m1 [--day 2026-12-02] [--currency EUR]
//	(make -s totals MERCHANT=m1 [DAY=...] [CURRENCY=...])
//
// The read path is an operator's view, not an API route: the API's callers
// are buyers, and no principal of its speaks for a merchant, so a GET of a
// merchant's revenue would show it to whoever asks.
//
// Exit codes: 0 printed (a day with no total prints found: false); 1 the
// sink cannot be read; 2 usage.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/awsclient"
	"github.com/oncepay/oncepay/internal/awsclient/dynamoclient"
	"github.com/oncepay/oncepay/internal/localcloud/localenv"
	"github.com/oncepay/oncepay/internal/totals"
)

// Report is what the command prints.
type Report struct {
	MerchantID string `json:"merchant_id"`
	Day        string `json:"day"`
	Currency   string `json:"currency"`
	Found      bool   `json:"found"`
	Total      int64  `json:"total"`     // minor units: the recount's, else the sum of the partials
	Recounted  bool   `json:"recounted"` // the day was recounted from the ledger (docs/stream-job.md#recount)
	// RecountDue, when set and the day is not recounted yet, is when a
	// recount is due: until then Total may be short (a discarded batch's
	// writes were taken back, a copy came late).
	RecountDue *time.Time       `json:"recount_due,omitempty"`
	Partials   map[string]int64 `json:"partials"` // by stream shard (and totals.RecountShard)
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("totals", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	merchant := fs.String("merchant", "", "the merchant id")
	day := fs.String("day", time.Now().UTC().Format("2006-01-02"), "the day (UTC), YYYY-MM-DD")
	currency := fs.String("currency", "EUR", "the currency, ISO 4217")
	table := fs.String("table", "", "the totals table (default: "+stackenv.TotalsTable+" from .local/env)")
	if err := fs.Parse(args); err != nil || *merchant == "" || fs.NArg() > 0 {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintln(stderr, "totals: usage: totals --merchant <id> [--day YYYY-MM-DD] [--currency EUR] [--table name]")
		return 2
	}
	key, err := totals.ParseKey(*day + "#" + *currency + "#" + *merchant)
	if err != nil {
		fmt.Fprintln(stderr, "totals:", err)
		return 2
	}
	if *table == "" {
		env, err := localenv.Load()
		if err != nil {
			fmt.Fprintln(stderr, "totals:", err)
			return 1
		}
		if err := env.Export(); err != nil {
			fmt.Fprintln(stderr, "totals:", err)
			return 1
		}
		*table = env.Get(stackenv.TotalsTable)
		if *table == "" {
			fmt.Fprintf(stderr, "totals: %s is not in .local/env (run `make up`) and --table is not set\n", stackenv.TotalsTable)
			return 1
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cfg, err := awsclient.Config(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "totals:", err)
		return 1
	}
	sink, err := totals.NewTable(dynamoclient.New(cfg), *table)
	if err != nil {
		fmt.Fprintln(stderr, "totals:", err)
		return 1
	}
	partials, err := sink.Partials(ctx, key)
	if err != nil {
		fmt.Fprintln(stderr, "totals:", err)
		return 1
	}
	r := Report{MerchantID: key.Merchant, Day: key.Day, Currency: key.Currency, Found: len(partials) > 0, Partials: partials}
	r.Total, r.Recounted = totals.Total(partials)
	if !r.Recounted {
		due, pending, err := sink.Pending(ctx, key)
		if err != nil {
			fmt.Fprintln(stderr, "totals:", err)
			return 1
		}
		if pending {
			r.RecountDue = &due
		}
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		fmt.Fprintln(stderr, "totals:", err)
		return 1
	}
	fmt.Fprintln(stdout, string(b))
	return 0
}
