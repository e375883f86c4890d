// Command cdk is the oncepay CDK app; cdk.json runs it.
package main

import (
	"fmt"
	"os"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay"
)

func main() {
	os.Exit(run())
}

func run() int {
	defer jsii.Close()
	app := awscdk.NewApp(nil)

	profile, err := oncepay.ProfileFromContext(app)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	// No Env: an environment-agnostic stack needs no lookups (no network at
	// synth) and deploys to whatever account and region the CLI targets.
	oncepay.NewStack(app, "Oncepay", &oncepay.StackProps{
		StackProps: awscdk.StackProps{
			Description: jsii.String(fmt.Sprintf("oncepay: idempotency keys and effectively-once payments (%s)", profile)),
		},
		Profile: profile,
	})

	// cdk synth fails on a finding at error level; the stack tests fail on
	// any finding.
	oncepay.AddNagPacks(app)

	app.Synth(nil)
	return 0
}
