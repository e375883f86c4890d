package oncepay

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsrds"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Ledger defaults.
const (
	LedgerDatabase = "oncepay"
	LedgerUsername = "oncepay_admin" // owner of the schema; handlers log in with IAM tokens
)

// LedgerEngineVersion is the Aurora PostgreSQL release the cluster runs.
func LedgerEngineVersion() awsrds.AuroraPostgresEngineVersion {
	return awsrds.AuroraPostgresEngineVersion_VER_17_9()
}

// LedgerProps configures the Aurora PostgreSQL Serverless v2 cluster.
type LedgerProps struct {
	Protection
	// Vpc is required; the cluster goes in its private subnets with egress.
	Vpc awsec2.IVpc
	// MinCapacity and MaxCapacity in ACUs; nil means 0.5 and 4. 0.5 keeps the
	// writer warm: a resume from 0 takes seconds a payment cannot wait.
	MinCapacity, MaxCapacity *float64
	// Readers: serverless v2 readers that scale with the writer and are its
	// failover targets.
	Readers int
	// BackupRetention; nil means 7 days.
	BackupRetention awscdk.Duration
	// Override sees the final cluster props before the cluster is created.
	Override func(*awsrds.DatabaseClusterProps)
}

// Ledger is the payments database: journal, outbox intents, inbox, credits.
// Handlers connect with IAM authentication over TLS; the generated secret
// holds the admin login, used by the migration function and operators.
type Ledger struct {
	constructs.Construct
	Cluster       awsrds.DatabaseCluster
	Secret        awsrds.DatabaseSecret
	SecurityGroup awsec2.SecurityGroup
	Key           awskms.IKey
}

// NewLedger creates the cluster, its secret and its security group.
func NewLedger(scope constructs.Construct, id string, props *LedgerProps) *Ledger {
	if props == nil || props.Vpc == nil {
		panic("oncepay: NewLedger needs props.Vpc")
	}
	c := &Ledger{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	c.Key = props.key(c.Construct)
	minACU, maxACU := props.MinCapacity, props.MaxCapacity
	if minACU == nil {
		minACU = jsii.Number(0.5)
	}
	if maxACU == nil {
		maxACU = jsii.Number(4)
	}
	backup := props.BackupRetention
	if backup == nil {
		backup = days(7)
	}

	// No ingress here: callers are let in by security group, e.g.
	// ledger.Cluster.Connections().AllowDefaultPortFrom(fn, ...).
	c.SecurityGroup = awsec2.NewSecurityGroup(c.Construct, jsii.String("SecurityGroup"), &awsec2.SecurityGroupProps{
		Vpc:              props.Vpc,
		Description:      jsii.String("oncepay ledger: PostgreSQL from the functions that hold a ledger grant"),
		AllowAllOutbound: jsii.Bool(false), // a database initiates nothing
	})
	c.Secret = awsrds.NewDatabaseSecret(c.Construct, jsii.String("Secret"), &awsrds.DatabaseSecretProps{
		Username:      jsii.String(LedgerUsername),
		Dbname:        jsii.String(LedgerDatabase),
		EncryptionKey: c.Key,
	})

	var readers []awsrds.IClusterInstance
	for i := 1; i <= props.Readers; i++ {
		readers = append(readers, awsrds.ClusterInstance_ServerlessV2(jsii.String(fmt.Sprintf("Reader%d", i)),
			&awsrds.ServerlessV2ClusterInstanceProps{ScaleWithWriter: jsii.Bool(true)}))
	}
	// Port stays 5432: the cluster has no ingress but the app's security
	// groups and every login needs an IAM token or the secret, over TLS.
	cp := &awsrds.DatabaseClusterProps{
		Engine:                  awsrds.DatabaseClusterEngine_AuroraPostgres(&awsrds.AuroraPostgresClusterEngineProps{Version: LedgerEngineVersion()}),
		Writer:                  awsrds.ClusterInstance_ServerlessV2(jsii.String("Writer"), nil),
		ServerlessV2MinCapacity: minACU,
		ServerlessV2MaxCapacity: maxACU,
		Credentials:             awsrds.Credentials_FromSecret(c.Secret, nil),
		DefaultDatabaseName:     jsii.String(LedgerDatabase),
		IamAuthentication:       jsii.Bool(true),
		StorageEncrypted:        jsii.Bool(true),
		StorageEncryptionKey:    c.Key,
		// TLS for every login, not only IAM ones (which require it anyway).
		Parameters:         &map[string]*string{"rds.force_ssl": jsii.String("1")},
		Backup:             &awsrds.BackupProps{Retention: backup},
		CopyTagsToSnapshot: jsii.Bool(true),
		DeletionProtection: jsii.Bool(props.deletionProtection()),
		RemovalPolicy:      props.removalPolicy(),
		Vpc:                props.Vpc,
		VpcSubnets:         &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS},
		SecurityGroups:     &[]awsec2.ISecurityGroup{c.SecurityGroup},
	}
	if len(readers) > 0 {
		cp.Readers = &readers
	}
	if props.Override != nil {
		props.Override(cp)
	}
	c.Cluster = awsrds.NewDatabaseCluster(c.Construct, jsii.String("Cluster"), cp)
	// The secret, security group and parameter group follow a retained
	// cluster: without its password or parameters it is a recovery job, and
	// deleting them while the cluster uses them fails anyway.
	support := awscdk.RemovalPolicy_DESTROY
	if cp.RemovalPolicy == awscdk.RemovalPolicy_RETAIN {
		support = awscdk.RemovalPolicy_RETAIN
	}
	awscdk.RemovalPolicies_Of(c.Construct).Apply(support, &awscdk.RemovalPolicyProps{
		ApplyToResourceTypes: jsii.Strings(
			"AWS::SecretsManager::Secret", "AWS::SecretsManager::SecretTargetAttachment",
			"AWS::EC2::SecurityGroup", "AWS::RDS::DBClusterParameterGroup", "AWS::RDS::DBSubnetGroup",
		),
	})

	if cp.DeletionProtection == nil || !*cp.DeletionProtection {
		suppress(cfn(c.Cluster), "AwsSolutions-RDS10",
			"Deletion protection is off only when the deployer asks (the sandbox profile, whose stack is removed with cdk destroy); the prod profile and this construct's default turn it on.")
	}
	suppress(cfn(c.Secret), "AwsSolutions-SMG4",
		"The admin secret is not on the payment path: handlers authenticate with short-lived IAM tokens. It is used by the migration function and operators; rotation (Ledger.Cluster.AddRotationSingleUser) needs a SAR-hosted Lambda and is left to the deployer.")
	return c
}
