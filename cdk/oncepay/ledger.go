package oncepay

import (
	"fmt"
	"math"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsrds"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Ledger defaults.
const (
	LedgerDatabase = "oncepay"
	LedgerUsername = "oncepay_admin" // owner of the schema; handlers log in with IAM tokens
	// LedgerAppUser is the database user the handlers log in as with IAM
	// tokens (GRANT rds_iam); the migration function creates it.
	LedgerAppUser = "oncepay_app"
	// LedgerPort is PostgreSQL's.
	LedgerPort = 5432
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
	// Proxy puts an RDS Proxy with end-to-end IAM authentication in front
	// of the writer: connection pooling for bursts of Lambda instances and
	// faster failover. The handlers then connect to the proxy.
	Proxy bool
	// ConnectionsAlarm is the connection count that alarms; 0 means 80% of
	// LedgerMaxConnections(MaxCapacity), an estimate (check it against
	// `SHOW max_connections` once deployed).
	ConnectionsAlarm float64
	// Override sees the final cluster props before the cluster is created.
	Override func(*awsrds.DatabaseClusterProps)
	// Global joins the cluster to an Aurora global database; nil is a
	// cluster of its own.
	Global *LedgerGlobal
}

// LedgerGlobal places the ledger in an Aurora global database
// (docs/regions.md): one writer in the primary Region, a read-only
// secondary in each other, promoted by a failover.
type LedgerGlobal struct {
	// Identifier of the AWS::RDS::GlobalCluster, the same in every
	// Region's stack.
	Identifier string
	// Primary makes the global cluster here, from this cluster. Otherwise
	// the cluster is a secondary of the global cluster, which must exist
	// (deploy the primary's stack first): it has no admin login of its own
	// (the primary's users and schema replicate), so no secret, and its
	// storage is encrypted with this Region's key.
	Primary bool
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
	// Proxy, its role and security group are nil unless props.Proxy.
	Proxy              awsrds.DatabaseProxy
	ProxyRole          awsiam.Role
	ProxySecurityGroup awsec2.SecurityGroup
	// GlobalCluster is the global database, made in the primary's stack;
	// nil elsewhere. Secret is nil in a secondary.
	GlobalCluster awsrds.CfnGlobalCluster
	// MaxCapacity is the cluster's maximum ACUs, as deployed (after
	// Override): the connections alarm is sized from it.
	MaxCapacity float64
	// ConnectionsAlarm is LedgerProps.ConnectionsAlarm, as given.
	ConnectionsAlarm float64
}

// connectionsAlarm is the threshold of the connections alarm.
func (c *Ledger) connectionsAlarm() float64 {
	if c.ConnectionsAlarm > 0 {
		return c.ConnectionsAlarm
	}
	return math.Floor(LedgerConnectionsAlarmFraction * LedgerMaxConnections(c.MaxCapacity))
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
	secondary := props.Global != nil && !props.Global.Primary
	credentials, dbName := awsrds.Credentials(nil), jsii.String(LedgerDatabase)
	if secondary {
		// CDK makes a secret unless given a password: the placeholder is
		// removed from the template in joinGlobal, and no database is
		// named (the primary's replicate).
		credentials, dbName = awsrds.Credentials_FromPassword(jsii.String(LedgerUsername), awscdk.SecretValue_UnsafePlainText(jsii.String("none: a secondary has no login of its own"))), nil
	} else {
		c.Secret = awsrds.NewDatabaseSecret(c.Construct, jsii.String("Secret"), &awsrds.DatabaseSecretProps{
			Username:      jsii.String(LedgerUsername),
			Dbname:        jsii.String(LedgerDatabase),
			EncryptionKey: c.Key,
		})
		credentials = awsrds.Credentials_FromSecret(c.Secret, nil)
	}

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
		Credentials:             credentials,
		DefaultDatabaseName:     dbName,
		IamAuthentication:       jsii.Bool(true),
		StorageEncrypted:        jsii.Bool(true),
		StorageEncryptionKey:    c.Key,
		// TLS for every login, not only IAM ones (which require it anyway);
		// DDL in the exported log beside the failed logins PostgreSQL logs
		// anyway (FATAL), so a schema change outside a migration is seen.
		// DDL includes ALTER ROLE: a password set in plain text lands in
		// the log, so passwords are set only as SCRAM verifiers (psql's
		// \password), never by Secrets Manager's rotation (docs/deploy.md).
		Parameters:            &map[string]*string{"rds.force_ssl": jsii.String("1"), "log_statement": jsii.String("ddl")},
		CloudwatchLogsExports: jsii.Strings("postgresql"),
		Backup:                &awsrds.BackupProps{Retention: backup},
		CopyTagsToSnapshot:    jsii.Bool(true),
		DeletionProtection:    jsii.Bool(props.deletionProtection()),
		RemovalPolicy:         props.removalPolicy(),
		Vpc:                   props.Vpc,
		VpcSubnets:            &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS},
		SecurityGroups:        &[]awsec2.ISecurityGroup{c.SecurityGroup},
	}
	if len(readers) > 0 {
		cp.Readers = &readers
	}
	if props.Override != nil {
		props.Override(cp)
	}
	// RDS creates /aws/rds/cluster/<id>/postgresql itself, never expiring
	// (docs/deploy.md: set its retention per profile with
	// put-retention-policy). Making the group here before the cluster
	// would need a fixed cluster identifier, and prod retains both: a
	// redeploy after a destroy, or any replacement, would then fail on the
	// names. Making it after the cluster (named from its Ref) races RDS,
	// and fails on every stack whose RDS-made group exists already. CDK's
	// own retention option adds a Node.js custom-resource function with a
	// managed policy and logs:PutRetentionPolicy on "*", which the local
	// cloud cannot run and the stack's IAM checks refuse.
	c.MaxCapacity, c.ConnectionsAlarm = *cp.ServerlessV2MaxCapacity, props.ConnectionsAlarm
	c.Cluster = awsrds.NewDatabaseCluster(c.Construct, jsii.String("Cluster"), cp)
	if props.Global != nil {
		c.joinGlobal(props, cp)
	}
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
	if props.Proxy {
		c.addProxy(props)
	}
	if c.Secret != nil {
		suppress(cfn(c.Secret), "AwsSolutions-SMG4",
			"The admin secret is not on the payment path: handlers authenticate with short-lived IAM tokens. It is used by the migration function and operators. "+
				"Secrets Manager's PostgreSQL rotation is not turned on: it sets the new password with ALTER USER ... WITH PASSWORD in plain text, which the cluster's log_statement=ddl writes to the exported log; "+
				"an operator changes it as a SCRAM verifier and puts the password in the secret (docs/deploy.md).")
	}
	return c
}

