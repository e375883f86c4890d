package oncepay

import (
	"fmt"
	"time"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awskms"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
)

const (
	// WorkerTimeout is the inbox worker's Lambda timeout (one number with
	// the local harness: cdk/oncepay/eventsource).
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
	// VisibilityTimeout of the queue; 0 is EventsVisibilityTimeout (6x
	// WorkerTimeout). An InboxWorker checks it against its function.
	VisibilityTimeout time.Duration
	// MaxReceiveCount: deliveries before a message moves to the DLQ; 0 is
	// EventsMaxReceiveCount.
	MaxReceiveCount int
	// Override sees the final props of the queue (with DeadLetterQueue set)
	// and of the DLQ before each is created; the DLQ is made first.
	Override    func(*awssqs.QueueProps)
	OverrideDlq func(*awssqs.QueueProps)
}

// EventQueue is the FIFO queue between the relay and the worker (group id =
// merchant, dedup id = event id), with a FIFO DLQ by redrive.
//
// NewEventQueue makes one. A queue made elsewhere (another stack, a platform
// team, awssqs.Queue_FromQueueArn) is a literal:
//
//	&oncepay.EventQueue{Queue: q, Key: key, VisibilityTimeout: 3 * time.Minute, MaxReceiveCount: 5}
//
// The constructs read what they can from the queue itself (a queue made in
// the same app: its key, visibility timeout, redrive policy) and refuse at
// synth what they can neither read nor find stated here.
type EventQueue struct {
	constructs.Construct
	Queue awssqs.IQueue
	// Dlq is the queue's dead-letter queue, watched by the worker's alarm;
	// nil for a queue made elsewhere means no DLQ alarm.
	Dlq awssqs.IQueue
	// Key encrypts the queue; nil takes Queue.EncryptionMasterKey(). A
	// queue made elsewhere with SQS-managed encryption says so with
	// SqsManagedEncryption instead (also for alias/aws/sqs, the AWS-managed
	// key, which needs no grant).
	Key                  awskms.IKey
	SqsManagedEncryption bool
	// VisibilityTimeout and MaxReceiveCount of a queue made elsewhere (a
	// template cannot read them); for a queue of this app they are read from
	// it, and a stated value that differs is refused.
	VisibilityTimeout time.Duration
	MaxReceiveCount   int
}

// NewEventQueue creates the events queue and DLQ.
func NewEventQueue(scope constructs.Construct, id string, props *EventQueueProps) *EventQueue {
	if props == nil {
		props = &EventQueueProps{}
	}
	c := &EventQueue{Construct: constructs.NewConstruct(scope, jsii.String(id))}
	c.Key = props.key(c.Construct)
	c.VisibilityTimeout = props.VisibilityTimeout
	if c.VisibilityTimeout == 0 {
		c.VisibilityTimeout = EventsVisibilityTimeout
	}
	c.MaxReceiveCount = props.MaxReceiveCount
	if c.MaxReceiveCount == 0 {
		c.MaxReceiveCount = EventsMaxReceiveCount
	}
	if c.VisibilityTimeout < 0 || c.VisibilityTimeout > 12*time.Hour || c.MaxReceiveCount < 1 || c.MaxReceiveCount > 1000 {
		panic(fmt.Sprintf("oncepay: EventQueueProps: visibility timeout %s not in 0..12h or max receive count %d not in 1..1000 (SQS's limits)", c.VisibilityTimeout, c.MaxReceiveCount))
	}

	dp := fifoQueueProps(props.Protection, c.Key, DlqRetention, c.VisibilityTimeout)
	if props.OverrideDlq != nil {
		props.OverrideDlq(dp)
	}
	dlq := awssqs.NewQueue(c.Construct, jsii.String("Dlq"), dp)
	c.Dlq = dlq
	suppress(cfn(dlq), "Serverless-SQSRedrivePolicy",
		"This is the dead-letter queue of the events queue; a DLQ behind it would only move parked events one hop further from the operator, who is alerted on its depth.")

	qp := fifoQueueProps(props.Protection, c.Key, EventsRetention, c.VisibilityTimeout)
	qp.DeadLetterQueue = &awssqs.DeadLetterQueue{Queue: dlq, MaxReceiveCount: jsii.Number(float64(c.MaxReceiveCount))}
	if props.Override != nil {
		props.Override(qp)
	}
	c.Queue = awssqs.NewQueue(c.Construct, jsii.String("Queue"), qp)
	// What the override left is what the queue is: its key (an override
	// may swap it), visibility and receive count.
	c.Key = c.Queue.EncryptionMasterKey()
	c.VisibilityTimeout, c.MaxReceiveCount = 0, 0
	c.resolve("EventQueue")
	return c
}

