package oncepay

import (
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
)

// OutboxRelayProps configures the relay. With Code alone it is a working
// relay with its own outbox table, events queue and failure queue.
type OutboxRelayProps struct {
	// Protection of what the construct creates.
	Protection
	// Code of the relay function (required): a directory with the
	// linux/arm64 bootstrap of lambdas/relay.
	Code awslambda.Code
	// Outbox is the table whose stream feeds the relay (NewOutboxTable's,
	// or a literal over any table with a NEW_IMAGE stream); nil creates one.
	Outbox      *OutboxTable
	OutboxProps OutboxTableProps
	// Events is the FIFO queue the relay sends to; nil creates one.
	Events      *EventQueue
	EventsProps EventQueueProps
	// Settings of the stream mapping; nil is DefaultRelaySettings(), the
	// numbers the local harness plays too.
	Settings *StreamSettings
	// Sizing of the function; nil is DefaultSizings().Relay (30 s, 256 MB).
	Sizing *Sizing
	// Role the function runs as (imported mutable); nil creates one.
	Role awsiam.IRole
	// Vpc (with VpcSubnets, SecurityGroups) places the function in a VPC;
	// nil keeps it outside (it reaches only AWS APIs).
	Vpc            awsec2.IVpc
	VpcSubnets     *awsec2.SubnetSelection
	SecurityGroups []awsec2.ISecurityGroup
	// Description of the function; "" is oncepay's.
	Description string
	// Alarms of the construct (on unless Disabled).
	Alarms AlarmProps
	// LogRetention of the function's logs; "" is one year.
	LogRetention     awslogs.RetentionDays
	OverrideFunction func(*awslambda.FunctionProps)
	// OverrideFailureQueue sees the failure queue's props.
	OverrideFailureQueue func(*awssqs.QueueProps)
}

// OutboxRelay forwards the outbox table's stream to the events FIFO queue:
// stream -> relay function (partial batch failures, bisect on error,
// bounded retries) -> SQS FIFO, with an on-failure destination that records
// any batch the mapping gives up on.
type OutboxRelay struct {
	constructs.Construct
	Outbox   *OutboxTable
	Events   *EventQueue
	Function *GoFunction
	Mapping  awslambda.EventSourceMapping
	// FailureQueue receives, for a batch given up on, its shard and
	// sequence-number range (never the records). Nothing is lost with it:
	// the ledger's intents stay unpublished until the worker's inbox holds
	// their events, and the resolver's sweep re-drives them meanwhile.
	FailureQueue awssqs.Queue
	Settings     StreamSettings
	// Alarms by id (AlarmRelay*); empty when AlarmProps.Disabled.
	Alarms map[string]awscloudwatch.Alarm
}

// The OutboxRelay's own alarms (AlarmProps).
const (
	AlarmRelayFailed      = "FailuresNotEmpty"
	AlarmRelayFnErrors    = "Errors"
	AlarmRelayIteratorOld = "IteratorAge"
)

