// Command recount is the stream job's batch recount Lambda: the recount
// queue (late copies) and the totals mapping's on-failure queue in, each
// merchant's day recounted from the ledger once it is over, into the totals
// table (package recount). Clients and the ledger pool are built once per
// execution environment.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/awsclient/dynamoclient"
	"github.com/oncepay/oncepay/internal/awsclient/sqsclient"
	"github.com/oncepay/oncepay/internal/awsclient/streamsclient"
	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/recount"
	"github.com/oncepay/oncepay/internal/totals"
)

func main() {
	ctx := context.Background()
	log := boot.Logger("recount")
	boot.FitProcs(log)
	fail := func(err error) { log.Error("init", "err", err); os.Exit(1) }
	cfg, err := boot.AWS(ctx)
	if err != nil {
		fail(err)
	}
	table, err1 := boot.Require(stackenv.TotalsTable)
	late, err2 := boot.Require(stackenv.RecountQueueURL)
	failures, err3 := boot.Require(stackenv.TotalsFailureQueueURL)
	version, err4 := boot.Require(stackenv.TotalsVersion)
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			fail(err)
		}
	}
	v, err := strconv.Atoi(version)
	if err != nil {
		fail(fmt.Errorf("%s=%q: %w", stackenv.TotalsVersion, version, err))
	}
	pool, err := boot.Ledger(ctx)
	if err != nil {
		fail(err)
	}
	sink, err := totals.NewTable(dynamoclient.New(cfg), table)
	if err != nil {
		fail(err)
	}
	m := metrics.New(os.Stdout, "recount")
	r, err := recount.New(recount.Config{Version: totals.Version(v), Ledger: ledger.New(pool), Sink: sink, Logger: log, Metrics: m})
	if err != nil {
		fail(err)
	}
	lambda.Start(recount.Function{Recounter: r, SQS: sqsclient.New(cfg), Streams: streamsclient.New(cfg),
		QueueURLs: []string{late, failures}, RecountQueueURL: late, Logger: log, Metrics: m}.Handle)
}
