// Command webhook is the PSP webhook Lambda (package webhook): POST
// /webhooks/psp on the HTTP API, with no JWT authorizer — the PSP's
// signature is the authentication. The ledger pool and the outbox client
// are built once per execution environment.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/webhook"
)

func main() {
	log := boot.Logger("webhook")
	boot.FitProcs(log)
	h, err := webhook.FromEnv(context.Background(), log)
	if err != nil {
		log.Error("init", "err", err)
		os.Exit(1)
	}
	lambda.Start(h.Invoke)
}