// joinGlobal makes the global cluster from this one (primary), or makes
// this one a secondary of it.
func (c *Ledger) joinGlobal(props *LedgerProps, cp *awsrds.DatabaseClusterProps) {
	g := props.Global
	if g.Identifier == "" {
		panic("oncepay: NewLedger: LedgerProps.Global needs the global cluster's Identifier")
	}
	if g.Primary {
		// Engine, version, encryption and database come from the source
		// cluster (CloudFormation refuses them beside it).
		c.GlobalCluster = awsrds.NewCfnGlobalCluster(c.Construct, jsii.String("GlobalCluster"), &awsrds.CfnGlobalClusterProps{
			GlobalClusterIdentifier:   jsii.String(g.Identifier),
			SourceDbClusterIdentifier: c.Cluster.ClusterArn(),
			DeletionProtection:        jsii.Bool(props.deletionProtection()),
		})
		c.GlobalCluster.ApplyRemovalPolicy(cp.RemovalPolicy, nil)
		return
	}
	l1 := cfn(c.Cluster).(awsrds.CfnDBCluster)
	l1.SetGlobalClusterIdentifier(jsii.String(g.Identifier))
	// A secondary takes the primary's master user, password and database:
	// RDS refuses them on a cluster that joins a global database.
	l1.AddPropertyDeletionOverride(jsii.String("MasterUsername"))
	l1.AddPropertyDeletionOverride(jsii.String("MasterUserPassword"))
}

// addProxy creates the proxy: IAM from the client to the proxy and from the
// proxy to the database (DefaultAuthScheme IAM_AUTH), so no password exists
// for the application user anywhere.
func (c *Ledger) addProxy(props *LedgerProps) {
	c.ProxySecurityGroup = awsec2.NewSecurityGroup(c.Construct, jsii.String("ProxySecurityGroup"), &awsec2.SecurityGroupProps{
		Vpc:              props.Vpc,
		Description:      jsii.String("oncepay ledger proxy: PostgreSQL from the functions, to the cluster"),
		AllowAllOutbound: jsii.Bool(false),
	})
	c.ProxyRole = awsiam.NewRole(c.Construct, jsii.String("ProxyRole"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("rds.amazonaws.com"), nil),
		Description: jsii.String("oncepay ledger proxy: IAM login to the cluster as the application user"),
	})
	c.Cluster.GrantConnect(c.ProxyRole, jsii.String(LedgerAppUser))
	c.Proxy = awsrds.NewDatabaseProxy(c.Construct, jsii.String("Proxy"), &awsrds.DatabaseProxyProps{
		// A physical name unique to this construct's path: CDK's default is
		// the id, "Proxy", so a second stack in the account collides and a
		// replacement fails on its own name.
		DbProxyName:       awscdk.Names_UniqueResourceName(c.Construct, &awscdk.UniqueResourceNameOptions{MaxLength: jsii.Number(60)}),
		ProxyTarget:       awsrds.ProxyTarget_FromCluster(c.Cluster),
		Vpc:               props.Vpc,
		VpcSubnets:        &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS},
		SecurityGroups:    &[]awsec2.ISecurityGroup{c.ProxySecurityGroup},
		Role:              c.ProxyRole,
		DefaultAuthScheme: awsrds.DefaultAuthScheme_IAM_AUTH,
		RequireTLS:        jsii.Bool(true),
		// A payment waits at most the deadline for a connection.
		BorrowTimeout: seconds(5 * time.Second),
	})
	c.Cluster.Connections().AllowDefaultPortFrom(c.ProxySecurityGroup, jsii.String("from the ledger proxy"))
	// CDK makes the target group depend on the cluster it already names.
	c.Proxy.Node().FindChild(jsii.String("ProxyTargetGroup")).(awscdk.CfnResource).AddMetadata(jsii.String("cfn-lint"),
		map[string]any{"config": map[string]any{"ignore_checks": []string{"W3005"}}})
}

