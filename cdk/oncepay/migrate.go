package oncepay

import (
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// LedgerMigrationProps configures the deploy-time migration.
type LedgerMigrationProps struct {
	// Ledger to migrate (required).
	Ledger *Ledger
	// AppUser is the IAM-authenticated role the migration creates and grants
	// the application's privileges to; "" means LedgerAppUser.
	AppUser string
	// DeadLetterQueue receives the event of an invocation that crashed
	// (CloudFormation invokes the function asynchronously).
	DeadLetterQueue awssqs.IQueue
	LogRetention    awslogs.RetentionDays
	RemovalPolicy   awscdk.RemovalPolicy
	// Code of the migrate function (required): the bootstrap of lambdas/migrate.
	Code awslambda.Code
}

// LedgerMigration runs lambdas/migrate as a CloudFormation custom resource on
// every create and on every update of the function (a new binary means new
// migrations, embedded in it): it applies internal/ledger/migrations as the
// admin and ensures the application role (GRANT rds_iam). Delete leaves the
// schema alone: the data outlives the resource.
type LedgerMigration struct {
	constructs.Construct
	Function *GoFunction
	Resource awscdk.CustomResource
}

// MigrationResourceType is the custom resource's type in the template.
const MigrationResourceType = "Custom::LedgerMigrations"

// NewLedgerMigration creates the function and the custom resource.
func NewLedgerMigration(scope constructs.Construct, id string, props *LedgerMigrationProps) *LedgerMigration {
	if props == nil || props.Ledger == nil {
		panic("oncepay: NewLedgerMigration needs props.Ledger")
	}
	user := props.AppUser
	if user == "" {
		user = LedgerAppUser
	}
	c := &LedgerMigration{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	l := props.Ledger
	c.Function = NewGoFunction(c.Construct, "Function", &GoFunctionProps{
		Name:            FnMigrate,
		Code:            props.Code,
		Sizing:          SizingsFor(timingOrDefault(nil)).Migrate,
		Environment:     map[string]string{EnvLedgerAppUser: user},
		Vpc:             l.Cluster.Vpc(),
		DeadLetterQueue: props.DeadLetterQueue,
		LogRetention:    props.LogRetention,
		RemovalPolicy:   props.RemovalPolicy,
		Description:     "oncepay migrate: applies the ledger schema at deploy time (CloudFormation custom resource)",
		Override: func(fp *awslambda.FunctionProps) {
			// The admin password is read from Secrets Manager at run time
			// (ConnectAdmin grants it), never put in the environment; no
			// layer, so nothing depends on a per-Region layer ARN.
			fp.CurrentVersionOptions = &awslambda.VersionOptions{RemovalPolicy: awscdk.RemovalPolicy_DESTROY}
		},
	})
	l.ConnectAdmin(c.Function)
	if props.DeadLetterQueue == nil {
		suppress(cfn(c.Function.Function), "Serverless-LambdaDLQ",
			"No DLQ was given: CloudFormation, the only caller, reports a crashed or timed-out run as a failed deploy, with the function's log group named in the stack events.")
	}

	c.Resource = awscdk.NewCustomResource(c.Construct, jsii.String("Schema"), &awscdk.CustomResourceProps{
		ServiceToken: c.Function.Function.FunctionArn(),
		ResourceType: jsii.String(MigrationResourceType),
		// Version changes with the code (and the configuration): each new
		// binary is an Update, so its migrations run.
		Properties: &map[string]interface{}{
			"AppUser":  user,
			"Database": LedgerDatabase,
			"Version":  c.Function.Function.CurrentVersion().Version(),
		},
		ServiceTimeout: awscdk.Duration_Seconds(jsii.Number((SizingsFor(timingOrDefault(nil)).Migrate.Timeout + time.Minute).Seconds())),
	})
	// The writer must be up, the admin secret attached and the port open.
	c.Resource.Node().AddDependency(l.Cluster, l.Secret, l.SecurityGroup)
	return c
}
