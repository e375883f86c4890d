// Command cdk is the oncepay CDK app; cdk.json runs it.
//
// Context (cdk synth|deploy -c key=value) selects the deployment:
//
//	oncepay:profile                  sandbox (default) or prod
//	oncepay:pspKeySecretArn          complete ARN of an existing secret {"api_key": …}, read by the api and the resolver (default: a placeholder is created)
//	oncepay:pspKeySecretKmsKey       with it, required: the customer-managed KMS key it is encrypted with (its readers get kms:Decrypt), or aws-managed
//	oncepay:webhookSecretArn         complete ARN of an existing secret {"webhook_secret": …}, read by the webhook (default: a placeholder is created)
//	oncepay:webhookSecretKmsKey      with it, required: its KMS key's ARN, or aws-managed
//	oncepay:pspUrl                   a Stripe-compatible base URL (default: Stripe)
//	oncepay:jwtIssuer                an external JWT issuer (default: a Cognito user pool in the stack)
//	oncepay:jwtAudience              its audiences, comma-separated
//	oncepay:albCertificateArn        ACM certificate: adds the ALB front door
//	oncepay:albDomainName            the name the certificate covers
//	oncepay:albCognitoDomainPrefix   hosted sign-in prefix for the ALB's Cognito action
//	oncepay:albKeysUrl               where the ALB's public keys are (default https://public-keys.auth.elb.<Region>.<URL suffix>; GovCloud must set it)
//	oncepay:platformApplicationArns  SNS platform applications, comma-separated
//	oncepay:ledgerProxy              true/false: override the profile's RDS Proxy choice
//	oncepay:resolverReservedConcurrency  default 1; 0 for accounts whose concurrency quota is 10
//	oncepay:assets                   where build/<fn>/bootstrap live (default build)
package main

import (
	"fmt"
	"os"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay"
	"github.com/oncepay/oncepay/cdk/oncepay/nag"
)

func main() {
	os.Exit(run())
}

func run() int {
	defer jsii.Close()
	app := awscdk.NewApp(nil)

	props, err := oncepay.StackPropsFromContext(app)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	// No Env: an environment-agnostic stack needs no lookups (no network at
	// synth) and deploys to whatever account and region the CLI targets.
	props.Description = jsii.String(fmt.Sprintf("oncepay: idempotency keys and effectively-once payments (%s)", props.Profile))
	// The profile names the stack (Profile.StackName): leaving out
	// -c oncepay:profile=prod cannot redeploy the prod stack as a sandbox.
	oncepay.NewStack(app, props.Profile.StackName(), props)

	// cdk synth fails on a finding at error level; the stack tests fail on
	// any finding.
	nag.AddPacks(app)

	app.Synth(nil)
	return 0
}