// Endpoint is the host handlers connect to: the proxy's, else the writer's.
func (c *Ledger) Endpoint() *string {
	if c.Proxy != nil {
		return c.Proxy.Endpoint()
	}
	return c.Cluster.ClusterEndpoint().Hostname()
}

// DSN is the connection string of user on Endpoint: no password (the
// handler signs an IAM token for it), TLS required.
func (c *Ledger) DSN(user string) *string {
	return awscdk.Fn_Join(jsii.String(""), jsii.Strings(
		"postgres://"+user+"@", *c.Endpoint(), ":", *c.EndpointPort(), fmt.Sprintf("/%s?sslmode=require", LedgerDatabase)))
}

// EndpointPort is Endpoint's port: the proxy listens on the engine's port,
// the writer on the cluster's (its Endpoint.Port attribute), so a runtime
// that maps the cluster elsewhere (the local cloud's PostgreSQL) resolves
// the port the same way CloudFormation does instead of a hardcoded 5432.
func (c *Ledger) EndpointPort() *string {
	if c.Proxy != nil {
		return jsii.String(fmt.Sprint(LedgerPort))
	}
	return awscdk.Token_AsString(c.Cluster.ClusterEndpoint().Port(), nil)
}

// Connect lets fn (a function in the ledger's VPC) log in as user with an
// IAM token: rds-db:connect on that one database user, and PostgreSQL's
// port open from fn's security group to the proxy or the cluster. It sets
// ONCEPAY_LEDGER_DSN, ONCEPAY_LEDGER_ENDPOINT and ONCEPAY_LEDGER_APP_USER.
// "" is LedgerAppUser, the constructs' LedgerUser default.
func (c *Ledger) Connect(fn *GoFunction, user string) {
	if user == "" {
		user = LedgerAppUser
	}
	to := c.SecurityGroup
	if c.Proxy != nil {
		c.Proxy.GrantConnect(fn.Role, jsii.String(user))
		to = c.ProxySecurityGroup
	} else {
		c.Cluster.GrantConnect(fn.Role, jsii.String(user))
	}
	// From every security group the function ended up with: its own, or
	// the ones the props or the override named.
	for _, sg := range fn.securityGroups("Ledger.Connect") {
		to.AddIngressRule(sg, awsec2.Port_Tcp(jsii.Number(LedgerPort)),
			jsii.String("PostgreSQL from the "+fn.Name+" function"), nil)
	}
	fn.SetEnv(map[string]*string{
		EnvLedgerDSN:      c.DSN(user),
		EnvLedgerEndpoint: c.Endpoint(),
		EnvLedgerAppUser:  jsii.String(user),
	})
}

// ConnectAdmin lets fn (the migration function) log in to the writer as the
// admin with the secret's password: GetSecretValue on that one secret and
// the port open to the cluster itself (never through the IAM-only proxy).
func (c *Ledger) ConnectAdmin(fn *GoFunction) {
	if c.Secret == nil {
		panic(fmt.Sprintf("oncepay: Ledger.ConnectAdmin(%s): the ledger is a secondary of a global database, with no admin login: connect to the primary's", fn.Name))
	}
	for _, sg := range fn.securityGroups("Ledger.ConnectAdmin") {
		c.SecurityGroup.AddIngressRule(sg, awsec2.Port_Tcp(jsii.Number(LedgerPort)),
			jsii.String("PostgreSQL from the "+fn.Name+" function"), nil)
	}
	fn.Grant([]string{"secretsmanager:GetSecretValue"}, c.Secret.SecretArn())
	fn.grantKey(c.Key, []string{"kms:Decrypt"})
	fn.SetEnv(map[string]*string{
		EnvLedgerSecretArn:        c.Secret.SecretArn(),
		EnvLedgerEndpoint:         c.Cluster.ClusterEndpoint().Hostname(),
		EnvSecretsManagerEndpoint: SecretsManagerEndpoint(),
	})
}
