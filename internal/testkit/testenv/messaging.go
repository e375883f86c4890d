package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncepay/oncepay/internal/awsclient"
	"github.com/oncepay/oncepay/internal/awsclient/snsclient"
	"github.com/oncepay/oncepay/internal/awsclient/sqsclient"
	"github.com/oncepay/oncepay/internal/awsclient/streamsclient"
)

func awsConfig(t testing.TB) aws.Config {
	t.Helper()
	AWS(t)
	cfg, err := awsclient.Config(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// DynamoDBStreams returns a client for the local cloud's DynamoDB Streams.
func DynamoDBStreams(t testing.TB) *dynamodbstreams.Client {
	t.Helper()
	return streamsclient.New(awsConfig(t))
}

// SQS returns a client for the local cloud's SQS.
func SQS(t testing.TB) *sqs.Client {
	t.Helper()
	return sqsclient.New(awsConfig(t))
}

// SNS returns a client for the local cloud's SNS.
func SNS(t testing.TB) *sns.Client {
	t.Helper()
	return snsclient.New(awsConfig(t))
}

// NewOutboxTable creates a table of the test's own shaped like the
// template's outbox (partition key event_id of type S, a NEW_IMAGE stream,
// TTL on expires_at), deletes it when the test ends, and returns its name
// and stream ARN.
func NewOutboxTable(t testing.TB, db *dynamodb.Client) (name, streamArn string) {
	t.Helper()
	ctx := context.Background()
	name = "t-outbox-" + RandomID(6)
	out, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            &name,
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("event_id"), KeyType: types.KeyTypeHash}},
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("event_id"), AttributeType: types.ScalarAttributeTypeS}},
		BillingMode:          types.BillingModePayPerRequest,
		StreamSpecification:  &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewImage},
	})
	if err != nil {
		t.Fatalf("create outbox table %s: %v", name, err)
	}
	t.Cleanup(func() {
		_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name})
	})
	if _, err := db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               &name,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String("expires_at"), Enabled: aws.Bool(true)},
	}); err != nil {
		t.Fatalf("enable TTL on %s: %v", name, err)
	}
	return name, aws.ToString(out.TableDescription.LatestStreamArn)
}

// Queue is a queue of the test's own.
type Queue struct {
	URL, Arn string
	DLQ      *Queue // the dead-letter queue its redrive policy names, if any
}

// NewFIFOQueue creates a FIFO queue shaped like the template's events queue
// (content-based dedup off) with a FIFO DLQ that takes a message after
// maxReceiveCount receives, and deletes both when the test ends.
func NewFIFOQueue(t testing.TB, client *sqs.Client, visibility time.Duration, maxReceiveCount int) Queue {
	t.Helper()
	base := "t-events-" + RandomID(6)
	dlq := createQueue(t, client, base+"-dlq.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "false"})
	policy, err := json.Marshal(map[string]string{"deadLetterTargetArn": dlq.Arn, "maxReceiveCount": strconv.Itoa(maxReceiveCount)})
	if err != nil {
		t.Fatal(err)
	}
	q := createQueue(t, client, base+".fifo", map[string]string{
		"FifoQueue":                 "true",
		"ContentBasedDeduplication": "false",
		"VisibilityTimeout":         strconv.Itoa(int(visibility / time.Second)),
		"RedrivePolicy":             string(policy),
	})
	q.DLQ = &dlq
	return q
}

// NewStandardQueue creates a standard queue, deleted when the test ends.
func NewStandardQueue(t testing.TB, client *sqs.Client) Queue {
	t.Helper()
	return createQueue(t, client, "t-std-"+RandomID(6), nil)
}

func createQueue(t testing.TB, client *sqs.Client, name string, attrs map[string]string) Queue {
	t.Helper()
	ctx := context.Background()
	out, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &name, Attributes: attrs})
	if err != nil {
		t.Fatalf("create queue %s: %v", name, err)
	}
	url := aws.ToString(out.QueueUrl)
	t.Cleanup(func() {
		_, _ = client.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: &url})
	})
	qa, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: &url, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn},
	})
	if err != nil {
		t.Fatalf("arn of queue %s: %v", name, err)
	}
	return Queue{URL: url, Arn: qa.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]}
}

// NewTopic creates a standard SNS topic, deleted when the test ends.
func NewTopic(t testing.TB, client *sns.Client) string {
	t.Helper()
	name := "t-push-" + RandomID(6)
	out, err := client.CreateTopic(context.Background(), &sns.CreateTopicInput{Name: &name})
	if err != nil {
		t.Fatalf("create topic %s: %v", name, err)
	}
	arn := aws.ToString(out.TopicArn)
	t.Cleanup(func() {
		_, _ = client.DeleteTopic(context.Background(), &sns.DeleteTopicInput{TopicArn: &arn})
	})
	return arn
}

// SubscribeQueue subscribes a queue to a topic, with raw message delivery
// when raw is set, and unsubscribes it when the test ends (before the
// queue, made earlier, is deleted): moto fails every Publish to a topic
// that still has a subscription to a deleted queue, so a test's queue left
// on a shared topic (the live stack's push topic) would break its pushes.
func SubscribeQueue(t testing.TB, client *sns.Client, topicArn, queueArn string, raw bool) {
	t.Helper()
	in := &sns.SubscribeInput{TopicArn: &topicArn, Protocol: aws.String("sqs"), Endpoint: &queueArn, ReturnSubscriptionArn: true}
	if raw {
		in.Attributes = map[string]string{"RawMessageDelivery": "true"}
	}
	out, err := client.Subscribe(context.Background(), in)
	if err != nil {
		t.Fatalf("subscribe %s to %s: %v", queueArn, topicArn, err)
	}
	t.Cleanup(func() {
		if _, err := client.Unsubscribe(context.Background(), &sns.UnsubscribeInput{SubscriptionArn: out.SubscriptionArn}); err != nil {
			t.Errorf("unsubscribe %s from %s: %v", queueArn, topicArn, err)
		}
	})
}

// Messages receives and deletes every message now in the queue.
func Messages(t testing.TB, client *sqs.Client, url string) []sqstypes.Message {
	t.Helper()
	var all []sqstypes.Message
	for {
		out, err := client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: &url, MaxNumberOfMessages: 10,
			MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll},
		})
		if err != nil {
			t.Fatalf("receive from %s: %v", url, err)
		}
		if len(out.Messages) == 0 {
			return all
		}
		for _, m := range out.Messages {
			all = append(all, m)
			if _, err := client.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatalf("delete from %s: %v", url, err)
			}
		}
	}
}

// String renders a queue for failure messages.
func (q Queue) String() string { return fmt.Sprintf("queue %s", q.URL) }

// AWSConfig is the SDK configuration for the local cloud (moto, DynamoDB
// Local), for code that takes an aws.Config rather than a client.
func AWSConfig(t testing.TB) aws.Config {
	t.Helper()
	return awsConfig(t)
}

// NewQueueWith creates a standard queue with attrs (VisibilityTimeout, ...),
// deleted when the test ends.
func NewQueueWith(t testing.TB, client *sqs.Client, attrs map[string]string) Queue {
	t.Helper()
	return createQueue(t, client, "t-std-"+RandomID(6), attrs)
}
