package oncepay

import (
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/internal/eventsource"
)

const (
	// WorkerTimeout is the inbox worker's Lambda timeout (one number with
	// the local harness: internal/eventsource).
	WorkerTimeout = eventsource.WorkerTimeout
	// EventsVisibilityTimeout is 6x the worker timeout, as AWS advises for an
	// SQS event source: the poller may hold a batch while it retries a
	// throttled invoke, and a message must not reappear while a worker still
	// has it (its redelivery is safe, but it burns a receive count).
	EventsVisibilityTimeout = 6 * WorkerTimeout
	// EventsMaxReceiveCount: deliveries before a message parks in the DLQ.
	// Five rides out a short ledger outage; a poison event stops soon after.
	EventsMaxReceiveCount = 5
	// EventsRetention: how long an event waits for a worker (SQS's default,
	// stated so it is read next to the DLQ's).
	EventsRetention = 4 * 24 * time.Hour
	// DlqRetention is SQS's maximum: time for an operator to look and redrive.
	// A FIFO DLQ restarts the clock when a message moves in.
	DlqRetention = 14 * 24 * time.Hour
)

func seconds(d time.Duration) awscdk.Duration {
	return awscdk.Duration_Seconds(jsii.Number(d.Seconds()))
}

// EventQueueProps configures the events queue and its DLQ.
type EventQueueProps struct {
	Protection
	// Override sees the final props of the queue (with DeadLetterQueue set)
	// and of the DLQ before each is created; the DLQ is made first.
	Override    func(*awssqs.QueueProps)
	OverrideDlq func(*awssqs.QueueProps)
}

// EventQueue is the FIFO queue between the relay and the worker (group id =
// merchant, dedup id = event id), with a FIFO DLQ by redrive.
type EventQueue struct {
	constructs.Construct
	Queue awssqs.Queue
	Dlq   awssqs.Queue
	Key   awskms.IKey
}

// NewEventQueue creates the events queue and DLQ.
func NewEventQueue(scope constructs.Construct, id string, props *EventQueueProps) *EventQueue {
	if props == nil {
		props = &EventQueueProps{}
	}
	c := &EventQueue{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	c.Key = props.key(c.Construct)

	dp := fifoQueueProps(props.Protection, c.Key, DlqRetention)
	if props.OverrideDlq != nil {
		props.OverrideDlq(dp)
	}
	c.Dlq = awssqs.NewQueue(c.Construct, jsii.String("Dlq"), dp)
	suppress(cfn(c.Dlq), "Serverless-SQSRedrivePolicy",
		"This is the dead-letter queue of the events queue; a DLQ behind it would only move parked events one hop further from the operator, who is alerted on its depth.")

	qp := fifoQueueProps(props.Protection, c.Key, EventsRetention)
	qp.DeadLetterQueue = &awssqs.DeadLetterQueue{Queue: c.Dlq, MaxReceiveCount: jsii.Number(EventsMaxReceiveCount)}
	if props.Override != nil {
		props.Override(qp)
	}
	c.Queue = awssqs.NewQueue(c.Construct, jsii.String("Queue"), qp)
	return c
}

// fifoQueueProps: dedup ids come from the relay (the event id), never from the
// body, so content-based dedup is off and stated.
func fifoQueueProps(p Protection, key awskms.IKey, retention time.Duration) *awssqs.QueueProps {
	return &awssqs.QueueProps{
		Fifo:                      jsii.Bool(true),
		ContentBasedDeduplication: jsii.Bool(false),
		VisibilityTimeout:         seconds(EventsVisibilityTimeout),
		RetentionPeriod:           seconds(retention),
		Encryption:                awssqs.QueueEncryption_KMS,
		EncryptionMasterKey:       key,
		EnforceSSL:                jsii.Bool(true),
		RemovalPolicy:             p.removalPolicy(),
	}
}

// PushTopicProps configures the push topic.
type PushTopicProps struct {
	Protection
	Override func(*awssns.TopicProps)
}

// PushTopic carries the worker's notifications to devices.
type PushTopic struct {
	constructs.Construct
	Topic awssns.Topic
	Key   awskms.IKey
}

// NewPushTopic creates the topic with KMS and a TLS-only policy.
func NewPushTopic(scope constructs.Construct, id string, props *PushTopicProps) *PushTopic {
	if props == nil {
		props = &PushTopicProps{}
	}
	c := &PushTopic{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	c.Key = props.key(c.Construct)
	tp := &awssns.TopicProps{
		MasterKey:  c.Key,
		EnforceSSL: jsii.Bool(true),
	}
	if props.Override != nil {
		props.Override(tp)
	}
	c.Topic = awssns.NewTopic(c.Construct, jsii.String("Topic"), tp)
	c.Topic.ApplyRemovalPolicy(props.removalPolicy())
	return c
}
