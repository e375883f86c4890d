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

	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/cdk/oncepay/totalstable"
)

// RecountRetention: how long a recount request may wait in its queue (or,
// without the recount function, for an operator). A request waits for its
// day to end, a day and the recount's settle time at most.
const RecountRetention = DlqRetention

// RecountMaxReceives is how many deliveries a recount request gets before
// it parks in RecountDlq. A request waits for its day to end in holds of
// at most recount.MaxHold (under SQS's 12 h), so one that arrived just
// after midnight is delivered four times before the day is over; a
// request that fails (unreadable, the ledger down) comes back after the
// queue's visibility timeout, six minutes, so ten deliveries are an hour.
const RecountMaxReceives = 10

// StreamTotalsProps configures the stream job.
type StreamTotalsProps struct {
	Protection
	// Outbox is the table whose stream the job reads (required).
	Outbox *OutboxTable
	// Settings of the stream mapping; nil is eventsource.Default().Totals.
	Settings *StreamSettings
	// Version is what the job counts (TotalsV1 or TotalsV2); 0 is V2.
	Version TotalsVersion
	// LogRetention of the function's logs; "" is one year.
	LogRetention awslogs.RetentionDays
	// Code of the function (required): the bootstrap of lambdas/totals.
	Code             awslambda.Code
	OverrideFunction func(*awslambda.FunctionProps)
	// Ledger, when set, adds the batch recount (RecountFunction): it
	// consumes the recount queue and the mapping's on-failure queue and
	// recounts each merchant's day from the ledger once it is over, in the
	// ledger's VPC as LedgerUser ("" means LedgerAppUser). Without it both
	// queues wait for an operator.
	Ledger      *Ledger
	LedgerUser  string
	RecountCode awslambda.Code // the bootstrap of lambdas/recount (required with a Ledger)
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
	Settings     StreamSettings
	// RecountFunction, its two mappings (Recount, FailureQueue) and their
	// dead-letter queue exist when the props name a Ledger.
	RecountFunction *GoFunction
	RecountMappings []awslambda.EventSourceMapping
	RecountDlq      awssqs.Queue
}

// NewStreamTotals creates the stream job.
func NewStreamTotals(scope constructs.Construct, id string, props *StreamTotalsProps) *StreamTotals {
	if props == nil || props.Outbox == nil {
		panic("oncepay: NewStreamTotals needs StreamTotalsProps.Outbox")
	}
	props.Outbox.resolveStream("StreamTotals")
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
		version = totalstable.V2
	}
	if version != totalstable.V1 && version != totalstable.V2 {
		panic(fmt.Sprintf("oncepay: stream job version %d is not 1 or 2", version))
	}

	c.Key = props.key(c.Construct)
	tp := baseTableProps(props.Protection, c.Key, totalstable.AttrShard)
	tp.SortKey = &awsdynamodb.Attribute{Name: jsii.String(totalstable.AttrSortKey), Type: awsdynamodb.AttributeType_STRING}
	c.Table = awsdynamodb.NewTable(c.Construct, jsii.String("Table"), tp)
	// The flush reads the tag index strongly consistent: only a local
	// index can, and only at the table's creation can one be added.
	c.Table.AddLocalSecondaryIndex(&awsdynamodb.LocalSecondaryIndexProps{
		IndexName:      jsii.String(totalstable.IndexByTag),
		SortKey:        &awsdynamodb.Attribute{Name: jsii.String(totalstable.AttrTag), Type: awsdynamodb.AttributeType_NUMBER},
		ProjectionType: awsdynamodb.ProjectionType_KEYS_ONLY,
	})
	c.Table.AddGlobalSecondaryIndex(&awsdynamodb.GlobalSecondaryIndexProps{
		IndexName:        jsii.String(totalstable.IndexByKey),
		PartitionKey:     &awsdynamodb.Attribute{Name: jsii.String(totalstable.AttrKey), Type: awsdynamodb.AttributeType_STRING},
		SortKey:          &awsdynamodb.Attribute{Name: jsii.String(totalstable.AttrShard), Type: awsdynamodb.AttributeType_STRING},
		ProjectionType:   awsdynamodb.ProjectionType_INCLUDE,
		NonKeyAttributes: jsii.Strings(totalstable.AttrTotal),
	})

	// With the recount, both of its queues are consumed: Lambda's advice
	// is a visibility timeout of six times the function's, and what the
	// recount cannot do (a request it cannot read, a ledger down for an
	// hour) parks in RecountDlq after RecountMaxReceives deliveries, where
	// an alarm watches. Without it the two queues are where an operator
	// looks.
	withRecount := props.Ledger != nil
	recountQueue := func(qp *awssqs.QueueProps) {
		if withRecount {
			qp.VisibilityTimeout = seconds(6 * SizingsFor(timingOrDefault(nil)).Recount.Timeout)
			qp.DeadLetterQueue = &awssqs.DeadLetterQueue{Queue: c.RecountDlq, MaxReceiveCount: jsii.Number(RecountMaxReceives)}
		}
	}
	if withRecount {
		c.RecountDlq = newFailureQueue(c.Construct, "RecountDlq", props.Protection, func(qp *awssqs.QueueProps) {
			qp.Encryption, qp.EncryptionMasterKey = awssqs.QueueEncryption_KMS, c.Key
		})
		suppress(cfn(c.RecountDlq), "Serverless-SQSRedrivePolicy",
			"This is the dead-letter queue of the recount's two queues: what the recount could not do in RecountMaxReceives deliveries waits here for an operator, and an alarm fires on its depth.")
	}
	rp := &awssqs.QueueProps{
		Encryption:          awssqs.QueueEncryption_KMS,
		EncryptionMasterKey: c.Key,
		EnforceSSL:          jsii.Bool(true),
		RetentionPeriod:     seconds(RecountRetention),
		RemovalPolicy:       props.removalPolicy(),
	}
	recountQueue(rp)
	c.Recount = awssqs.NewQueue(c.Construct, jsii.String("Recount"), rp)
	if !withRecount {
		recountWhy := "Without the recount function (no Ledger), the recount queue is the end of the line for a late copy: an operator recounts its merchant's day from the ledger (docs/stream-job.md#recount); an alarm fires on its depth."
		suppress(cfn(c.Recount), "AwsSolutions-SQS3", recountWhy)
		suppress(cfn(c.Recount), "Serverless-SQSRedrivePolicy", recountWhy)
	}

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
	fn.Grant([]string{"dynamodb:Query"}, jsii.String(*c.Table.TableArn()+"/index/"+totalstable.IndexByTag))
	fn.grantKey(c.Key, kmsWrite)
	fn.Grant([]string{"sqs:SendMessage"}, c.Recount.QueueArn())
	fn.SetEnv(map[string]*string{
		stackenv.TotalsTable:     c.Table.TableName(),
		stackenv.RecountQueueURL: c.Recount.QueueUrl(),
		stackenv.TotalsVersion:   jsii.String(strconv.Itoa(int(version))),
	})
	suppress(cfn(fn.Function), "Serverless-LambdaDLQ",
		"Invoked by the stream's event-source mapping, never asynchronously: a failed batch is retried by the mapping and then recorded in its on-failure destination (FailureQueue).")

	c.FailureQueue = newFailureQueue(c.Construct, "FailureQueue", props.Protection, recountQueue)
	if !withRecount {
		terminal := "This is the totals mapping's on-failure destination and, without the recount function (no Ledger), the end of the line: it names the shard and arrival times of a discarded batch, whose days an operator recounts; an alarm fires on each discard."
		suppress(cfn(c.FailureQueue), "AwsSolutions-SQS3", terminal)
		suppress(cfn(c.FailureQueue), "Serverless-SQSRedrivePolicy", terminal)
	}

	c.Mapping = newStreamMapping(c.Construct, fn.Function, props.Outbox.Table.TableStreamArn(), c.Settings, c.FailureQueue)
	if props.Ledger != nil {
		c.addRecount(props, version)
	}
	return c
}

