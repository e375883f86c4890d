// Command reconcile is the reconciliation Lambda (package reconcile):
// EventBridge invokes it daily for the two previous UTC days, and an
// operator may invoke it for a day or a span (`make reconcile DAY=...`
// locally). Its clients and the ledger pool are built once per execution
// environment.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/reconcile"
)

func main() {
	log := boot.Logger("reconcile")
	boot.FitProcs(log)
	r, err := reconcile.FromEnv(context.Background(), log)
	if err != nil {
		log.Error("init", "err", err)
		os.Exit(1)
	}
	lambda.Start(r.Handle)
}
