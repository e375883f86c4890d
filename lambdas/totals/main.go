// Command totals is the stream job's Lambda: the outbox table's stream in,
// through a tumbling window, merchants' daily totals out to the totals
// table, late copies to the recount queue (package totals). Clients are
// built once per execution environment and reused by every invocation.
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
	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/totals"
)

func main() {
	log := boot.Logger("totals")
	boot.FitProcs(log)
	fail := func(err error) { log.Error("init", "err", err); os.Exit(1) }
	cfg, err := boot.AWS(context.Background())
	if err != nil {
		fail(err)
	}
	table, err1 := boot.Require(stackenv.TotalsTable)
	queue, err2 := boot.Require(stackenv.RecountQueueURL)
	version, err3 := boot.Require(stackenv.TotalsVersion)
	for _, err := range []error{err1, err2, err3} {
		if err != nil {
			fail(err)
		}
	}
	v, err := strconv.Atoi(version)
	if err != nil {
		fail(fmt.Errorf("%s=%q: %w", stackenv.TotalsVersion, version, err))
	}
	sink, err := totals.NewTable(dynamoclient.New(cfg), table)
	if err != nil {
		fail(err)
	}
	recount, err := totals.RecountQueue(sqsclient.New(cfg), queue)
	if err != nil {
		fail(err)
	}
	job, err := totals.New(totals.Config{Version: totals.Version(v), Sink: sink, Recount: recount,
		Logger: log, Metrics: metrics.New(os.Stdout, "totals")})
	if err != nil {
		fail(err)
	}
	lambda.Start(job.Handle)
}
