package oncepay

import (
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// DataPlaneProps configures every store and channel. Protection applies to
// all parts; a part's own props win where set.
type DataPlaneProps struct {
	Protection
	// Vpc to place the ledger in; nil creates a Network from Network props.
	Vpc          awsec2.IVpc
	LogRetention awslogs.RetentionDays

	Network NetworkProps
	Claims  ClaimTableProps
	Outbox  OutboxTableProps
	Events  EventQueueProps
	Push    PushTopicProps
	Ledger  LedgerProps
	// Regions makes the claim table a global table, adds the home record
	// table, and joins the ledger to an Aurora global database
	// (docs/regions.md); nil is one Region.
	Regions *Regions
}

// DataPlane is everything that holds or carries a payment's state. Later
// constructs (IdempotentApi, OutboxRelay, InboxWorker) take these fields.
type DataPlane struct {
	constructs.Construct
	Key     awskms.IKey
	Vpc     awsec2.IVpc
	Network *Network // nil when props.Vpc was given
	Claims  *ClaimTable
	Outbox  *OutboxTable
	Events  *EventQueue
	Push    *PushTopic
	Ledger  *Ledger
	// Homes is the home record table; nil in one Region.
	Homes *HomeTable
}

// NewDataPlane creates one KMS key (unless given) and the parts around it.
// One key keeps grants simple: a function that may read a table's stream may
// decrypt it, and CloudTrail shows every use in one place.
func NewDataPlane(scope constructs.Construct, id string, props *DataPlaneProps) *DataPlane {
	if props == nil {
		props = &DataPlaneProps{}
	}
	c := &DataPlane{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	shared := props.Protection
	if shared.EncryptionKey == nil {
		shared.EncryptionKey = NewDataKey(c.Construct, "Key", shared.removalPolicy())
	}
	c.Key = shared.EncryptionKey

	c.Vpc = props.Vpc
	if c.Vpc == nil {
		np := props.Network
		if np.RemovalPolicy == "" {
			np.RemovalPolicy = shared.RemovalPolicy
		}
		if np.LogRetention == "" {
			np.LogRetention = props.LogRetention
		}
		c.Network = NewNetwork(c.Construct, "Network", &np)
		c.Vpc = c.Network.Vpc
	}

	claims := props.Claims
	claims.Protection = claims.Protection.inherit(shared)
	if r := props.Regions; r != nil {
		if claims.Override != nil {
			panic("oncepay: DataPlaneProps.Claims.Override takes a one-Region table's props; across Regions the claim table is a TableV2 (NewGlobalClaimTable's Override)")
		}
		// The data key stays with the Region's other stores: a global
		// table's replicas use DynamoDB's AWS-managed key (GlobalTableProps).
		global := GlobalTableProps{Protection: Protection{RemovalPolicy: claims.RemovalPolicy, DeletionProtection: claims.DeletionProtection}, Regions: r}
		c.Claims = NewGlobalClaimTable(c.Construct, "Claims", &global)
		c.Homes = NewHomeTable(c.Construct, "Homes", &global)
	} else {
		c.Claims = NewClaimTable(c.Construct, "Claims", &claims)
	}

	outbox := props.Outbox
	outbox.Protection = outbox.Protection.inherit(shared)
	c.Outbox = NewOutboxTable(c.Construct, "Outbox", &outbox)

	events := props.Events
	events.Protection = events.Protection.inherit(shared)
	c.Events = NewEventQueue(c.Construct, "Events", &events)

	push := props.Push
	push.Protection = push.Protection.inherit(shared)
	c.Push = NewPushTopic(c.Construct, "Push", &push)

	ledger := props.Ledger
	ledger.Protection = ledger.Protection.inherit(shared)
	if ledger.Vpc == nil {
		ledger.Vpc = c.Vpc
	}
	if r := props.Regions; r != nil {
		ledger.Global = &LedgerGlobal{Identifier: r.GlobalClusterID(), Primary: r.IsPrimary()}
	}
	c.Ledger = NewLedger(c.Construct, "Ledger", &ledger)
	return c
}
