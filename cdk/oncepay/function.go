package oncepay

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
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
	EnvHomesTable      = stackenv.HomesTable
	EnvClaimsSweep     = stackenv.ClaimsSweep
	EnvAdoptLost       = stackenv.AdoptLost
	EnvStandbyCheck    = stackenv.StandbyCheck
	EnvHomeDefault     = stackenv.HomeDefault
	EnvRegionURLs      = stackenv.RegionURLs
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
	// Name is the function's lambdas/<Name> package (its description and
	// the stack's names).
	Name string
	// Code is the function's bootstrap (required): for example
	// awslambda.Code_FromAsset(jsii.String("build/worker"), nil), a
	// directory holding a linux/arm64 `bootstrap`. The oncepay app passes
	// CodeFromBuild.
	Code awslambda.Code
	// Sizing: timeout and memory (required: a default timeout is a bug
	// waiting for a slow dependency).
	Sizing Sizing
	// Environment is the function's environment.
	Environment map[string]string
	// Role the function runs as; nil creates one holding only what is
	// granted to it. A role made elsewhere must accept statements
	// (awsiam.Role_FromRoleArn with Mutable true, the default): the
	// constructs attach their grants to it as a policy of their own.
	Role awsiam.IRole
	// Vpc places the function in its private subnets with egress (or
	// VpcSubnets), with a security group of its own (or SecurityGroups);
	// nil keeps it outside any VPC.
	Vpc            awsec2.IVpc
	VpcSubnets     *awsec2.SubnetSelection
	SecurityGroups []awsec2.ISecurityGroup
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
	// Whatever role, VPC and timeout it leaves are what the grants, the
	// network-interface permissions and the safety checks apply to.
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
	// Role is the role the function ended up with (made here, given, or
	// set by the override); every grant lands on it.
	Role     awsiam.IRole
	LogGroup awslogs.LogGroup
	// SecurityGroup is the one made here; nil outside a VPC or when the
	// props named security groups.
	SecurityGroup awsec2.SecurityGroup
	// Timeout is the function's real timeout, after the override.
	Timeout time.Duration
}

