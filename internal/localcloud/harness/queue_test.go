package harness_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

func send(t *testing.T, client *sqs.Client, url, group, body string) {
	t.Helper()
	if _, err := client.SendMessage(context.Background(), &sqs.SendMessageInput{
		QueueUrl: &url, MessageBody: &body, MessageGroupId: &group, MessageDeduplicationId: aws.String(body),
	}); err != nil {
		t.Fatal(err)
	}
}

func queueSettings(batch int) eventsource.Queue {
	s := eventsource.Default().Worker
	s.BatchSize = batch
	return s
}

// bodies is a queue handler that records the bodies of each batch and fails
// the bodies fail names.
type bodies struct {
	batches [][]string
	recv    map[string][]string // body -> ApproximateReceiveCount per delivery
	fail    func(body string) bool
	err     error
}

func (b *bodies) handle(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	var batch []string
	var resp events.SQSEventResponse
	if b.recv == nil {
		b.recv = map[string][]string{}
	}
	for _, m := range ev.Records {
		batch = append(batch, m.Body)
		b.recv[m.Body] = append(b.recv[m.Body], m.Attributes["ApproximateReceiveCount"])
		if b.fail != nil && b.fail(m.Body) {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
		}
	}
	b.batches = append(b.batches, batch)
	return resp, b.err
}

func TestQueuePartialFailureDeletesOnlyTheOthers(t *testing.T) {
	client := testenv.SQS(t)
	q := testenv.NewFIFOQueue(t, client, 30*time.Second, 5)
	for _, m := range []string{"a", "b", "c"} {
		send(t, client, q.URL, "g-"+m, m)
	}
	h := &bodies{fail: func(b string) bool { return b == "b" }}
	p, err := harness.NewQueuePoller(client, h.handle, harness.QueueConfig{QueueURL: q.URL, QueueArn: q.Arn, Settings: queueSettings(10), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Expire(ctx); err != nil || n != 1 {
		t.Fatalf("Expire = %d, %v; want the one failed message released", n, err)
	}
	h.fail = nil
	if _, err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if want := "[[a b c] [b]]"; fmt.Sprint(h.batches) != want {
		t.Fatalf("batches = %v, want %s", h.batches, want)
	}
	if got := h.recv["b"]; fmt.Sprint(got) != "[1 2]" {
		t.Fatalf("b's receive counts = %v, want [1 2]", got)
	}
	if s := p.Stats(); s.Deleted != 3 || s.ItemFailures != 1 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestQueueFunctionErrorDeletesNothing(t *testing.T) {
	client := testenv.SQS(t)
	q := testenv.NewFIFOQueue(t, client, 30*time.Second, 5)
	send(t, client, q.URL, "g1", "a")
	send(t, client, q.URL, "g2", "b")
	h := &bodies{err: errors.New("crash")}
	p, err := harness.NewQueuePoller(client, h.handle, harness.QueueConfig{QueueURL: q.URL, Settings: queueSettings(10), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Expire(ctx); err != nil || n != 2 {
		t.Fatalf("Expire = %d, %v; want both messages still in flight", n, err)
	}
	if s := p.Stats(); s.Deleted != 0 || s.FunctionErrors != 1 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestQueueFIFOGroupInFlightHoldsItsGroupButNotOthers(t *testing.T) {
	client := testenv.SQS(t)
	q := testenv.NewFIFOQueue(t, client, 30*time.Second, 5)
	send(t, client, q.URL, "A", "a1")
	send(t, client, q.URL, "A", "a2")
	send(t, client, q.URL, "B", "b1")
	h := &bodies{fail: func(b string) bool { return b == "a1" }}
	p, err := harness.NewQueuePoller(client, h.handle, harness.QueueConfig{QueueURL: q.URL, Settings: queueSettings(1), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if want := "[[a1] [b1]]"; fmt.Sprint(h.batches) != want {
		t.Fatalf("batches = %v, want %s: a2 waits behind a1, b1 does not", h.batches, want)
	}
	h.fail = nil
	if _, err := p.Expire(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if want := "[[a1] [b1] [a1] [a2]]"; fmt.Sprint(h.batches) != want {
		t.Fatalf("batches = %v, want %s", h.batches, want)
	}
}

// The redrive to the DLQ is moto's own (RedrivePolicy), not the harness's:
// this test is what says moto honours it.
func TestMotoMovesAMessageToTheDLQAfterMaxReceiveCount(t *testing.T) {
	client := testenv.SQS(t)
	q := testenv.NewFIFOQueue(t, client, 30*time.Second, 5)
	send(t, client, q.URL, "g", "poison")
	h := &bodies{fail: func(string) bool { return true }}
	p, err := harness.NewQueuePoller(client, h.handle, harness.QueueConfig{QueueURL: q.URL, Settings: queueSettings(10), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 7 {
		if _, err := p.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Expire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := fmt.Sprint(h.recv["poison"]); got != "[1 2 3 4 5]" {
		t.Fatalf("deliveries' receive counts = %s, want [1 2 3 4 5]", got)
	}
	dead := testenv.Messages(t, client, q.DLQ.URL)
	if len(dead) != 1 || aws.ToString(dead[0].Body) != "poison" {
		t.Fatalf("DLQ holds %d messages, want the poison one", len(dead))
	}
	if rest := testenv.Messages(t, client, q.URL); len(rest) != 0 {
		t.Fatalf("queue still holds %d messages", len(rest))
	}
}
