package live

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// The benchmark's own push queue, once its run is over, leaves the topic it
// was subscribed to publishable: moto fails every Publish to a topic with a
// subscription to a deleted queue, so a queue left subscribed to the live
// stack's push topic would stop every push of the stack.
func TestOwnPushQueueLeavesTheTopicPublishable(t *testing.T) {
	testenv.AWS(t)
	snsc, sqsc := testenv.SNS(t), testenv.SQS(t)
	topic := testenv.NewTopic(t, snsc)
	t.Run("a run with its own queue", func(t *testing.T) {
		q := testenv.NewStandardQueue(t, sqsc)
		testenv.SubscribeQueue(t, snsc, topic, q.Arn, true)
	})
	if _, err := snsc.Publish(context.Background(), &sns.PublishInput{TopicArn: &topic, Message: aws.String(`{"x":1}`)}); err != nil {
		t.Fatalf("publish after the run's queue is gone: %v", err)
	}
	// A topic deleted before the unsubscribe (a test that made its own
	// topic later) must not fail the cleanup either.
	t.Run("a topic gone first", func(t *testing.T) {
		other := testenv.NewTopic(t, snsc)
		q := testenv.NewStandardQueue(t, sqsc)
		testenv.SubscribeQueue(t, snsc, other, q.Arn, true)
		if _, err := snsc.DeleteTopic(context.Background(), &sns.DeleteTopicInput{TopicArn: &other}); err != nil {
			t.Fatal(err)
		}
	})
}

// A run killed before its cleanup (go test's -timeout panics past it) left
// its queue's subscription behind; the next run drops every subscription of
// the topic whose queue is gone before it subscribes its own, so the topic
// publishes again.
func TestARunDropsTheSubscriptionAKilledRunLeft(t *testing.T) {
	testenv.AWS(t)
	snsc, sqsc := testenv.SNS(t), testenv.SQS(t)
	topic := testenv.NewTopic(t, snsc)
	keep := testenv.NewStandardQueue(t, sqsc)
	testenv.SubscribeQueue(t, snsc, topic, keep.Arn, true)
	ctx := context.Background()
	for range 2 { // the killed runs: subscribed, queue deleted, no unsubscribe
		q, err := sqsc.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("t-std-" + testenv.RandomID(6))})
		if err != nil {
			t.Fatal(err)
		}
		qa, err := sqsc.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := snsc.Subscribe(ctx, &sns.SubscribeInput{TopicArn: &topic, Protocol: aws.String("sqs"), Endpoint: aws.String(qa.Attributes["QueueArn"])}); err != nil {
			t.Fatal(err)
		}
		if _, err := sqsc.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := snsc.Publish(ctx, &sns.PublishInput{TopicArn: &topic, Message: aws.String(`{}`)}); err == nil {
		t.Fatal("moto publishes to a topic subscribed to a deleted queue: the scenario is gone")
	}
	testenv.Messages(t, sqsc, keep.URL) // moto delivered the failed publish to the live queue first
	if n, err := testenv.DropDeadSubscriptions(ctx, snsc, sqsc, topic); err != nil || n != 2 {
		t.Fatalf("dropped %d (%v), want the 2 dead ones", n, err)
	}
	if _, err := snsc.Publish(ctx, &sns.PublishInput{TopicArn: &topic, Message: aws.String(`{}`)}); err != nil {
		t.Fatalf("publish after the drop: %v", err)
	}
	if msgs := testenv.Messages(t, sqsc, keep.URL); len(msgs) != 1 {
		t.Errorf("the live subscription got %d messages, want 1: it was dropped too", len(msgs))
	}
}
