package oncepay

import (
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// Attribute names the handlers rely on (docs/mechanism.md#design-4).
const (
	ClaimPartitionKey  = "pk"         // the scope: caller + client key
	OutboxPartitionKey = "event_id"   // derived, so a re-put is the same item
	ExpiresAtAttribute = "expires_at" // TTL, epoch seconds
)

// ClaimTableProps configures the idem table.
type ClaimTableProps struct {
	Protection
	// Override sees the final props before the table is created.
	Override func(*awsdynamodb.TableProps)
}

// ClaimTable is the idempotency-key store: one item per scope, claimed with a
// conditional put, expired by TTL.
type ClaimTable struct {
	constructs.Construct
	Table awsdynamodb.Table
	Key   awskms.IKey
}

// NewClaimTable creates the idem table.
func NewClaimTable(scope constructs.Construct, id string, props *ClaimTableProps) *ClaimTable {
	if props == nil {
		props = &ClaimTableProps{}
	}
	c := &ClaimTable{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	c.Key = props.key(c.Construct)
	tp := baseTableProps(props.Protection, c.Key, ClaimPartitionKey)
	if props.Override != nil {
		props.Override(tp)
	}
	c.Table = awsdynamodb.NewTable(c.Construct, jsii.String("Table"), tp)
	return c
}

// OutboxTableProps configures the outbox table.
type OutboxTableProps struct {
	Protection
	Override func(*awsdynamodb.TableProps)
}

// OutboxTable holds events to publish; its NEW_IMAGE stream feeds the relay.
// A re-put of the same event_id is harmless: the consumer's inbox dedups.
type OutboxTable struct {
	constructs.Construct
	Table awsdynamodb.Table
	Key   awskms.IKey
}

// NewOutboxTable creates the outbox table with its stream.
func NewOutboxTable(scope constructs.Construct, id string, props *OutboxTableProps) *OutboxTable {
	if props == nil {
		props = &OutboxTableProps{}
	}
	c := &OutboxTable{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	c.Key = props.key(c.Construct)
	tp := baseTableProps(props.Protection, c.Key, OutboxPartitionKey)
	// The relay needs only what was written; old images would double the
	// stream's read cost for nothing.
	tp.Stream = awsdynamodb.StreamViewType_NEW_IMAGE
	if props.Override != nil {
		props.Override(tp)
	}
	c.Table = awsdynamodb.NewTable(c.Construct, jsii.String("Table"), tp)
	return c
}

// baseTableProps: on-demand (bursty, unpredictable traffic), TTL, PITR, CMK.
// No table name: generated names let several stacks share an account.
func baseTableProps(p Protection, key awskms.IKey, pk string) *awsdynamodb.TableProps {
	return &awsdynamodb.TableProps{
		PartitionKey:        &awsdynamodb.Attribute{Name: jsii.String(pk), Type: awsdynamodb.AttributeType_STRING},
		BillingMode:         awsdynamodb.BillingMode_PAY_PER_REQUEST,
		TimeToLiveAttribute: jsii.String(ExpiresAtAttribute),
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		Encryption:         awsdynamodb.TableEncryption_CUSTOMER_MANAGED,
		EncryptionKey:      key,
		RemovalPolicy:      p.removalPolicy(),
		DeletionProtection: jsii.Bool(p.deletionProtection()),
	}
}