// NewGoFunction creates the function, its role (unless given) and its log
// group.
func NewGoFunction(scope constructs.Construct, id string, props *GoFunctionProps) *GoFunction {
	if props == nil || props.Name == "" {
		panic("oncepay: NewGoFunction needs props.Name")
	}
	if props.Sizing.Timeout <= 0 || props.Sizing.MemoryMB <= 0 {
		panic(fmt.Sprintf("oncepay: function %s needs a timeout and a memory size", props.Name))
	}
	if props.Code == nil {
		panic(fmt.Sprintf("oncepay: function %s needs Code, its bootstrap: e.g. awslambda.Code_FromAsset(jsii.String(\"path/to/dir-with-bootstrap\"), nil) (the oncepay app passes oncepay.CodeFromBuild)", props.Name))
	}
	if props.Vpc == nil && (props.VpcSubnets != nil || len(props.SecurityGroups) > 0) {
		panic(fmt.Sprintf("oncepay: function %s: VpcSubnets and SecurityGroups need Vpc", props.Name))
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
		Code:         props.Code,
		Role:         props.Role,
		LogGroup:     c.LogGroup,
		Timeout:      seconds(props.Sizing.Timeout),
		MemorySize:   jsii.Number(props.Sizing.MemoryMB),
		Tracing:      awslambda.Tracing_ACTIVE,
		Environment:  &env,
	}
	if props.Vpc != nil {
		fp.Vpc = props.Vpc
		fp.VpcSubnets = props.VpcSubnets
		if fp.VpcSubnets == nil {
			fp.VpcSubnets = &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS}
		}
		if len(props.SecurityGroups) > 0 {
			sgs := props.SecurityGroups
			fp.SecurityGroups = &sgs
		}
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
	if fp.Code == nil {
		panic(fmt.Sprintf("oncepay: function %s: the override left no Code", props.Name))
	}
	if fp.Timeout == nil {
		panic(fmt.Sprintf("oncepay: function %s: the override left no Timeout", props.Name))
	}
	secs := fp.Timeout.ToSeconds(nil)
	if *awscdk.Token_IsUnresolved(secs) {
		panic(fmt.Sprintf("oncepay: function %s: its timeout is a token (a parameter?): the safety checks need a number", props.Name))
	}
	c.Timeout = time.Duration(*secs) * time.Second
	// Our own role, made only when neither the props nor the override gave
	// one: the one Lambda makes by default carries the managed
	// AWSLambdaBasicExecutionRole (logs:CreateLogGroup on every group).
	if fp.Role == nil {
		fp.Role = awsiam.NewRole(c.Construct, jsii.String("Role"), &awsiam.RoleProps{
			AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
			Description: jsii.String("oncepay " + props.Name + " function"),
		})
	}
	c.Role = fp.Role
	// A role of another stack (made or imported there) makes CDK put the
	// grants' policy in that stack, which then refers to this one's
	// resources: a DependencyCycle at synth, whose message names neither.
	if theirs, ours := awscdk.Stack_Of(c.Role).Node().Path(), awscdk.Stack_Of(c.Construct).Node().Path(); *theirs != *ours {
		panic(fmt.Sprintf("oncepay: function %s: its role is in stack %s, the function in %s: import the role into %s (awsiam.Role_FromRoleArn there), or CDK puts the grants' policy in %s and the two stacks refer to each other",
			props.Name, *theirs, *ours, *ours, *theirs))
	}
	if fp.Vpc != nil && (fp.SecurityGroups == nil || len(*fp.SecurityGroups) == 0) {
		c.SecurityGroup = awsec2.NewSecurityGroup(c.Construct, jsii.String("SecurityGroup"), &awsec2.SecurityGroupProps{
			Vpc:         fp.Vpc,
			Description: jsii.String("oncepay " + props.Name + " function: outbound to the ledger, AWS APIs and the PSP"),
			// Egress to the internet: the PSP and AWS endpoints sit there.
			AllowAllOutbound: jsii.Bool(true),
		})
		fp.SecurityGroups = &[]awsec2.ISecurityGroup{c.SecurityGroup}
		if fp.VpcSubnets == nil {
			fp.VpcSubnets = &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS}
		}
	}
	// Lambda checks the role at CreateFunction: the statements a function
	// needs to start (logs; the network interfaces in a VPC) go on before
	// it is made, and it depends on them below.
	c.Grant([]string{"logs:CreateLogStream", "logs:PutLogEvents"}, c.LogGroup.LogGroupArn())
	if c.policy() == nil {
		// An immutable role (Role_FromRoleArn with Mutable false) answers
		// "added" and keeps nothing: the function would deploy without
		// its permissions and fail at run time.
		panic(fmt.Sprintf("oncepay: function %s: its role %s does not take the statements the construct grants (imported with Mutable false?): import it mutable (awsiam.Role_FromRoleArn's default), or have its owner grant them and pass a role that takes them (docs/constructs.md#roles)",
			props.Name, *c.Role.Node().Path()))
	}
	if fp.Vpc != nil {
		// What AWSLambdaVPCAccessExecutionRole holds, inline so the test of
		// every statement sees it. EC2 defines no resource type for the
		// Describe calls, and the ENIs Lambda manages get ids at run time.
		c.Grant([]string{
			"ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets",
			"ec2:DeleteNetworkInterface", "ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses",
		}, jsii.String("*"))
	}
	c.Function = awslambda.NewFunction(c.Construct, jsii.String("Function"), fp)
	if p := c.policy(); p != nil {
		if _, made := c.Role.(awsiam.Role); !made {
			// Stated, not left to CDK's dependency on the role's subtree:
			// Lambda checks the role's permissions at CreateFunction.
			c.Function.Node().AddDependency(p)
		}
	}
	// CDK makes a function depend on its role and the role's default policy;
	// the policy dependency matters (an event-source mapping is validated
	// against it), the role one repeats the GetAtt, which cfn-lint reports.
	cfn(c.Function).(awscdk.CfnResource).AddMetadata(jsii.String("cfn-lint"), map[string]any{
		"config": map[string]any{"ignore_checks": []string{"W3005"}},
	})
	// The role's policy holds X-Ray's and the VPC's statements, whose
	// actions take no resource ARN.
	if p := c.policy(); p != nil {
		suppressApplies(p.Node().DefaultChild(), "AwsSolutions-IAM5",
			"Resource '*' only for actions AWS defines without a resource type: xray:PutTraceSegments/PutTelemetryRecords (active tracing), "+
				"the ec2 network-interface actions Lambda needs in a VPC (the ENI ids exist only at run time) and dynamodb:ListStreams. "+
				"Every other statement names its table, stream, queue, topic, secret, key or database user; a stack test fails on any other '*'.",
			"Resource::*")
	}
	return c
}