// addRecount adds the batch recount: a function in the ledger's VPC on the
// recount queue and the on-failure queue, with partial batch failures (a
// request whose day is still open is held back, not deleted).
func (c *StreamTotals) addRecount(props *StreamTotalsProps, version totalstable.Version) {
	c.RecountFunction = NewGoFunction(c.Construct, "RecountFunction", &GoFunctionProps{
		Name:          FnRecount,
		Code:          props.RecountCode,
		Sizing:        SizingsFor(timingOrDefault(nil)).Recount,
		Vpc:           props.Ledger.Cluster.Vpc(),
		LogRetention:  props.LogRetention,
		RemovalPolicy: props.removalPolicy(),
		Description:   "oncepay recount: late copies and discarded stream batches -> each merchant's day recounted from the ledger once it is over",
	})
	fn := c.RecountFunction
	props.Ledger.Connect(fn, props.LedgerUser)
	// The recount's and the pending rows (PutItem) on the sink; nothing
	// else of it.
	fn.Grant([]string{"dynamodb:PutItem"}, c.Table.TableArn())
	fn.grantKey(c.Key, kmsWrite) // the table's items, the recount queue's messages
	// A discarded batch is read back from the outbox stream at once, and
	// its keys whose day is still open are sent on to the recount queue.
	fn.Grant([]string{"dynamodb:GetShardIterator", "dynamodb:GetRecords"}, props.Outbox.Table.TableStreamArn())
	fn.grantKey(props.Outbox.Key, kmsRead)
	fn.Grant([]string{"sqs:SendMessage"}, c.Recount.QueueArn())
	for i, q := range []awssqs.Queue{c.Recount, c.FailureQueue} {
		fn.Grant([]string{"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes"}, q.QueueArn())
		m := awslambda.NewEventSourceMapping(c.Construct, jsii.String(fmt.Sprintf("RecountMapping%d", i)), &awslambda.EventSourceMappingProps{
			Target:                  fn.Function,
			EventSourceArn:          q.QueueArn(),
			BatchSize:               jsii.Number(10),
			ReportBatchItemFailures: jsii.Bool(true),
		})
		suppress(cfn(m), "Serverless-LambdaEventSourceMappingDestination",
			"Lambda has no on-failure destination for SQS mappings: a request the recount cannot do returns to its queue and, after RecountMaxReceives deliveries, parks in RecountDlq, which an alarm watches.")
		c.RecountMappings = append(c.RecountMappings, m)
	}
	fn.SetEnv(map[string]*string{
		stackenv.TotalsTable:           c.Table.TableName(),
		stackenv.RecountQueueURL:       c.Recount.QueueUrl(),
		stackenv.TotalsFailureQueueURL: c.FailureQueue.QueueUrl(),
		stackenv.TotalsVersion:         jsii.String(strconv.Itoa(int(version))),
	})
	suppress(cfn(fn.Function), "Serverless-LambdaDLQ",
		"Invoked only by its SQS event-source mappings: a request it fails returns to its queue (held back until its day is over) and parks in RecountDlq after RecountMaxReceives deliveries, so nothing an asynchronous DLQ could catch is lost.")
}
