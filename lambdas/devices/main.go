// Command devices is the devices Lambda: PUT and DELETE /devices/{device_id}
// on the HTTP API, a caller's push devices ordered by the device's own
// counter (package devices). Clients and the ledger pool are built once per
// execution environment.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/awsclient/snsclient"
	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/devices"
)

func main() {
	ctx := context.Background()
	log := boot.Logger("devices")
	boot.FitProcs(log)
	fail := func(err error) { log.Error("init", "err", err); os.Exit(1) }
	cfg, err := boot.AWS(ctx)
	if err != nil {
		fail(err)
	}
	pool, err := boot.Ledger(ctx)
	if err != nil {
		fail(err)
	}
	// No platform application is a deploy's choice, not a failure: every
	// registration then answers 422 platform-not-configured.
	apps, err := devices.PlatformApps(os.Getenv(stackenv.PushPlatformApps))
	if err != nil {
		fail(err)
	}
	reg, err := devices.NewRegistry(pool, snsclient.New(cfg), apps, log)
	if err != nil {
		fail(err)
	}
	lambda.Start(devices.Handler{Store: reg, Log: log}.HandleAPIGatewayV2)
}
