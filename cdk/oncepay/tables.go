package oncepay

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
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
// conditional put, expired by TTL. NewClaimTable makes one; a table made
// elsewhere (awsdynamodb.Table_FromTableAttributes, a TableV2) is a literal,
// &oncepay.ClaimTable{Table: t, Key: key}: its partition key must be "pk"
// (string) and its TTL attribute "expires_at".
type ClaimTable struct {
	constructs.Construct
	Table awsdynamodb.ITable
	// Key encrypts the table; nil takes Table.EncryptionKey(). A table made
	// elsewhere with an AWS-owned or AWS-managed key says AwsManagedKey.
	Key           awskms.IKey
	AwsManagedKey bool
}

func (c *ClaimTable) resolve(what string) {
	if c == nil || c.Table == nil {
		panic(fmt.Sprintf("oncepay: %s: the claim table is nil: give a *ClaimTable with Table set", what))
	}
	c.Key = tableKey(what, "claim", c.Table, c.Key, c.AwsManagedKey)
}

// tableKey is the table's key: stated, or read from the table, or refused
// when a table made elsewhere has none known.
func tableKey(what, name string, t awsdynamodb.ITable, key awskms.IKey, awsManaged bool) awskms.IKey {
	if key == nil {
		key = t.EncryptionKey()
	}
	if key == nil && !awsManaged && !inApp(t) {
		panic(fmt.Sprintf("oncepay: %s: the %s table was made elsewhere and its key is unknown: set its Key (or import it with EncryptionKey), or AwsManagedKey if it uses none of yours; without it the functions get no kms grant and fail at run time", what, name))
	}
	return key
}

// inApp: the resource is made by this app (it has an L1 resource), so the
// constructs can read its settings.
func inApp(c constructs.IConstruct) bool {
	_, ok := cfn(c).(awscdk.CfnResource)
	return ok
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
	t := awsdynamodb.NewTable(c.Construct, jsii.String("Table"), tp)
	c.Table = t
	c.Key = t.EncryptionKey() // the override's, if it swapped it
	return c
}

// OutboxTableProps configures the outbox table.
type OutboxTableProps struct {
	Protection
	Override func(*awsdynamodb.TableProps)
}

// OutboxTable holds events to publish; its NEW_IMAGE stream feeds the relay.
// A re-put of the same event_id is harmless: the consumer's inbox dedups.
// NewOutboxTable makes one; a table made elsewhere is a literal,
// &oncepay.OutboxTable{Table: t, Key: key}, where t carries its stream ARN
// (awsdynamodb.Table_FromTableAttributes with TableStreamArn).
type OutboxTable struct {
	constructs.Construct
	Table         awsdynamodb.ITable
	Key           awskms.IKey
	AwsManagedKey bool
}

func (c *OutboxTable) resolve(what string) {
	if c == nil || c.Table == nil {
		panic(fmt.Sprintf("oncepay: %s: the outbox table is nil: give an *OutboxTable with Table set", what))
	}
	c.Key = tableKey(what, "outbox", c.Table, c.Key, c.AwsManagedKey)
}

// resolveStream also checks the table has a stream with new images (the
// relay and the stream job read the new image).
func (c *OutboxTable) resolveStream(what string) {
	c.resolve(what)
	view, inApp := "", false
	switch t := cfn(c.Table).(type) {
	case awsdynamodb.CfnTable:
		inApp = true
		if spec, ok := t.StreamSpecification().(*awsdynamodb.CfnTable_StreamSpecificationProperty); ok && spec != nil && spec.StreamViewType != nil {
			view = *spec.StreamViewType
		} else if spec, ok := t.StreamSpecification().(map[string]any); ok {
			view, _ = spec["streamViewType"].(string)
		}
	case awsdynamodb.CfnGlobalTable:
		// A TableV2 of this app: jsii cannot read its stream specification
		// back and its stream ARN is set with or without a stream, so
		// nothing is checked here: DynamoStream must be NEW_IMAGE
		// (docs/constructs.md).
		return
	}
	if inApp {
		if view != "NEW_IMAGE" && view != "NEW_AND_OLD_IMAGES" {
			panic(fmt.Sprintf("oncepay: %s: the outbox table has no stream with new images (stream view %q): give it a NEW_IMAGE stream (TableProps.Stream, TablePropsV2.DynamoStream)", what, view))
		}
		return
	}
	if c.Table.TableStreamArn() == nil {
		panic(fmt.Sprintf("oncepay: %s: the outbox table was made elsewhere without its stream ARN: import it with awsdynamodb.Table_FromTableAttributes and TableStreamArn (a NEW_IMAGE or NEW_AND_OLD_IMAGES stream)", what))
	}
}

// grantPut lets fn put outbox items, and names the table to it (the event
// id is derived, so a re-put is the same item).
func (c *OutboxTable) grantPut(fn *GoFunction) {
	fn.Grant([]string{"dynamodb:PutItem"}, c.Table.TableArn())
	fn.grantKey(c.Key, kmsWrite)
	fn.SetEnv(map[string]*string{EnvOutboxTable: c.Table.TableName()})
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
	t := awsdynamodb.NewTable(c.Construct, jsii.String("Table"), tp)
	c.Table = t
	c.Key = t.EncryptionKey() // the override's, if it swapped it
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
