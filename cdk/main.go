// Command cdk is the oncepay CDK app; cdk.json runs it.
//
// Context (cdk synth|deploy -c key=value) selects the deployment:
//
//	oncepay:profile                  sandbox (default) or prod
//	oncepay:pspKeySecretArn          complete ARN of an existing secret {"api_key": …}, read by the api, the resolver and the reconciliation (default: a placeholder is created)
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
//
// Across Regions (docs/regions.md): one stack per Region, <stack name>-<region>
// (Oncepay-us-east-1, …), each pinned to its Region and to no account; the
// first Region's is the primary and deploys first.
//
//	oncepay:regions                  comma-separated Regions, the first the primary (the ledger's writer, the default home), e.g. us-east-1,us-west-2; absent: one stack, Oncepay, in whatever Region the CLI targets
//	oncepay:regionUrls               with it, required: every Region's API base URL, comma-separated region=https://… pairs (custom domains the operator owns)
//	oncepay:claims                   eventual (default: a global table, last writer wins; the api routes callers to their home) or strong (DynamoDB multi-Region strong consistency: three Regions, or two and a witness; no TTL)
//	oncepay:witnessRegion            with strong and two Regions: the witness Region
//
// Across Regions the app also needs oncepay:jwtIssuer (a Cognito user pool
// lives in one Region) and refuses the contexts that name a resource of one
// Region by ARN (the PSP secrets, the ALB certificate, platform applications).
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
	// Across Regions each stack names its Region (replicas need it) and
	// still no account: without one CDK looks nothing up either.
	props.Description = jsii.String(fmt.Sprintf("oncepay: idempotency keys and effectively-once payments (%s)", props.Profile))
	// The profile names the stack (Profile.StackName): leaving out
	// -c oncepay:profile=prod cannot redeploy the prod stack as a sandbox.
	if props.Regions != nil {
		oncepay.NewRegionStacks(app, props)
	} else {
		oncepay.NewStack(app, props.Profile.StackName(), props)
	}

	// cdk synth fails on a finding at error level; the stack tests fail on
	// any finding.
	nag.AddPacks(app)

	app.Synth(nil)
	return 0
}
