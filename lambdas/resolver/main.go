// Command resolver is the resolver Lambda (package resolver): EventBridge
// invokes it on a schedule, and an operator may invoke it on demand; either
// payload is one run. Clients, the ledger pool and the PSP rate cap are
// built once per execution environment and reused by every invocation.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/oncepay/oncepay/internal/boot"
	"github.com/oncepay/oncepay/internal/resolver"
)

func main() {
	log := boot.Logger("resolver")
	boot.FitProcs(log)
	s, err := resolver.SetupFromEnv(context.Background(), log)
	if err != nil {
		log.Error("init", "err", err)
		os.Exit(1)
	}
	r, err := resolver.New(s.Config, s.Deps)
	if err != nil {
		log.Error("init", "err", err)
		os.Exit(1)
	}
	lambda.Start(r.Handle)
}
