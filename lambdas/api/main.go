// Command api is the payment API's Lambda function (HTTP API or ALB events).
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/boot"
)

func main() {
	log := boot.Logger("api")
	boot.FitProcs(log)
	h, err := api.FromEnv(context.Background(), log)
	if err != nil {
		log.Error("init", "err", err)
		os.Exit(1)
	}
	lambda.Start(h.Invoke)
}
