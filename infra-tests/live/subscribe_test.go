package live

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"

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
