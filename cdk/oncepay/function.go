package oncepay

import (
	"fmt"
	"path/filepath"
	"sort"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/internal/stackenv"
)

// Environment variables the handlers read beyond those of internal/localenv.
const (
	// EnvLedgerAppUser is the IAM-authenticated database user the handlers
	// log in as; the migration function creates it.
	EnvLedgerAppUser = "ONCEPAY_LEDGER_APP_USER"
	// EnvPushPlatformApps lists the SNS platform application ARNs
	// (comma-separated) the worker may publish to endpoints of and the
	// devices function registers endpoints under.
	EnvPushPlatformApps = stackenv.PushPlatformApps
)

// The handler-facing names, re-exported so a reader of the stack sees every
// variable a function gets in one package.
const (
	EnvIdemTable       = stackenv.IdemTable
	EnvOutboxTable     = stackenv.OutboxTable
	EnvEventsQueueURL  = stackenv.EventsQueueURL
	EnvPushTopicArn    = stackenv.PushTopicArn
	EnvLedgerDSN       = stackenv.LedgerDSN
	EnvLedgerEndpoint  = stackenv.LedgerEndpoint
	EnvLedgerSecretArn = stackenv.LedgerSecretArn
	EnvPSPURL          = stackenv.PSPURL
	EnvAlbArn          = stackenv.AlbArn
	EnvAlbKeysURL      = stackenv.AlbKeysURL
)

// AssetsContextKey names the directory that holds build/<fn>/bootstrap
// (default "build", relative to the app's working directory: the repository
// root when cdk.json runs the app). Tests point it at a folder of their own.
const AssetsContextKey = "oncepay:assets"

// CodeFromBuild is the code asset of lambdas/<name>: <assets>/<name>, where
// <assets> is the AssetsContextKey context value or "build".
func CodeFromBuild(scope constructs.Construct, name string) awslambda.Code {
	dir := "build"
	if v, ok := scope.Node().TryGetContext(jsii.String(AssetsContextKey)).(string); ok && v != "" {
		dir = v
	}
	return awslambda.Code_FromAsset(jsii.String(filepath.Join(dir, name)), nil)
}

// GoFunctionProps configures one Go Lambda function.
type GoFunctionProps struct {
	// Name is the function's lambdas/<Name> package; it picks the code
	// asset when Code is nil.
	Name string
	// Code overrides the asset build/<Name>.
	Code awslambda.Code
	// Sizing: timeout and memory (required: a default timeout is a bug
	// waiting for a slow dependency).
	Sizing Sizing
	// Environment is the function's environment.
	Environment map[string]string
	// Vpc places the function in its private subnets with egress, with a
	// security group of its own; nil keeps it outside any VPC.
	Vpc awsec2.IVpc
	// ReservedConcurrency caps concurrent executions; 0 leaves it unset.
	ReservedConcurrency int
	// DeadLetterQueue receives events of failed asynchronous invocations.
	DeadLetterQueue awssqs.IQueue
	// LogRetention of the function's log group; "" means one year.
	LogRetention awslogs.RetentionDays
	// RemovalPolicy of the log group; "" means RETAIN.
	RemovalPolicy awscdk.RemovalPolicy
	// Description of the function.
	Description string
	// Override sees the final function props before the function is made.
	Override func(*awslambda.FunctionProps)
}

// GoFunction is a provided.al2023 arm64 function running a Go bootstrap,
// with a role that holds only what is granted to it (no managed policies),
// its own log group with a retention, and X-Ray tracing.
type GoFunction struct {
	constructs.Construct
	// Name is the lambdas/<Name> package the function runs.
	Name     string
	Function awslambda.Function
	Role     awsiam.Role
	LogGroup awslogs.LogGroup
	// SecurityGroup is nil when the function is outside a VPC.
	SecurityGroup awsec2.SecurityGroup
}

