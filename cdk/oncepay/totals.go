package oncepay

import (
	"fmt"
	"strconv"

	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/internal/eventsource"
	"github.com/oncepay/oncepay/internal/stackenv"
	"github.com/oncepay/oncepay/internal/totals"
)

// RecountRetention: how long a late copy waits for an operator's recount.
const RecountRetention = DlqRetention

// StreamTotalsProps configures the stream job.
type StreamTotalsProps struct {
	Protection
	// Outbox is the table whose stream the job reads (required).
	Outbox *OutboxTable
	// Settings of the stream mapping; nil is eventsource.Default().Totals.
	Settings *eventsource.Stream
	// Version is what the job counts (totals.V1 or V2); 0 is V2.
	Version totals.Version
	// LogRetention of the function's logs; "" is one year.
	LogRetention awslogs.RetentionDays
	// Code of the function; nil is build/totals.
	Code             awslambda.Code
	OverrideFunction func(*awslambda.FunctionProps)
}

// StreamTotals is the stream job (docs/stream-job.md): the outbox stream
// through a tumbling window into merchants' daily totals, with its sink
// table, its recount queue for late copies and the mapping's on-failure
// destination.
type StreamTotals struct {
	constructs.Construct
	Table        awsdynamodb.Table
	Key          awskms.IKey
	Recount      awssqs.Queue
	FailureQueue awssqs.Queue
	Function     *GoFunction
	Mapping      awslambda.EventSourceMapping
	Settings     eventsource.Stream
}

// NewStreamTotals creates the stream job.
func NewStreamTotals(scope constructs.Construct, id string, props *StreamTotalsProps) *StreamTotals {
	if props == nil || props.Outbox == nil {
		panic("oncepay: NewStreamTotals needs StreamTotalsProps.Outbox")
	}
	c := &StreamTotals{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	c.Settings = eventsource.Default().Totals
	if props.Settings != nil {
		c.Settings = *props.Settings
	}
	if err := c.Settings.Validate(); err != nil {
		panic(err)
	}
	switch {
	case c.Settings.TumblingWindow == 0:
		panic("oncepay: the stream job's mapping needs a tumbling window (Settings.TumblingWindow)")
	case c.Settings.ParallelizationFactor != 1:
		// The sink's mark and flush assume one writer per shard.
		panic(fmt.Sprintf("oncepay: the stream job needs ParallelizationFactor 1, not %d", c.Settings.ParallelizationFactor))
	case c.Settings.ReportBatchItemFailures:
		panic("oncepay: the stream job's state answers for its whole batch: no ReportBatchItemFailures")
	}
	version := props.Version
	if version == 0 {
		version = totals.V2
	}
	if version != totals.V1 && version != totals.V2 {
		panic(fmt.Sprintf("oncepay: stream job version %d is not 1 or 2", version))
	}

	c.Key = props.key(c.Construct)
	tp := baseTableProps(props.Protection, c.Key, totals.AttrShard)
	tp.SortKey = &awsdynamodb.Attribute{Name: jsii.String(totals.AttrSortKey), Type: awsdynamodb.AttributeType_STRING}
	c.Table = awsdynamodb.NewTable(c.Construct, jsii.String("Table"), tp)
	// The flush reads the tag index strongly consistent: only a local
	// index can, and only at the table's creation can one be added.
	c.Table.AddLocalSecondaryIndex(&awsdynamodb.LocalSecondaryIndexProps{
		IndexName:      jsii.String(totals.IndexByTag),
		SortKey:        &awsdynamodb.Attribute{Name: jsii.String(totals.AttrTag), Type: awsdynamodb.AttributeType_NUMBER},
		ProjectionType: awsdynamodb.ProjectionType_KEYS_ONLY,
	})
	c.Table.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
		IndexName:        jsii.String(totals.IndexByKey),
		PartitionKey:     &awsdynamodb.Attribute{Name: jsii.String(totals.AttrKey), Type: awsdynamodb.AttributeType_STRING},
		SortKey:          &awsdynamodb.Attribute{Name: jsii.String(totals.AttrShard), Type: awsdynamodb.AttributeType_STRING},
		ProjectionType:   awsdynamodb.ProjectionType_INCLUDE,
		NonKeyAttributes: jsii.Strings(totals.AttrTotal),
	})

	c.Recount = awssqs.NewQueue(c.Construct, jsii.String("Recount"), &awssqs.QueueProps{
		Encryption:          awssqs.QueueEncryption_KMS,
		EncryptionMasterKey: c.Key,
		EnforceSSL:          jsii.Bool(true),
		RetentionPeriod:     seconds(RecountRetention),
		RemovalPolicy:       props.removalPolicy(),
	})
	recountWhy := "The recount queue is the end of the line for a late copy: an operator recounts its merchant's day from the ledger (docs/stream-job.md); an alarm fires on its depth, and a DLQ behind it would only move the request one hop further away."
	suppress(cfn(c.Recount), "AwsSolutions-SQS3", recountWhy)
	suppress(cfn(c.Recount), "Serverless-SQSRedrivePolicy", recountWhy)

	c.Function = NewGoFunction(c.Construct, "Function", &GoFunctionProps{
		Name:          FnTotals,
		Code:          props.Code,
		Sizing:        SizingsFor(timingOrDefault(nil)).Totals,
		LogRetention:  props.LogRetention,
		RemovalPolicy: props.removalPolicy(),
		Description:   "oncepay totals: outbox stream -> tumbling window -> merchants' daily totals (absolute sink, full flush after a restore)",
		Override:      props.OverrideFunction,
	})
	fn := c.Function
	fn.Grant([]string{"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"}, props.Outbox.Table.TableStreamArn())
	fn.Grant([]string{"dynamodb:ListStreams"}, jsii.String("*"))
	fn.grantKey(props.Outbox.Key, kmsRead)
	// The sink: the mark and the carry (GetItem, PutItem), totals
	// (BatchWriteItem), the tag index and a day's partials (Query).
	fn.Grant([]string{"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:BatchWriteItem", "dynamodb:Query"}, c.Table.TableArn())
	fn.Grant([]string{"dynamodb:Query"}, jsii.String(*c.Table.TableArn()+"/index/"+totals.IndexByTag))
	fn.grantKey(c.Key, kmsWrite)
	fn.Grant([]string{"sqs:SendMessage"}, c.Recount.QueueArn())
	fn.SetEnv(map[string]*string{
		stackenv.TotalsTable:     c.Table.TableName(),
		stackenv.RecountQueueURL: c.Recount.QueueUrl(),
		stackenv.TotalsVersion:   jsii.String(strconv.Itoa(int(version))),
	})
	suppress(cfn(fn.Function), "Serverless-LambdaDLQ",
		"Invoked by the stream's event-source mapping, never asynchronously: a failed batch is retried by the mapping and then recorded in its on-failure destination (FailureQueue).")

	c.FailureQueue = newFailureQueue(c.Construct, "FailureQueue", props.Protection, nil)
	terminal := "This is the totals mapping's on-failure destination: it names the shard and sequence range whose days must be recounted; an alarm fires on its depth."
	suppress(cfn(c.FailureQueue), "AwsSolutions-SQS3", terminal)
	suppress(cfn(c.FailureQueue), "Serverless-SQSRedrivePolicy", terminal)

	c.Mapping = newStreamMapping(c.Construct, fn.Function, props.Outbox.Table.TableStreamArn(), c.Settings, c.FailureQueue)
	return c
}