// NewOutboxRelay creates the relay.
func NewOutboxRelay(scope constructs.Construct, id string, props *OutboxRelayProps) *OutboxRelay {
	const what = "OutboxRelay"
	if props == nil || props.Code == nil {
		panic("oncepay: OutboxRelayProps.Code is required: the linux/arm64 bootstrap of lambdas/relay, e.g. awslambda.Code_FromAsset(jsii.String(\"build/relay\"), nil)")
	}
	exclusive(what, "Outbox", props.Outbox != nil, "OutboxProps", !isZero(props.OutboxProps), "OutboxProps configures the table the relay would create, and Outbox replaces it")
	exclusive(what, "Events", props.Events != nil, "EventsProps", !isZero(props.EventsProps), "EventsProps configures the queue the relay would create, and Events replaces it")
	c := &OutboxRelay{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	c.Settings = DefaultRelaySettings()
	if props.Settings != nil {
		c.Settings = *props.Settings
	}
	if err := c.Settings.Validate(); err != nil {
		panic(fmt.Errorf("oncepay: %s: %w", what, err))
	}
	if c.Settings.TumblingWindow != 0 {
		panic(fmt.Sprintf("oncepay: %s: Settings.TumblingWindow is for the stream job; the relay keeps no state between batches", what))
	}
	sizing := DefaultSizings().Relay
	if props.Sizing != nil {
		sizing = *props.Sizing
	}
	c.Outbox = props.Outbox
	if c.Outbox == nil {
		op := props.OutboxProps
		op.Protection = op.Protection.inherit(props.Protection)
		c.Outbox = NewOutboxTable(c.Construct, "Outbox", &op)
	}
	c.Outbox.resolveStream(what)
	c.Events = props.Events
	if c.Events == nil {
		ep := props.EventsProps
		ep.Protection = ep.Protection.inherit(props.Protection)
		c.Events = NewEventQueue(c.Construct, "Events", &ep)
	}
	c.Events.resolve(what)

	desc := props.Description
	if desc == "" {
		desc = "oncepay relay: outbox stream -> events FIFO queue"
	}
	c.Function = NewGoFunction(c.Construct, "Function", &GoFunctionProps{
		Name:           FnRelay,
		Code:           props.Code,
		Sizing:         sizing,
		Role:           props.Role,
		Vpc:            props.Vpc,
		VpcSubnets:     props.VpcSubnets,
		SecurityGroups: props.SecurityGroups,
		LogRetention:   props.LogRetention,
		RemovalPolicy:  props.removalPolicy(),
		Description:    desc,
		Override:       props.OverrideFunction,
	})
	fn := c.Function
	// Reading the stream: Lambda's poller uses these with the function's
	// role. ListStreams has no resource type; Lambda checks for it when it
	// creates the mapping.
	fn.Grant([]string{"dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"}, c.Outbox.Table.TableStreamArn())
	fn.Grant([]string{"dynamodb:ListStreams"}, jsii.String("*"))
	fn.grantKey(c.Outbox.Key, kmsRead)
	// Sending: SendMessageBatch is authorized as sqs:SendMessage.
	fn.Grant([]string{"sqs:SendMessage"}, c.Events.Queue.QueueArn())
	fn.grantKey(c.Events.Key, kmsProduce)
	fn.SetEnv(map[string]*string{EnvEventsQueueURL: c.Events.Queue.QueueUrl()})
	suppress(cfn(fn.Function), "Serverless-LambdaDLQ",
		"Invoked by the stream's event-source mapping, never asynchronously: a failed batch is retried by the mapping and then recorded in its on-failure destination (FailureQueue), which is what a DLQ would hold.")

	c.FailureQueue = newFailureQueue(c.Construct, "FailureQueue", props.Protection, props.OverrideFailureQueue)
	terminal := "This is the relay mapping's on-failure destination, the end of the line for a stream batch Lambda gave up on; it holds only shard and sequence numbers, and an alarm fires on its depth."
	suppress(cfn(c.FailureQueue), "AwsSolutions-SQS3", terminal)
	suppress(cfn(c.FailureQueue), "Serverless-SQSRedrivePolicy", terminal)

	c.Mapping = newStreamMapping(c.Construct, fn.Function, c.Outbox.Table.TableStreamArn(), c.Settings, c.FailureQueue)

	if a := newConstructAlarms(c.Construct, props.Alarms); a != nil {
		a.add(AlarmRelayFailed, "The relay mapping gave up on a stream batch (its shard and sequence numbers are in the failure queue). Its events are not lost while the ledger's intents stay unpublished and a sweep re-drives them; the cause needs a look.", queueDepth(c.FailureQueue), 1)
		a.add(AlarmRelayFnErrors, "The relay function failed invocations (partial batch failures retry; errors mean whole batches).", fn.Function.MetricErrors(periodOpts("Sum")), 1)
		a.add(AlarmRelayIteratorOld, "The relay is more than a minute behind the outbox stream.", fn.Function.Metric(jsii.String("IteratorAge"), periodOpts("Maximum")), RelayIteratorAgeMaxMilli)
		c.Alarms = a.all()
	}
	return c
}

// newStreamMapping is a stream event-source mapping carrying s as the
// local harness plays it, with onFailure as its destination. "Forever" is
// Lambda's -1, which the L2 props cannot express: the template states it
// rather than leaving it to a default.
func newStreamMapping(scope constructs.Construct, fn awslambda.IFunction, source *string, s eventsource.Stream, onFailure awssqs.IQueue) awslambda.EventSourceMapping {
	mp := &awslambda.EventSourceMappingProps{
		Target:                  fn,
		EventSourceArn:          source,
		StartingPosition:        awslambda.StartingPosition(s.StartingPosition),
		BatchSize:               jsii.Number(float64(s.BatchSize)),
		BisectBatchOnError:      jsii.Bool(s.BisectOnError),
		ReportBatchItemFailures: jsii.Bool(s.ReportBatchItemFailures),
		ParallelizationFactor:   jsii.Number(float64(s.ParallelizationFactor)),
		OnFailure:               awslambdaeventsources.NewSqsDlq(onFailure),
	}
	if s.TumblingWindow > 0 {
		mp.TumblingWindow = seconds(s.TumblingWindow)
	}
	if s.MaxBatchingWindow > 0 {
		mp.MaxBatchingWindow = seconds(s.MaxBatchingWindow)
	}
	if s.MaxRetryAttempts != eventsource.Forever {
		mp.RetryAttempts = jsii.Number(float64(s.MaxRetryAttempts))
	}
	if s.MaxRecordAgeSeconds != eventsource.Forever {
		mp.MaxRecordAge = awscdk.Duration_Seconds(jsii.Number(float64(s.MaxRecordAgeSeconds)))
	}
	m := awslambda.NewEventSourceMapping(scope, jsii.String("Mapping"), mp)
	r := cfn(m).(awscdk.CfnResource)
	if s.MaxRetryAttempts == eventsource.Forever {
		r.AddPropertyOverride(jsii.String("MaximumRetryAttempts"), -1)
	}
	if s.MaxRecordAgeSeconds == eventsource.Forever {
		r.AddPropertyOverride(jsii.String("MaximumRecordAgeInSeconds"), -1)
	}
	return m
}

// newFailureQueue is a terminal queue for failure records: standard, TLS
// only, 14 days, SQS-managed encryption (it carries Lambda's failure records
// — ids, shard positions, error messages — not payment data, and services
// that write to it need no grant on a customer key).
func newFailureQueue(scope constructs.Construct, id string, p Protection, override func(*awssqs.QueueProps)) awssqs.Queue {
	qp := &awssqs.QueueProps{
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:      jsii.Bool(true),
		RetentionPeriod: seconds(DlqRetention),
		RemovalPolicy:   p.removalPolicy(),
	}
	if override != nil {
		override(qp)
	}
	return awssqs.NewQueue(scope, jsii.String(id), qp)
}
