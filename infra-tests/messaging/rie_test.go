package messaging_test

import (
	"encoding/json"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/oncepay/oncepay/cdk/oncepay/stackenv"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// The relay and worker bootstraps that deploy, run under the Lambda Runtime
// Interface Emulator on one event each: the relay turns a stream record into
// a FIFO message with the item's ids, and the worker turns that message into
// m1's credit and a push.
func TestRelayAndWorkerBootstrapsUnderTheLambdaRuntimeInterfaceEmulator(t *testing.T) {
	env := testenv.AWS(t)
	w := newWorld(t, options{})
	common := []string{
		"AWS_REGION=" + env.Get("AWS_REGION"),
		"AWS_ENDPOINT_URL=" + env.Get("AWS_ENDPOINT_URL"),
		"AWS_ENDPOINT_URL_DYNAMODB=" + env.Get("AWS_ENDPOINT_URL_DYNAMODB"),
	}
	ev7 := pay("pay_7", "m1", inbox.Succeeded, 3000)
	payload, err := ev7.Marshal()
	if err != nil {
		t.Fatal(err)
	}

	relayFn := testenv.Lambda(t, "relay", append(common, stackenv.EventsQueueURL+"="+w.queue.URL))
	var stream events.DynamoDBEvent
	stream.Records = []events.DynamoDBEventRecord{{
		EventName: "INSERT", EventSource: "aws:dynamodb", AWSRegion: env.Get("AWS_REGION"),
		Change: events.DynamoDBStreamRecord{SequenceNumber: "100", NewImage: map[string]events.DynamoDBAttributeValue{
			"event_id":    events.NewStringAttribute(ev7.EventID),
			"merchant_id": events.NewStringAttribute("m1"),
			"payload":     events.NewStringAttribute(string(payload)),
			"expires_at":  events.NewNumberAttribute("1999999999"),
		}},
	}}
	var relayResp events.DynamoDBEventResponse
	if b := relayFn(stream); json.Unmarshal(b, &relayResp) != nil || len(relayResp.BatchItemFailures) != 0 {
		t.Fatalf("relay answered %s", b)
	}
	msgs := testenv.Messages(t, w.sqs, w.queue.URL)
	if len(msgs) != 1 || msgs[0].Attributes["MessageDeduplicationId"] != ev7.EventID || msgs[0].Attributes["MessageGroupId"] != "m1" {
		t.Fatalf("queue holds %+v, want ev_7 in group m1", msgs)
	}

	pool, dsn := testenv.Ledger(t) // the worker's own database, at this tree's schema
	// The sandbox's topic fallback: the watched topic is where a device-less push goes.
	workerFn := testenv.Lambda(t, "worker", append(common, stackenv.LedgerDSN+"="+dsn, stackenv.PushTopicArn+"="+w.topic, notify.EnvTopicFallback+"=true"))
	sqsEv := events.SQSEvent{Records: []events.SQSMessage{{
		MessageId: aws.ToString(msgs[0].MessageId), Body: aws.ToString(msgs[0].Body), EventSource: "aws:sqs",
		Attributes: map[string]string{"MessageGroupId": "m1", "ApproximateReceiveCount": "1"},
	}}}
	var workerResp events.SQSEventResponse
	for range 2 { // the second invocation is a redelivery: nothing more
		if b := workerFn(sqsEv); json.Unmarshal(b, &workerResp) != nil || len(workerResp.BatchItemFailures) != 0 {
			t.Fatalf("worker answered %s", b)
		}
	}
	var credits, sent int
	if err := pool.QueryRow(w.ctx, `SELECT (SELECT count(*) FROM credits WHERE event_id = $1), (SELECT count(*) FROM notif WHERE state = 'SENT')`, ev7.EventID).Scan(&credits, &sent); err != nil {
		t.Fatal(err)
	}
	if credits != 1 || sent != 1 {
		t.Fatalf("%d credits, %d notifications sent; want 1 and 1", credits, sent)
	}
	pushes, err := harness.NewPushQueue(w.sqs, w.watch.URL).Collect(w.ctx)
	if err != nil || len(pushes) != 1 || pushes[0].ReplaceID != "pay_7" {
		t.Fatalf("pushes = %+v, %v", pushes, err)
	}
}