// NewGoFunction creates the function, its role and its log group.
func NewGoFunction(scope constructs.Construct, id string, props *GoFunctionProps) *GoFunction {
	if props == nil || props.Name == "" {
		panic("oncepay: NewGoFunction needs props.Name")
	}
	if props.Sizing.Timeout <= 0 || props.Sizing.MemoryMB <= 0 {
		panic(fmt.Sprintf("oncepay: function %s needs a timeout and a memory size", props.Name))
	}
	c := &GoFunction{Construct: constructs.NewConstruct(scope, jsii.String(id)), Name: props.Name}
	retention := props.LogRetention
	if retention == "" {
		retention = awslogs.RetentionDays_ONE_YEAR
	}
	c.LogGroup = awslogs.NewLogGroup(c.Construct, jsii.String("Logs"), &awslogs.LogGroupProps{
		Retention:     retention,
		RemovalPolicy: Protection{RemovalPolicy: props.RemovalPolicy}.removalPolicy(),
	})
	// Our own role: the one Lambda makes by default carries the managed
	// AWSLambdaBasicExecutionRole (logs:CreateLogGroup on every group).
	c.Role = awsiam.NewRole(c.Construct, jsii.String("Role"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
		Description: jsii.String("oncepay " + props.Name + " function"),
	})
	c.Role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings("logs:CreateLogStream", "logs:PutLogEvents"),
		Resources: jsii.Strings(*c.LogGroup.LogGroupArn()),
	}))

	code := props.Code
	if code == nil {
		code = CodeFromBuild(scope, props.Name)
	}
	env := map[string]*string{}
	for k, v := range props.Environment {
		env[k] = jsii.String(v)
	}
	desc := props.Description
	if desc == "" {
		desc = "oncepay " + props.Name
	}
	fp := &awslambda.FunctionProps{
		Description:  jsii.String(desc),
		Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
		Architecture: awslambda.Architecture_ARM_64(),
		Handler:      jsii.String("bootstrap"),
		Code:         code,
		Role:         c.Role,
		LogGroup:     c.LogGroup,
		Timeout:      seconds(props.Sizing.Timeout),
		MemorySize:   jsii.Number(props.Sizing.MemoryMB),
		Tracing:      awslambda.Tracing_ACTIVE,
		Environment:  &env,
	}
	if props.Vpc != nil {
		c.SecurityGroup = awsec2.NewSecurityGroup(c.Construct, jsii.String("SecurityGroup"), &awsec2.SecurityGroupProps{
			Vpc:         props.Vpc,
			Description: jsii.String("oncepay " + props.Name + " function: outbound to the ledger, AWS APIs and the PSP"),
			// Egress to the internet: the PSP and AWS endpoints sit there.
			AllowAllOutbound: jsii.Bool(true),
		})
		fp.Vpc = props.Vpc
		fp.VpcSubnets = &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS}
		fp.SecurityGroups = &[]awsec2.ISecurityGroup{c.SecurityGroup}
		// What AWSLambdaVPCAccessExecutionRole holds, inline so the test of
		// every statement sees it. EC2 defines no resource type for the
		// Describe calls, and the ENIs Lambda manages get ids at run time.
		c.Role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Actions: jsii.Strings(
				"ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets",
				"ec2:DeleteNetworkInterface", "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses",
			),
			Resources: jsii.Strings("*"),
		}))
	}
	if props.ReservedConcurrency > 0 {
		fp.ReservedConcurrentExecutions = jsii.Number(float64(props.ReservedConcurrency))
	}
	if props.DeadLetterQueue != nil {
		fp.DeadLetterQueue = props.DeadLetterQueue
	}
	if props.Override != nil {
		props.Override(fp)
	}
	c.Function = awslambda.NewFunction(c.Construct, jsii.String("Function"), fp)
	// CDK makes a function depend on its role and the role's default policy;
	// the policy dependency matters (an event-source mapping is validated
	// against it), the role one repeats the GetAtt, which cfn-lint reports.
	cfn(c.Function).(awscdk.CfnResource).AddMetadata(jsii.String("cfn-lint"), map[string]any{
		"config": map[string]any{"ignore_checks": []string{"W3005"}},
	})
	// The role's default policy (made by the first grant above) holds
	// X-Ray's and the VPC's statements, whose actions take no resource ARN.
	suppressApplies(c.Role.Node().FindChild(jsii.String("DefaultPolicy")).Node().DefaultChild(), "AwsSolutions-IAM5",
		"Resource '*' only for actions AWS defines without a resource type: xray:PutTraceSegments/PutTelemetryRecords (active tracing), "+
			"the ec2 network-interface actions Lambda needs in a VPC (the ENI ids exist only at run time) and dynamodb:ListStreams. "+
			"Every other statement names its table, stream, queue, topic, secret, key or database user; a stack test fails on any other '*'.",
		"Resource::*")
	return c
}

// Grant adds one statement to the function's role.
func (c *GoFunction) Grant(actions []string, resources ...*string) {
	c.Role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings(actions...),
		Resources: &resources,
	}))
}

// SetEnv sets environment variables (sorted, for a stable template).
func (c *GoFunction) SetEnv(env map[string]*string) {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c.Function.AddEnvironment(jsii.String(k), env[k], nil)
	}
}

// Key grants: exact actions, never the ReEncrypt*/GenerateDataKey* wildcards
// the L2 grant helpers add.
var (
	kmsRead  = []string{"kms:Decrypt", "kms:DescribeKey"}
	kmsWrite = []string{"kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:GenerateDataKey"}
	// An SQS or SNS producer with SSE-KMS needs a data key and, to reuse
	// it, Decrypt.
	kmsProduce = []string{"kms:Decrypt", "kms:GenerateDataKey"}
)

// grantKey lets fn use key for actions.
func (c *GoFunction) grantKey(key awskms.IKey, actions []string) {
	if key != nil {
		c.Grant(actions, key.KeyArn())
	}
}
