package oncepay

import (
	"fmt"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awselasticache"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
)

// CachePort is the dedup cache's port: not Valkey's default 6379, so a
// scan for open caches does not find it by its port alone.
const CachePort = 6380

// DedupCacheProps configures the dedup cache.
type DedupCacheProps struct {
	Protection
	// Vpc holds the cache in its private subnets (required).
	Vpc awsec2.IVpc
	// HighlyAvailable adds a replica in another zone with automatic
	// failover (the prod profile's choice); a sandbox runs one node.
	HighlyAvailable bool
	// NodeType of the cache nodes; "" is cache.t4g.micro.
	NodeType string
}

// DedupCache is ElastiCache for Valkey for the logical-duplicate gate
// (package dedup): in the VPC's private subnets, encrypted at rest with the
// customer key and in transit, with eviction off, since an evicted key
// turns into a silent duplicate: a full cache refuses writes instead (and
// the gate fails open), and an alarm watches its memory.
type DedupCache struct {
	constructs.Construct
	ReplicationGroup awselasticache.CfnReplicationGroup
	SecurityGroup    awsec2.SecurityGroup
	ParameterGroup   awselasticache.CfnParameterGroup
	// Nodes is the number of cache nodes (<group>-001, -002, ...).
	Nodes int
}

// MemoryMetric is the fullest node's DatabaseMemoryUsagePercentage over
// period: ElastiCache reports it per node, and which node is the primary
// changes with a failover.
func (c *DedupCache) MemoryMetric(period awscdk.Duration) awscloudwatch.IMetric {
	node := func(i int) awscloudwatch.IMetric {
		return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
			Namespace: jsii.String("AWS/ElastiCache"), MetricName: jsii.String("DatabaseMemoryUsagePercentage"),
			DimensionsMap: &map[string]*string{"CacheClusterId": awscdk.Fn_Join(jsii.String(""), jsii.Strings(*c.ReplicationGroup.Ref(), fmt.Sprintf("-%03d", i)))},
			Statistic:     jsii.String("Maximum"), Period: period,
		})
	}
	if c.Nodes == 1 {
		return node(1)
	}
	using := map[string]awscloudwatch.IMetric{}
	var ids []string
	for i := 1; i <= c.Nodes; i++ {
		id := fmt.Sprintf("node%d", i)
		using[id] = node(i)
		ids = append(ids, id)
	}
	return awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
		Expression: jsii.String("MAX([" + strings.Join(ids, ",") + "])"), UsingMetrics: &using, Period: period,
		Label: jsii.String("the fullest node's memory (%)"),
	})
}

// NewDedupCache creates the cache.
func NewDedupCache(scope constructs.Construct, id string, props *DedupCacheProps) *DedupCache {
	if props == nil || props.Vpc == nil {
		panic("oncepay: NewDedupCache needs DedupCacheProps.Vpc")
	}
	c := &DedupCache{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	var subnets []interface{}
	for _, s := range *props.Vpc.SelectSubnets(&awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS}).Subnets {
		subnets = append(subnets, s.SubnetId())
	}
	group := awselasticache.NewCfnSubnetGroup(c.Construct, jsii.String("Subnets"), &awselasticache.CfnSubnetGroupProps{
		Description: jsii.String("oncepay dedup cache: private subnets"),
		SubnetIds:   &subnets,
	})
	c.SecurityGroup = awsec2.NewSecurityGroup(c.Construct, jsii.String("SecurityGroup"), &awsec2.SecurityGroupProps{
		Vpc:              props.Vpc,
		Description:      jsii.String("oncepay dedup cache: open to the worker only"),
		AllowAllOutbound: jsii.Bool(false), // a cache initiates nothing
	})
	c.ParameterGroup = awselasticache.NewCfnParameterGroup(c.Construct, jsii.String("Parameters"), &awselasticache.CfnParameterGroupProps{
		CacheParameterGroupFamily: jsii.String("valkey8"),
		Description:               jsii.String("oncepay dedup cache: eviction off (an evicted key is a silent duplicate)"),
		Properties:                &map[string]*string{"maxmemory-policy": jsii.String("noeviction")},
	})
	c.Nodes = 1
	failover := false
	if props.HighlyAvailable {
		c.Nodes, failover = 2, true
	}
	nodeType := props.NodeType
	if nodeType == "" {
		nodeType = "cache.t4g.micro"
	}
	c.ReplicationGroup = awselasticache.NewCfnReplicationGroup(c.Construct, jsii.String("ReplicationGroup"), &awselasticache.CfnReplicationGroupProps{
		ReplicationGroupDescription: jsii.String("oncepay dedup cache (logical duplicates of a message)"),
		Engine:                      jsii.String("valkey"),
		EngineVersion:               jsii.String("8.0"),
		CacheNodeType:               jsii.String(nodeType),
		NumCacheClusters:            jsii.Number(c.Nodes),
		AutomaticFailoverEnabled:    jsii.Bool(failover),
		MultiAzEnabled:              jsii.Bool(failover),
		Port:                        jsii.Number(CachePort),
		CacheSubnetGroupName:        group.Ref(),
		SecurityGroupIds:            jsii.Strings(*c.SecurityGroup.SecurityGroupId()),
		CacheParameterGroupName:     c.ParameterGroup.Ref(),
		AtRestEncryptionEnabled:     jsii.Bool(true),
		KmsKeyId:                    props.key(c.Construct).KeyArn(),
		TransitEncryptionEnabled:    jsii.Bool(true),
		TransitEncryptionMode:       jsii.String("required"),
		SnapshotRetentionLimit:      jsii.Number(0), // fingerprints for a day: nothing worth a snapshot
	})
	c.ReplicationGroup.ApplyRemovalPolicy(props.removalPolicy(), nil)
	if !failover {
		suppress(c.ReplicationGroup, "AwsSolutions-AEC4",
			"A sandbox runs one node: the cache only drops logical duplicates, and when it is down the gate fails open (a duplicate reminder, counted), so a second zone buys nothing a sandbox needs; the prod profile runs two with automatic failover.")
	}
	suppress(c.ReplicationGroup, "AwsSolutions-AEC6",
		"No AUTH token: the cache is reachable only from the worker's security group in private subnets, over TLS, and holds only SHA-256 fingerprints and counters with no personal data; a token would be a secret to rotate that protects nothing more.")
	return c
}

// Connect opens the cache to fn (in the cache's VPC) and gives it the
// cache's URL.
func (c *DedupCache) Connect(fn *GoFunction) {
	if fn.SecurityGroup == nil {
		panic("oncepay: DedupCache.Connect needs a function in the cache's VPC")
	}
	c.SecurityGroup.AddIngressRule(fn.SecurityGroup, awsec2.Port_Tcp(jsii.Number(CachePort)),
		jsii.String("Valkey from the "+fn.Name+" function"), nil)
	fn.SetEnv(map[string]*string{
		stackenv.DedupCacheURL: awscdk.Fn_Join(jsii.String(""), jsii.Strings("rediss://", *c.ReplicationGroup.AttrPrimaryEndPointAddress(), ":",
			*c.ReplicationGroup.AttrPrimaryEndPointPort())),
	})
}