// resolve fills Key, VisibilityTimeout and MaxReceiveCount from the queue
// itself when it is a queue of this app, and panics, naming what to set,
// when the queue is not FIFO, a stated value contradicts the queue, or a
// value can be neither read nor found stated. what names the caller.
func (c *EventQueue) resolve(what string) {
	if c == nil || c.Queue == nil {
		panic(fmt.Sprintf("oncepay: %s: the events queue is nil: give an *EventQueue with Queue set (NewEventQueue, or a literal over a queue made elsewhere)", what))
	}
	if f := c.Queue.Fifo(); f == nil || !*f {
		panic(fmt.Sprintf("oncepay: %s: the events queue must be FIFO: the relay sends each event with its merchant as the message group and its id as the dedup id (for an imported queue, use its .fifo ARN)", what))
	}
	if c.Key == nil {
		c.Key = c.Queue.EncryptionMasterKey()
	}
	if made, ok := c.Queue.(awssqs.Queue); ok && c.Dlq == nil && made.DeadLetterQueue() != nil {
		c.Dlq = made.DeadLetterQueue().Queue // for the DLQ alarm
	}
	q, inApp := cfn(c.Queue).(awssqs.CfnQueue)
	if !inApp {
		switch {
		case c.Key == nil && !c.SqsManagedEncryption:
			panic(fmt.Sprintf("oncepay: %s: the events queue was made elsewhere and its key is unknown: set EventQueue.Key to its KMS key (or import it with awssqs.Queue_FromQueueAttributes and KeyArn), or SqsManagedEncryption if it has none; without it the functions get no kms grant and fail at run time", what))
		case c.VisibilityTimeout <= 0:
			panic(fmt.Sprintf("oncepay: %s: the events queue was made elsewhere: state its visibility timeout in EventQueue.VisibilityTimeout (checked against the worker's timeout)", what))
		case c.MaxReceiveCount <= 0:
			panic(fmt.Sprintf("oncepay: %s: the events queue was made elsewhere: state its redrive policy's maxReceiveCount in EventQueue.MaxReceiveCount (a queue without a DLQ redelivers a poison event until it expires)", what))
		}
		return
	}
	real := 30 * time.Second // SQS's default
	if v := q.VisibilityTimeout(); v != nil {
		if *awscdk.Token_IsUnresolved(v) {
			panic(fmt.Sprintf("oncepay: %s: the events queue's visibility timeout is a token (a parameter?): the 6x check needs a number", what))
		}
		real = time.Duration(*v) * time.Second
	}
	if c.VisibilityTimeout != 0 && c.VisibilityTimeout != real {
		panic(fmt.Sprintf("oncepay: %s: EventQueue.VisibilityTimeout says %s but the queue has %s: leave it zero for a queue of this app", what, c.VisibilityTimeout, real))
	}
	c.VisibilityTimeout = real
	count := 0
	if m, ok := q.RedrivePolicy().(map[string]any); ok {
		if n, ok := m["maxReceiveCount"].(float64); ok && !*awscdk.Token_IsUnresolved(n) {
			count = int(n)
		}
	}
	if count <= 0 {
		panic(fmt.Sprintf("oncepay: %s: the events queue has no redrive policy with a literal maxReceiveCount: give it a DLQ (awssqs.QueueProps.DeadLetterQueue), or a poison event is redelivered until it expires", what))
	}
	if c.MaxReceiveCount != 0 && c.MaxReceiveCount != count {
		panic(fmt.Sprintf("oncepay: %s: EventQueue.MaxReceiveCount says %d but the queue's redrive policy has %d: leave it zero for a queue of this app", what, c.MaxReceiveCount, count))
	}
	c.MaxReceiveCount = count
}

// fifoQueueProps: dedup ids come from the relay (the event id), never from the
// body, so content-based dedup is off and stated.
func fifoQueueProps(p Protection, key awskms.IKey, retention, visibility time.Duration) *awssqs.QueueProps {
	return &awssqs.QueueProps{
		Fifo:                      jsii.Bool(true),
		ContentBasedDeduplication: jsii.Bool(false),
		VisibilityTimeout:         seconds(visibility),
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

// PushTopic carries the worker's notifications to devices. NewPushTopic
// makes one; a topic made elsewhere is a literal, &oncepay.PushTopic{Topic:
// t, Key: key} (Key nil takes Topic.MasterKey(); an unencrypted topic says
// Unencrypted).
type PushTopic struct {
	constructs.Construct
	Topic       awssns.ITopic
	Key         awskms.IKey
	Unencrypted bool
}

// resolve takes the key from the topic and refuses a topic whose key is
// unknown (the publisher would get no kms grant).
func (c *PushTopic) resolve(what string) {
	if c == nil || c.Topic == nil {
		panic(fmt.Sprintf("oncepay: %s: the push topic is nil: give an *PushTopic with Topic set", what))
	}
	if c.Key == nil {
		c.Key = c.Topic.MasterKey()
	}
	if _, inApp := cfn(c.Topic).(awssns.CfnTopic); !inApp && c.Key == nil && !c.Unencrypted {
		panic(fmt.Sprintf("oncepay: %s: the push topic was made elsewhere and its key is unknown: set PushTopic.Key (or Unencrypted if it has none)", what))
	}
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
	t := awssns.NewTopic(c.Construct, jsii.String("Topic"), tp)
	t.ApplyRemovalPolicy(props.removalPolicy())
	c.Topic = t
	c.Key = t.MasterKey() // the override's, if it swapped it
	return c
}
