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