// securityGroups are the function's security groups; none means it is not
// in a VPC, which what needs one refuses.
func (c *GoFunction) securityGroups(what string) []awsec2.ISecurityGroup {
	sgs := c.Function.Connections().SecurityGroups()
	if sgs == nil || len(*sgs) == 0 {
		panic(fmt.Sprintf("oncepay: %s needs the %s function in the ledger's VPC (it has no security group)", what, c.Name))
	}
	return *sgs
}

// policy is the policy the grants went into: a made role's DefaultPolicy,
// or the Policy CDK attaches to a role made elsewhere.
func (c *GoFunction) policy() constructs.IConstruct {
	for _, id := range []string{"DefaultPolicy", "Policy"} {
		if p := c.Role.Node().TryFindChild(jsii.String(id)); p != nil {
			return p
		}
	}
	return nil
}

// Grant adds one statement to the function's role. A role that refuses it
// (imported with Mutable false) fails the synth, naming the actions: the
// function would otherwise deploy and fail at run time.
func (c *GoFunction) Grant(actions []string, resources ...*string) {
	r := c.Role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:   jsii.Strings(actions...),
		Resources: &resources,
	}))
	if r == nil || r.StatementAdded == nil || !*r.StatementAdded {
		panic(fmt.Sprintf("oncepay: function %s: its role %s does not take the statement %v: import the role with Mutable true (awsiam.Role_FromRoleArn's default), or have its owner grant it and everything else the construct grants (docs/constructs.md#roles)",
			c.Name, *c.Role.Node().Path(), actions))
	}
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

// grantKey lets fn use key for actions. IAM matches a key policy
// statement by key ARN, never by alias ARN: an alias made in this app is
// granted on its target key, and one made elsewhere is refused (its key
// cannot be known at synth).
func (c *GoFunction) grantKey(key awskms.IKey, actions []string) {
	if key == nil {
		return
	}
	if alias, ok := key.(awskms.IAlias); ok {
		if !inApp(alias) {
			panic(fmt.Sprintf("oncepay: function %s: a key given as an alias made elsewhere (%s) cannot be granted: IAM matches kms actions by key ARN; give the key (awskms.Key_FromKeyArn) instead", c.Name, *alias.AliasName()))
		}
		key = alias.AliasTargetKey()
	}
	if arn := key.KeyArn(); !*awscdk.Token_IsUnresolved(arn) && strings.Contains(*arn, ":alias/") {
		panic(fmt.Sprintf("oncepay: function %s: the key %s is an alias ARN, which IAM never matches for kms actions: give the key's ARN (arn:…:key/<id>)", c.Name, *arn))
	}
	// Only through the services that hold data under our keys: the role's
	// own credentials cannot decrypt a copied ciphertext with the KMS API.
	st := awscdk.Stack_Of(c.Function)
	var via []*string
	for _, svc := range keyServices {
		via = append(via, awscdk.Fn_Join(jsii.String(""), &[]*string{jsii.String(svc + "."), st.Region(), jsii.String("."), st.UrlSuffix()}))
	}
	r := c.Role.AddToPrincipalPolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Actions:    jsii.Strings(actions...),
		Resources:  &[]*string{key.KeyArn()},
		Conditions: &map[string]interface{}{"StringEquals": map[string]interface{}{"kms:ViaService": via}},
	}))
	if r == nil || r.StatementAdded == nil || !*r.StatementAdded {
		panic(fmt.Sprintf("oncepay: function %s: its role %s does not take the key grant: import the role with Mutable true (awsiam.Role_FromRoleArn's default), or have its owner grant it (docs/constructs.md#roles)",
			c.Name, *c.Role.Node().Path()))
	}
}

// keyServices use a function's key grants on its behalf (kms:ViaService):
// the tables, the queues, the topics, the secrets. A stream's reads are
// documented under the table's service; its own name is listed too, so
// neither reading breaks the relay.
var keyServices = []string{"dynamodb", "streams.dynamodb", "sqs", "sns", "secretsmanager"}
