// Command relay is the outbox relay Lambda: the outbox table's stream in,
// the events FIFO queue out (package relay). Clients are built once per
// execution environment and reused by every invocation.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/awsclient/sqsclient"
	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/relay"
)

func main() {
	log := boot.Logger("relay")
	boot.FitProcs(log)
	fail := func(err error) { log.Error("init", "err", err); os.Exit(1) }
	cfg, err := boot.AWS(context.Background())
	if err != nil {
		fail(err)
	}
	queue, err := boot.Require(stackenv.EventsQueueURL)
	if err != nil {
		fail(err)
	}
	r, err := relay.New(sqsclient.New(cfg), relay.Config{QueueURL: queue, Logger: log, Metrics: metrics.New(os.Stdout, "relay")})
	if err != nil {
		fail(err)
	}
	lambda.Start(r.Handle)
}
