// Package preflight checks an AWS account, read-only, for what would fail a
// first `cdk deploy` of oncepay or leave it deployed but not working, so
// the trap shows in seconds and not after Aurora is created. Each check
// reads the deploy's CDK context (the keys cdk/oncepay reads) and makes
// Describe/Get calls in each Region the app deploys to:
//
//   - lambda-concurrency: the resolver's reserved concurrency fits the
//     account's Lambda quota;
//   - ses-identity, ses-account (with oncepay:emailFrom): the sender's
//     identity, and whether SES is out of its sandbox;
//   - sns-platform-app (with oncepay:platformApplicationArns): each
//     application exists in the Region and is enabled;
//   - cognito-domain (with the ALB's oncepay:albCognitoDomainPrefix): no
//     account holds the hosted sign-in prefix in the Region;
//   - az-ids (prod, or with oncepay:availabilityZoneIds): each Region's
//     two AZ ids exist, are available and take RDS Proxy.
//
// The checks call the AWS SDK through the small interfaces below, so their
// tests replay recorded answers (testdata/).
package preflight

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/aws/aws-sdk-go-v2/service/cognitoidentityprovider"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sesv2"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/smithy-go"
)

// Status is a check's verdict.
type Status int

const (
	// OK: nothing to do.
	OK Status = iota
	// Warn: the deploy succeeds, but something will not work until the
	// user acts.
	Warn
	// Fail: the deploy would fail, or the check could not tell.
	Fail
)

func (s Status) String() string {
	switch s {
	case OK:
		return "ok"
	case Warn:
		return "warn"
	}
	return "FAIL"
}

// Result is one check's verdict in one Region.
type Result struct {
	Status Status
	// Region the check ran in; "-" for one about the context alone.
	Region string
	Check  string
	// Detail says what was found and, unless OK, what to do.
	Detail string
}

// LambdaAPI is the Lambda call the checks make.
type LambdaAPI interface {
	GetAccountSettings(context.Context, *lambda.GetAccountSettingsInput, ...func(*lambda.Options)) (*lambda.GetAccountSettingsOutput, error)
}

// SESAPI is the SES (v2) calls the checks make.
type SESAPI interface {
	GetEmailIdentity(context.Context, *sesv2.GetEmailIdentityInput, ...func(*sesv2.Options)) (*sesv2.GetEmailIdentityOutput, error)
	GetAccount(context.Context, *sesv2.GetAccountInput, ...func(*sesv2.Options)) (*sesv2.GetAccountOutput, error)
}

// SNSAPI is the SNS call the checks make.
type SNSAPI interface {
	GetPlatformApplicationAttributes(context.Context, *sns.GetPlatformApplicationAttributesInput, ...func(*sns.Options)) (*sns.GetPlatformApplicationAttributesOutput, error)
}

// CognitoAPI is the Cognito user pools call the checks make.
type CognitoAPI interface {
	DescribeUserPoolDomain(context.Context, *cognitoidentityprovider.DescribeUserPoolDomainInput, ...func(*cognitoidentityprovider.Options)) (*cognitoidentityprovider.DescribeUserPoolDomainOutput, error)
}

// EC2API is the EC2 call the checks make.
type EC2API interface {
	DescribeAvailabilityZones(context.Context, *ec2.DescribeAvailabilityZonesInput, ...func(*ec2.Options)) (*ec2.DescribeAvailabilityZonesOutput, error)
}

// Resolver looks up host names (*net.Resolver is one).
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

// Clients are one Region's clients (the SDK's own satisfy the interfaces).
type Clients struct {
	Lambda  LambdaAPI
	SES     SESAPI
	SNS     SNSAPI
	Cognito CognitoAPI
	EC2     EC2API
	DNS     Resolver
}

// Run makes every check s calls for in each Region, in order, with the
// Region's clients, and returns their results; a check whose call fails
// (ctx ended, say) is a Fail.
func Run(ctx context.Context, s Settings, regions []string, clients func(region string) Clients) []Result {
	var out []Result
	var claimed []string // AZ ids some Region's stack takes
	allRead := true
	for _, region := range regions {
		c := clients(region)
		out = append(out, checkConcurrency(ctx, c.Lambda, region, s))
		if s.EmailFrom != "" {
			out = append(out, checkEmailIdentity(ctx, c.SES, region, s.EmailFrom))
			out = append(out, checkSESAccount(ctx, c.SES, region))
		}
		for _, arn := range s.PlatformApplicationArns {
			out = append(out, checkPlatformApp(ctx, c.SNS, region, arn))
		}
		if s.CognitoDomainPrefix != "" {
			out = append(out, checkCognitoDomain(ctx, c.Cognito, c.DNS, region, s))
		}
		if s.Prod || len(s.AvailabilityZoneIDs) > 0 {
			r, mine, read := checkAZIDs(ctx, c.EC2, region, s)
			out = append(out, r)
			claimed = append(claimed, mine...)
			allRead = allRead && read
		}
	}
	if len(s.Regions) > 0 && allRead {
		if r, ok := unclaimedAZIDs(s, claimed); ok {
			out = append(out, r)
		}
	}
	return out
}

// Failed reports whether any result is a Fail.
func Failed(results []Result) bool {
	for _, r := range results {
		if r.Status == Fail {
			return true
		}
	}
	return false
}

// Print writes one line per result (status, Region, check, detail) and a
// count of each status.
func Print(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	n := map[Status]int{}
	for _, r := range results {
		n[r.Status]++
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Status, r.Region, r.Check, r.Detail)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("preflight: print: %w", err)
	}
	_, err := fmt.Fprintf(w, "preflight: %d ok, %d warn, %d FAIL\n", n[OK], n[Warn], n[Fail])
	return err
}

// couldNot is the result of a check whose call failed: it cannot vouch for
// the deploy, so it fails, naming the permission the call needs.
func couldNot(region, check, action string, err error) Result {
	detail := fmt.Sprintf("could not check (%s): %v", action, err)
	var ae smithy.APIError
	if errors.As(err, &ae) && strings.Contains(strings.ToLower(ae.ErrorCode()), "accessdenied") {
		detail = fmt.Sprintf("could not check: the credentials may not call %s (%s); run with credentials that may, or grant it", action, ae.ErrorCode())
	}
	return Result{Status: Fail, Region: region, Check: check, Detail: detail}
}
