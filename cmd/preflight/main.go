// Command preflight checks, read-only and with your own AWS credentials,
// what would fail a first `cdk deploy` of oncepay into an account
// (package preflight lists the checks). It reads the context the cdk CLI
// would give the app (cdk.json, cdk.context.json, ~/.cdk.json) and the same
// -c flags, and checks each Region of oncepay:regions, else the CLI's
// Region (AWS_REGION, or the profile's):
//
//	preflight [-c key=value]...
//	(make preflight CONTEXT="-c oncepay:profile=prod -c oncepay:availabilityZoneIds=use1-az1,use1-az2")
//
// It prints one line per check (ok, warn, or FAIL with what to do).
// Exit codes: 0 nothing failed; 1 a check failed; 2 usage, context or
// credentials.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cognitoidentityprovider"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sesv2"
	"github.com/aws/aws-sdk-go-v2/service/sns"

	"github.com/oncepay/oncepay/internal/awsclient/fullconfig"
	"github.com/oncepay/oncepay/internal/preflight"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("preflight", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var flags preflight.Flags
	fs.Var(&flags, "c", "a context value, key=value (repeatable), as cdk -c")
	fs.Var(&flags, "context", "the same as -c")
	dir := fs.String("app", ".", "the directory of cdk.json")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "preflight: unexpected arguments %q (context is -c key=value)\n", fs.Args())
		return 2
	}
	home, _ := os.UserHomeDir() // none: no ~/.cdk.json, as for the CLI
	cdkCtx, err := preflight.LoadContext(*dir, home, flags)
	if err != nil {
		fmt.Fprintln(stderr, "preflight:", err)
		return 2
	}
	settings, err := preflight.SettingsFromContext(cdkCtx)
	if err != nil {
		fmt.Fprintln(stderr, "preflight:", err)
		return 2
	}

	// The whole run is a few dozen calls; a minute bounds a hung network.
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cfg, err := fullconfig.Load(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "preflight:", err)
		return 2
	}
	regions := settings.Regions
	if len(regions) == 0 && cfg.Region != "" {
		regions = []string{cfg.Region}
	}
	if len(regions) == 0 {
		fmt.Fprintln(stderr, "preflight: no Region: set AWS_REGION (or the profile's region), the one cdk deploy will use")
		return 2
	}
	if err := credentials(ctx, cfg); err != nil {
		fmt.Fprintln(stderr, "preflight:", err)
		return 2
	}

	results := preflight.Run(ctx, settings, regions, func(region string) preflight.Clients {
		c := cfg.Copy()
		c.Region = region
		return preflight.Clients{
			Lambda:  lambda.NewFromConfig(c),
			SES:     sesv2.NewFromConfig(c),
			SNS:     sns.NewFromConfig(c),
			Cognito: cognitoidentityprovider.NewFromConfig(c),
			EC2:     ec2.NewFromConfig(c),
			DNS:     net.DefaultResolver,
		}
	})
	if err := preflight.Print(stdout, results); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if preflight.Failed(results) {
		return 1
	}
	return 0
}

// credentials fails early, once, when there are none: otherwise every
// check would fail with the same error.
func credentials(ctx context.Context, cfg aws.Config) error {
	if cfg.Credentials == nil {
		return errors.New("no AWS credentials: configure them as for the aws CLI (aws sts get-caller-identity must work)")
	}
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		return fmt.Errorf("no usable AWS credentials (aws sts get-caller-identity must work): %w", err)
	}
	return nil
}
