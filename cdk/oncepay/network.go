package oncepay

import (
	"fmt"
	"regexp"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// NetworkProps configures the VPC.
type NetworkProps struct {
	// NatGateways; nil means 1. One per AZ survives an AZ outage.
	NatGateways *float64
	// RemovalPolicy of the flow-log group; "" means RETAIN.
	RemovalPolicy awscdk.RemovalPolicy
	// LogRetention of the flow-log group; "" means one year.
	LogRetention awslogs.RetentionDays
	Override     func(*awsec2.VpcProps)
	// InterfaceEndpoints the VPC's functions reach AWS through instead of
	// the NAT (each costs per hour and AZ; the prod profile takes SNS and
	// Secrets Manager). DynamoDB's gateway endpoint, free, is always made.
	InterfaceEndpoints []awsec2.InterfaceVpcEndpointAwsService
	// AvailabilityZoneIds pins the two AZs by id (use1-az1), the same
	// physical zones in every account; nil takes the Region's first two by
	// name, which each account maps to other zones (and RDS Proxy does not
	// run in some, such as use1-az3). `make preflight` lists a Region's ids.
	AvailabilityZoneIds []string
}

// Network is a two-AZ VPC: public subnets hold only the NAT gateways, the
// ledger and the Lambdas that reach it live in private subnets with egress
// (the PSP is on the internet). Every flow is logged.
type Network struct {
	constructs.Construct
	Vpc          awsec2.Vpc
	FlowLogGroup awslogs.LogGroup
}

// NewNetwork creates the VPC and its flow log.
func NewNetwork(scope constructs.Construct, id string, props *NetworkProps) *Network {
	if props == nil {
		props = &NetworkProps{}
	}
	c := &Network{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	removal := Protection{RemovalPolicy: props.RemovalPolicy}.removalPolicy()
	retention := props.LogRetention
	if retention == "" {
		retention = awslogs.RetentionDays_ONE_YEAR
	}
	nat := props.NatGateways
	if nat == nil {
		nat = jsii.Number(1)
	}
	// Our own group: the one FlowLog makes by default keeps logs two years
	// and outlives a sandbox.
	c.FlowLogGroup = awslogs.NewLogGroup(c.Construct, jsii.String("FlowLogs"), &awslogs.LogGroupProps{
		Retention:     retention,
		RemovalPolicy: removal,
	})
	vp := &awsec2.VpcProps{
		MaxAzs:      jsii.Number(2),
		NatGateways: nat,
		SubnetConfiguration: &[]*awsec2.SubnetConfiguration{
			{Name: jsii.String("public"), SubnetType: awsec2.SubnetType_PUBLIC, CidrMask: jsii.Number(24)},
			{Name: jsii.String("private"), SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS, CidrMask: jsii.Number(20)},
		},
		FlowLogs: &map[string]*awsec2.FlowLogOptions{
			"All": {
				Destination: awsec2.FlowLogDestination_ToCloudWatchLogs(c.FlowLogGroup, nil),
				TrafficType: awsec2.FlowLogTrafficType_ALL,
			},
		},
		// Nothing is placed in the default security group; locking it down
		// needs a custom-resource Lambda, which is more to audit than it saves.
		RestrictDefaultSecurityGroup: jsii.Bool(false),
	}
	if ids := props.AvailabilityZoneIds; ids != nil {
		if !twoAZIds(ids) {
			panic(fmt.Sprintf("oncepay: AvailabilityZoneIds %q: want two different AZ ids such as use1-az1,use1-az2", ids))
		}
	}
	if props.Override != nil {
		props.Override(vp)
	}
	c.Vpc = awsec2.NewVpc(c.Construct, jsii.String("Vpc"), vp)
	if ids := props.AvailabilityZoneIds; ids != nil {
		// The VPC lays its subnets out by name, as always (a stack that
		// names its account checks the names against the Region's); each
		// subnet of the i-th zone is then placed by the i-th id, which is
		// all CloudFormation places it by.
		for _, group := range [][]awsec2.ISubnet{*c.Vpc.PublicSubnets(), *c.Vpc.PrivateSubnets()} {
			if len(group) != len(ids) {
				panic(fmt.Sprintf("oncepay: the VPC has %d subnets of a kind for %d AZ ids", len(group), len(ids)))
			}
			for i, sn := range group {
				cs := sn.Node().DefaultChild().(awsec2.CfnSubnet)
				cs.AddPropertyDeletionOverride(jsii.String("AvailabilityZone"))
				cs.AddPropertyOverride(jsii.String("AvailabilityZoneId"), jsii.String(ids[i]))
			}
		}
	}
	// The api, webhook, resolver and worker call DynamoDB from the private
	// subnets on every payment: through the gateway endpoint, not the NAT
	// (no per-GB NAT charge, and the claim table stays reachable when the
	// NAT is not).
	c.Vpc.AddGatewayEndpoint(jsii.String("DynamoDB"), &awsec2.GatewayVpcEndpointOptions{
		Service: awsec2.GatewayVpcEndpointAwsService_DYNAMODB(),
		Subnets: &[]*awsec2.SubnetSelection{{SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS}},
	})
	for _, svc := range props.InterfaceEndpoints {
		ep := c.Vpc.AddInterfaceEndpoint(svc.ShortName(), &awsec2.InterfaceVpcEndpointOptions{
			Service:           svc,
			PrivateDnsEnabled: jsii.Bool(true),
			Subnets:           &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS},
		})
		for _, sg := range *ep.Connections().SecurityGroups() {
			suppress(cfn(sg), "CdkNagValidationFailure",
				"The endpoint's security group admits HTTPS from the VPC's own CIDR (a GetAtt of the VPC, which cdk-nag cannot resolve to check AwsSolutions-EC23): no address outside the VPC.")
		}
	}
	return c
}

// twoAZIds reports whether ids are two different AZ ids.
func twoAZIds(ids []string) bool {
	return len(ids) == 2 && ids[0] != ids[1] && azID.MatchString(ids[0]) && azID.MatchString(ids[1])
}

// azID is an AZ id: a Region code and a zone number (use1-az1, euw1-az3,
// usw2-lax1-az1 for a Local Zone is not one a VPC here takes).
var azID = regexp.MustCompile(`^[a-z]{2,4}[0-9]+-az[0-9]+$`)
