// Package nag applies the cdk-nag packs the oncepay stack must pass. It
// lives apart from the constructs (cdk/oncepay), which only write the
// suppressions' metadata: a stack that copies a construct chooses its own
// checks and does not inherit cdk-nag as a dependency.
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
