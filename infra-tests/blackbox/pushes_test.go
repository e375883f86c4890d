package blackbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// push is one push the suite's queue received, with when it arrived.
type push struct {
	notify.Data
	At time.Time
}

// pushLog is the suite's own subscriber of the push topic: a standard queue
// of its own (so it never takes a message from the local phone or another
// run), read by one long-polling reader for every case, which files each
// push under its payment id.
type pushLog struct {
	mu        sync.Mutex
	byPayment map[string][]push
	errs      int
	lastErr   error
	// checked is what a case concluded about a payment's pushes: how many
	// it saw and when. The suite looks again after its last case (lateCopies):
	// a second send can come long after a case's short wait (a redelivery
	// after the queue's visibility timeout, the notification sweep).
	checked map[string]checkedPushes
}

type checkedPushes struct {
	n  int
	at time.Time
}

// readErrors is how many receives failed.
func (l *pushLog) readErrors() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.errs
}

// settled records that a case saw n pushes about paymentID and checked them.
func (l *pushLog) settled(paymentID string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.checked[paymentID] = checkedPushes{n: n, at: time.Now()}
}

// lateCopies waits until the last checked payment has been watched for at
// least minWatch, then returns every checked payment that received pushes
// after its case had counted them, and how long the payments were watched
// after their checks (the shortest and the median).
func (l *pushLog) lateCopies(minWatch time.Duration) (late []string, checked int, shortest, median time.Duration) {
	l.mu.Lock()
	var last time.Time
	for _, c := range l.checked {
		if c.at.After(last) {
			last = c.at
		}
	}
	l.mu.Unlock()
	if wait := time.Until(last.Add(minWatch)); !last.IsZero() && wait > 0 {
		time.Sleep(wait)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	var watched []time.Duration
	for pid, c := range l.checked {
		if got := len(l.byPayment[pid]); got != c.n {
			late = append(late, fmt.Sprintf("%s: %d pushes when checked, %d now", pid, c.n, got))
		}
		watched = append(watched, now.Sub(c.at))
	}
	if len(watched) == 0 {
		return late, 0, 0, 0
	}
	slices.Sort(watched)
	return late, len(watched), watched[0], watched[len(watched)/2]
}

// subscribe makes the queue, subscribes it to topicArn and starts the
// reader; TestMain's closers stop it and delete both.
func subscribe(ctx context.Context, sqsc *sqs.Client, snsc *sns.Client, topicArn string) (*pushLog, error) {
	// A subscription a killed run left behind makes moto refuse every
	// publish to the topic: drop those first.
	if _, err := testenv.DropDeadSubscriptions(ctx, snsc, sqsc, topicArn); err != nil {
		return nil, err
	}
	name := "oncepay-blackbox-" + testenv.RandomID(6)
	// A short visibility timeout: a receive whose reply is lost (CI saw
	// two pushes go missing with a receive's reply) hands its pushes out
	// again two seconds later, not after SQS's default 30 s, past the
	// case's look. The reader counts each SQS message once.
	q, err := sqsc.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name),
		Attributes: map[string]string{string(sqstypes.QueueAttributeNameVisibilityTimeout): "2"}})
	if err != nil {
		return nil, fmt.Errorf("create the suite's push queue: %w", err)
	}
	url := aws.ToString(q.QueueUrl)
	closers = append(closers, func() {
		_, _ = sqsc.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: &url})
	})
	attrs, err := sqsc.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		return nil, fmt.Errorf("push queue ARN: %w", err)
	}
	arn := attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	// On AWS the topic may deliver only where the queue's policy lets it
	// (moto ignores the policy).
	policy := fmt.Sprintf(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"sns.amazonaws.com"},`+
		`"Action":"sqs:SendMessage","Resource":%q,"Condition":{"ArnEquals":{"aws:SourceArn":%q}}}]}`, arn, topicArn)
	if _, err := sqsc.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: &url,
		Attributes: map[string]string{"Policy": policy}}); err != nil {
		return nil, fmt.Errorf("push queue policy: %w", err)
	}
	sub, err := snsc.Subscribe(ctx, &sns.SubscribeInput{TopicArn: aws.String(topicArn), Protocol: aws.String("sqs"),
		Endpoint: aws.String(arn), Attributes: map[string]string{"RawMessageDelivery": "true"}, ReturnSubscriptionArn: true})
	if err != nil {
		return nil, fmt.Errorf("subscribe the suite's queue to the push topic: %w", err)
	}
	closers = append(closers, func() {
		_, _ = snsc.Unsubscribe(context.Background(), &sns.UnsubscribeInput{SubscriptionArn: sub.SubscriptionArn})
	})

	l := &pushLog{byPayment: map[string][]push{}, checked: map[string]checkedPushes{}}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go l.read(rctx, harness.NewPushQueue(sqsc, url), done)
	closers = append(closers, func() { stop(); <-done })
	return l, nil
}

// read long-polls until ctx ends. A receive that fails is counted and
// retried: the cases then see a push late, never a push lost.
func (l *pushLog) read(ctx context.Context, q *harness.PushQueue, done chan<- struct{}) {
	defer close(done)
	for ctx.Err() == nil {
		got, err := q.Await(ctx, 2*time.Second)
		now := time.Now()
		l.mu.Lock()
		for _, d := range got {
			l.byPayment[d.PaymentID] = append(l.byPayment[d.PaymentID], push{Data: d, At: now})
		}
		if err != nil && ctx.Err() == nil {
			l.errs++
			l.lastErr = err
		}
		l.mu.Unlock()
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
}

// of returns the pushes about paymentID so far, in arrival order.
func (l *pushLog) of(paymentID string) []push {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]push(nil), l.byPayment[paymentID]...)
}

// await waits up to within for at least n pushes about paymentID.
func (l *pushLog) await(ctx context.Context, paymentID string, n int, within time.Duration) ([]push, error) {
	var got []push
	_, err := eventually(ctx, within, 50*time.Millisecond, func(context.Context) error {
		if got = l.of(paymentID); len(got) >= n {
			return nil
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.lastErr != nil {
			return fmt.Errorf("%w: %d pushes for %s (the reader's last of %d errors: %v)", errNotYet, len(got), paymentID, l.errs, l.lastErr)
		}
		return fmt.Errorf("%w: %d pushes for %s", errNotYet, len(got), paymentID)
	})
	return got, err
}

// shown is what a phone shows of pushes: one notification per replace id.
func shown(pushes []push) int {
	ids := map[string]bool{}
	for _, p := range pushes {
		ids[p.ReplaceID] = true
	}
	return len(ids)
}

// The suite's last look is a check that can fail: a push filed after its
// case counted them is named.
func TestLateCopiesNamesAPushAfterItsCaseCountedThem(t *testing.T) {
	l := &pushLog{byPayment: map[string][]push{}, checked: map[string]checkedPushes{}}
	l.byPayment["pay_a"] = []push{{}}
	l.byPayment["pay_b"] = []push{{}}
	l.settled("pay_a", 1)
	l.settled("pay_b", 1)
	l.byPayment["pay_b"] = append(l.byPayment["pay_b"], push{})
	late, n, _, _ := l.lateCopies(0)
	if n != 2 || len(late) != 1 || !strings.HasPrefix(late[0], "pay_b: 1 pushes when checked, 2 now") {
		t.Fatalf("late = %v over %d checked", late, n)
	}
}
