// Package nag applies the cdk-nag packs the oncepay stack must pass. It is a
// package of its own, used by the project's app and the tests: the
// constructs (package oncepay) only write the suppressions' metadata, so a
// stack that uses a construct chooses its own checks and compiles no
// cdk-nag.
package nag

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// AddPacks applies AWS Solutions and Serverless to scope. Findings become
// errors and warnings on the construct tree.
func AddPacks(scope constructs.IConstruct) {
	verbose := &cdknag.NagPackProps{Verbose: jsii.Bool(true)}
	awscdk.Aspects_Of(scope).Add(cdknag.NewAwsSolutionsChecks(verbose), nil)
	awscdk.Aspects_Of(scope).Add(cdknag.NewServerlessChecks(verbose), nil)
}
