package harness_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// Await's long poll takes a push sent while it waits, deletes it, and a
// poll that finds nothing returns nothing rather than an error.
func TestPushQueueAwaitTakesAPushAndDeletesIt(t *testing.T) {
	client := testenv.SQS(t)
	q := testenv.NewStandardQueue(t, client)
	pushes := harness.NewPushQueue(client, q.URL)
	ctx := context.Background()

	if got, err := pushes.Await(ctx, time.Second); err != nil || len(got) != 0 {
		t.Fatalf("empty queue: %v, %v", got, err)
	}
	want := notify.Data{ReplaceID: "pay_1", PaymentID: "pay_1", EventID: "pay_1:SUCCEEDED", State: "SUCCEEDED"}
	body, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	// Sent while Await is (most likely) already waiting: either way it must
	// come back from this one call.
	wg.Go(func() {
		if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String(string(body))}); err != nil {
			t.Error(err)
		}
	})
	var got []notify.Data
	for deadline := time.Now().Add(20 * time.Second); len(got) == 0 && time.Now().Before(deadline); {
		if got, err = pushes.Await(ctx, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("Await = %+v, want [%+v]", got, want)
	}
	if left, err := pushes.Collect(ctx); err != nil || len(left) != 0 {
		t.Fatalf("after Await the queue still holds %v (%v)", left, err)
	}
}

// lostDelete drops the first DeleteMessageBatch: the received messages
// come back when their visibility times out, as after a lost reply.
type lostDelete struct {
	*sqs.Client
	dropped bool
}

func (l *lostDelete) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	if !l.dropped {
		l.dropped = true
		return &sqs.DeleteMessageBatchOutput{}, nil
	}
	return l.Client.DeleteMessageBatch(ctx, in, opts...)
}

// A message that is no push does not hide the pushes of its batch (all are
// returned, with an error naming it, and all are deleted), and a message
// handed out again is counted once.
func TestPushQueueReturnsEveryPushOnceAndDeletesWhatIsNoPush(t *testing.T) {
	client := testenv.SQS(t)
	q := testenv.NewQueueWith(t, client, map[string]string{"VisibilityTimeout": "1"})
	ctx := context.Background()
	send := func(body string) {
		if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	send(`{"not":"a push"}`)
	for _, id := range []string{"pay_1", "pay_2"} {
		b, _ := json.Marshal(notify.Data{ReplaceID: id, PaymentID: id, EventID: id + ":SUCCEEDED", State: "SUCCEEDED"})
		send(string(b))
	}
	api := &lostDelete{Client: client}
	pushes := harness.NewPushQueue(api, q.URL)
	seen := map[string]int{}
	var errs int
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline) && (len(seen) < 2 || !api.dropped); {
		got, err := pushes.Await(ctx, time.Second)
		if err != nil {
			errs++
		}
		for _, d := range got {
			seen[d.PaymentID]++
		}
	}
	// The lost delete's messages come back after a second: read them again.
	time.Sleep(1500 * time.Millisecond)
	for range 3 {
		got, _ := pushes.Await(ctx, time.Second)
		for _, d := range got {
			seen[d.PaymentID]++
		}
	}
	if seen["pay_1"] != 1 || seen["pay_2"] != 1 || errs == 0 {
		t.Errorf("pushes %v (want each once), %d receives with an error (want the non-push named)", seen, errs)
	}
	left, err := harness.NewPushQueue(client, q.URL).Collect(ctx)
	if err != nil || len(left) != 0 {
		t.Errorf("left in the queue: %v, %v", left, err)
	}
}
