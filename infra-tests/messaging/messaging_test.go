package messaging_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

var errCrash = errors.New("injected crash")

// crashOnce returns a hook that fails the first time it sees eventID.
func crashOnce(eventID string) func(context.Context, event.Event) error {
	var done atomic.Bool
	return func(_ context.Context, e event.Event) error {
		if e.EventID == eventID && done.CompareAndSwap(false, true) {
			return errCrash
		}
		return nil
	}
}

// The story's snapshot P3 (docs/mechanism.md#seed-part-0): the relay sends
// ev_7, then dies before Lambda records the batch as done; twice. Three sends
// of one event: m1 is credited once, one notification intent, sent once.
func TestSnapshotP3_RelayCrashesTwiceAfterSending_CreditsM1Once(t *testing.T) {
	t.Parallel()
	crashes := 2
	w := newWorld(t, options{relay: func(h harness.StreamHandler) harness.StreamHandler {
		return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
			resp, err := h(ctx, ev) // the messages are sent ...
			if err == nil && crashes > 0 {
				crashes--
				return events.DynamoDBEventResponse{}, errors.New("relay died before its batch was acknowledged") // ... and never acknowledged
			}
			return resp, err
		}
	}})
	ev7 := pay("pay_7", "m1", inbox.Succeeded, 3000)
	w.publish(ev7)

	for range 2 { // send 1 and send 2, each followed by the crash: the stream redelivers the record
		if n, err := w.stream.Step(w.ctx); err != nil || n != 1 {
			t.Fatalf("relay step = %d, %v", n, err)
		}
	}
	w.work()     // the queue's dedup window dropped send 2; the worker gets one copy
	w.relayAll() // send 3, acknowledged; the first copy is already deleted
	w.work()
	if w.poller.Stats().Received == 0 {
		// Every receive's reply was lost on the wire (moto closes
		// connections under load): the copy is in flight, invisible, and
		// comes back when its visibility timeout runs out, as on AWS.
		w.redeliver()
	}

	if s := w.stream.Stats(); s.Invocations != 3 || s.FunctionErrors != 2 {
		t.Fatalf("relay stats = %+v, want 3 invocations of which 2 crashed", s)
	}
	deliveries := w.poller.Stats().Received
	t.Logf("3 sends, %d deliveries to the worker (moto forgets a dedup id once its message is deleted; AWS would keep it 5 minutes)", deliveries)
	if deliveries < 1 || deliveries > 2 {
		t.Fatalf("%d deliveries", deliveries)
	}
	if got := w.emf.sum("EventsDuplicate"); got != float64(deliveries-1) {
		t.Fatalf("inbox caught %v duplicates, want %d", got, deliveries-1)
	}
	if b := w.balance("m1"); b != 15000 {
		t.Fatalf("m1 = %d, want 12000 -> 15000, credited once", b)
	}
	if n := w.scalar(`SELECT count(*) FROM credits`); n != 1 {
		t.Fatalf("%d credits", n)
	}
	if n := w.scalar(`SELECT count(*) FROM notif`); n != 1 || w.notifState(ev7.EventID) != inbox.NotifSent {
		t.Fatalf("%d notification intents, state %s; want one, SENT", n, w.notifState(ev7.EventID))
	}
	if got := w.collect(); len(got) != 1 || got[0].ReplaceID != "pay_7" {
		t.Fatalf("pushes = %+v, want one for pay_7", got)
	}
}

// The story's snapshot P4 (docs/mechanism.md#seed-part-0): w1 pushes and dies
// before marking the intent SENT. The redelivery finds the inbox row (no
// second credit) and the PENDING intent, and pushes again with the same
// replace id: the phone shows one notification.
func TestSnapshotP4_WorkerDiesAfterPushBeforeSent_PushesAgainWithTheSameReplaceID(t *testing.T) {
	t.Parallel()
	ev7 := pay("pay_7", "m1", inbox.Succeeded, 3000)
	w := newWorld(t, options{worker: func(c *inbox.Config) { c.Hooks.AfterPush = crashOnce(ev7.EventID) }})
	w.publish(ev7)
	w.relayAll()
	w.work()
	if w.notifState(ev7.EventID) != inbox.NotifPending || w.balance("m1") != 15000 {
		t.Fatalf("after the crash: notif %s, m1 %d; want PENDING and credited", w.notifState(ev7.EventID), w.balance("m1"))
	}
	first := w.collect()

	w.redeliver()
	second := w.collect()
	if len(first) != 1 || len(second) != 1 || first[0].ReplaceID != "pay_7" || second[0].ReplaceID != first[0].ReplaceID {
		t.Fatalf("pushes: before the crash %+v, on redelivery %+v; want one each with replace id pay_7", first, second)
	}
	if b, n := w.balance("m1"), w.scalar(`SELECT count(*) FROM credits`); b != 15000 || n != 1 {
		t.Fatalf("m1 = %d with %d credits; the credit must stay single", b, n)
	}
	if s := w.notifState(ev7.EventID); s != inbox.NotifSent {
		t.Fatalf("notif %s, want SENT", s)
	}
	if shown := w.phone.Shown(); len(shown) != 1 || w.phone.Alerts() != 2 {
		t.Fatalf("phone shows %d notifications after %d alerts; want 1 after 2", len(shown), w.phone.Alerts())
	}
}

// Branch R, "ready means notified" (docs/mechanism.md#seed-part-7): the
// worker commits, then dies before pushing. The redelivery finds the inbox
// row and still pushes.
func TestBranchR_WorkerDiesAfterCommitBeforePush_RedeliveryStillPushes(t *testing.T) {
	t.Parallel()
	ev7 := pay("pay_7", "m1", inbox.Succeeded, 3000)
	w := newWorld(t, options{worker: func(c *inbox.Config) { c.Hooks.AfterCommit = crashOnce(ev7.EventID) }})
	w.publish(ev7)
	w.relayAll()
	w.work()
	if got := w.collect(); len(got) != 0 || w.balance("m1") != 15000 || w.notifState(ev7.EventID) != inbox.NotifPending {
		t.Fatalf("after the crash: %d pushes, m1 %d, notif %s; want none, credited, PENDING", len(got), w.balance("m1"), w.notifState(ev7.EventID))
	}
	w.redeliver()
	if got := w.collect(); len(got) != 1 || got[0].ReplaceID != "pay_7" {
		t.Fatalf("redelivery pushed %+v, want one push for pay_7", got)
	}
	if w.notifState(ev7.EventID) != inbox.NotifSent || w.balance("m1") != 15000 || w.emf.sum("EventsDuplicate") != 1 {
		t.Fatalf("notif %s, m1 %d, duplicates %v", w.notifState(ev7.EventID), w.balance("m1"), w.emf.sum("EventsDuplicate"))
	}
}

// A poison message (no event in its body) fails every delivery; after
// maxReceiveCount (5) receives SQS's redrive moves it to the DLQ. Other
// merchants' events flow meanwhile, and the failure shows in the EMF metrics.
// FIFO's price: an event of the same merchant received behind it in the same
// batches shares its receive count and is parked with it, never applied out
// of order. After the move the merchant's group flows again.
func TestPoisonMessageReachesTheDLQWhileOtherMerchantsKeepFlowing(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{})
	send := func(group, dedup, body string) {
		if _, err := w.sqs.SendMessage(w.ctx, &sqs.SendMessageInput{QueueUrl: &w.queue.URL, MessageGroupId: &group,
			MessageDeduplicationId: &dedup, MessageBody: &body}); err != nil {
			t.Fatal(err)
		}
	}
	send("m3", "poison-1", `{"this is": "not an event"}`)
	behind := pay("pay_m3a", "m3", inbox.Succeeded, 700)
	w.publish(behind)
	var flowing int64
	for round := range 7 {
		e1, e2 := pay(fmt.Sprintf("pay_m1_%d", round), "m1", inbox.Succeeded, 100), pay(fmt.Sprintf("pay_m2_%d", round), "m2", inbox.Succeeded, 10)
		w.publish(e1, e2)
		flowing += 100
		w.relayAll()
		w.redeliver()
		if got := w.balance("m1"); got != 12000+flowing {
			t.Fatalf("round %d: m1 = %d, want %d: m1's events must not wait for m3's poison", round, got, 12000+flowing)
		}
	}
	if got := w.balance("m2"); got != 70 {
		t.Fatalf("m2 = %d, want 70", got)
	}
	dead := testenv.Messages(t, w.sqs, w.queue.DLQ.URL)
	var bodies []string
	for _, m := range dead {
		bodies = append(bodies, aws.ToString(m.Body))
	}
	if len(dead) != 2 || bodies[0] != `{"this is": "not an event"}` || dead[1].Attributes["MessageDeduplicationId"] != behind.EventID {
		t.Fatalf("DLQ holds %q, want the poison and, behind it, %s", bodies, behind.EventID)
	}
	if got := w.balance("m3"); got != 0 {
		t.Fatalf("m3 = %d: the event behind the poison was applied out of order", got)
	}
	if failed, dlq := w.emf.sum("EventsFailed"), w.emf.sum("EventsDeadLettered"); failed != 5 || dlq != 2 {
		t.Fatalf("EMF: EventsFailed %v, EventsDeadLettered %v; want 5 and 2", failed, dlq)
	}
	after := pay("pay_m3b", "m3", inbox.Succeeded, 5)
	w.publish(after)
	w.relayAll()
	w.work()
	if got := w.balance("m3"); got != 5 {
		t.Fatalf("m3 = %d after the DLQ move, want 5: the group flows again", got)
	}
}

// One merchant's events are applied in the order they were published, also
// when one of them fails once and comes back: the ones after it wait.
func TestOrderWithinAMerchantsGroupIsKept(t *testing.T) {
	t.Parallel()
	var evs []event.Event
	for i := 1; i <= 6; i++ {
		evs = append(evs, pay(fmt.Sprintf("pay_o%d", i), "m1", inbox.Succeeded, int64(i)))
	}
	other := []event.Event{pay("pay_x1", "m2", inbox.Succeeded, 1), pay("pay_x2", "m2", inbox.Succeeded, 2)}
	w := newWorld(t, options{worker: func(c *inbox.Config) { c.Hooks.BeforeEvent = crashOnce(evs[2].EventID) }})
	w.publish(evs[0], evs[1], other[0], evs[2], evs[3], other[1], evs[4], evs[5])
	w.relayAll()
	w.work()
	if got := w.creditOrder("m1"); len(got) != 2 {
		t.Fatalf("first round credited %v to m1, want only the two before the failure", got)
	}
	if got := w.creditOrder("m2"); len(got) != 2 {
		t.Fatalf("m2 credited %v; another group must not wait", got)
	}
	w.redeliver()
	var want []string
	for _, e := range evs {
		want = append(want, e.EventID)
	}
	if got := w.creditOrder("m1"); !slices.Equal(got, want) {
		t.Fatalf("m1 credits in order %v, want %v", got, want)
	}
}

// A merchant whose events are slow to process holds up only its own group.
func TestASlowMerchantDoesNotHoldUpAnother(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		batch int
	}{
		{"in one batch, groups run side by side", 10},
		{"across pollers, the slow group stays locked", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			release := make(chan struct{})
			settings := eventsource.Default()
			settings.Worker.BatchSize = tc.batch
			w := newWorld(t, options{
				settings: settings,
				worker: func(c *inbox.Config) {
					c.Hooks.BeforeEvent = func(ctx context.Context, e event.Event) error {
						if e.MerchantID == "slow" {
							select {
							case <-release:
							case <-ctx.Done():
								return ctx.Err()
							}
						}
						return nil
					}
				},
				queue: func(q *harness.QueueConfig) { q.Pollers, q.WaitTime = 3, time.Second },
			})
			w.publish(pay("pay_s1", "slow", inbox.Succeeded, 1), pay("pay_s2", "slow", inbox.Succeeded, 2))
			for i := range 4 {
				w.publish(pay(fmt.Sprintf("pay_f%d", i), "fast", inbox.Succeeded, 10))
			}
			w.relayAll()
			ctx, cancel := context.WithCancel(w.ctx)
			var wg sync.WaitGroup
			wg.Go(func() { _ = w.poller.Run(ctx) })
			defer func() { cancel(); wg.Wait() }()
			w.waitFor("the fast merchant's four credits", func() bool { return w.balance("fast") == 40 })
			if got := w.balance("slow"); got != 0 {
				t.Fatalf("slow = %d while its first event is still being processed", got)
			}
			close(release)
			w.waitFor("the slow merchant's credits", func() bool { return w.balance("slow") == 3 })
			if got := w.creditOrder("slow"); !slices.Equal(got, []string{"pay_s1:SUCCEEDED", "pay_s2:SUCCEEDED"}) {
				t.Fatalf("slow credits in order %v", got)
			}
		})
	}
}

// redeliverAfterDelete sends e again with its original ids after the first
// copy was processed and deleted, as a relay or a resolver re-send does. If
// the queue still remembers the dedup id (AWS keeps it 5 minutes; moto
// forgets on delete) the copy is handed to the worker directly, the way it
// would arrive after the window.
func (w *world) redeliverAfterDelete(e event.Event) {
	w.t.Helper()
	body, err := e.Marshal()
	if err != nil {
		w.t.Fatal(err)
	}
	before := w.poller.Stats().Received
	if _, err := w.sqs.SendMessage(w.ctx, &sqs.SendMessageInput{QueueUrl: &w.queue.URL, MessageBody: aws.String(string(body)),
		MessageGroupId: &e.MerchantID, MessageDeduplicationId: &e.EventID}); err != nil {
		w.t.Fatal(err)
	}
	w.work()
	if w.poller.Stats().Received > before {
		return
	}
	w.t.Logf("the queue dropped the re-send inside its dedup window; delivering it as it would arrive after the window")
	resp, err := w.worker.Handle(w.ctx, events.SQSEvent{Records: []events.SQSMessage{{
		MessageId: "late-copy", Body: string(body),
		Attributes: map[string]string{"MessageGroupId": e.MerchantID, "ApproximateReceiveCount": "1"},
	}}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		w.t.Fatalf("late copy: %+v, %v", resp, err)
	}
}

// The consumer's inbox, not the queue, stops repeats: the same event sent
// again after its first copy was deleted reaches the worker and credits
// nothing.
func TestTheInboxNotTheQueueStopsARepeat(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{})
	ev7 := pay("pay_7", "m1", inbox.Succeeded, 3000)
	w.publish(ev7)
	w.relayAll()
	w.work()
	w.redeliverAfterDelete(ev7)
	if b, n := w.balance("m1"), w.scalar(`SELECT count(*) FROM credits`); b != 15000 || n != 1 {
		t.Fatalf("m1 = %d with %d credits, want 15000 with 1", b, n)
	}
	if got := w.emf.sum("EventsDuplicate"); got != 1 {
		t.Fatalf("the inbox caught %v duplicates, want 1", got)
	}
	if got := w.collect(); len(got) != 1 {
		t.Fatalf("%d pushes, want 1: the notification was already SENT", len(got))
	}
}

// Branch N (docs/mechanism.md#seed-part-7), the counterfactual: without the
// notification record every delivery pushes. The replace id still hides the
// copy on screen, but the phone buzzes twice. With the record, the redelivery
// pushes nothing.
func TestBranchN_WithoutTheNotifRecordARedeliveryPushesAgain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		withoutRecord bool
		wantPushes    int
	}{{"with the notif record", false, 1}, {"without it (Branch N)", true, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t, options{worker: func(c *inbox.Config) { c.WithoutNotifRecord = tc.withoutRecord }})
			ev7 := pay("pay_7", "m1", inbox.Succeeded, 3000)
			w.publish(ev7)
			w.relayAll()
			w.work()
			w.redeliverAfterDelete(ev7)
			got := w.collect()
			if len(got) != tc.wantPushes {
				t.Fatalf("%d pushes, want %d", len(got), tc.wantPushes)
			}
			if len(w.phone.Shown()) != 1 || w.phone.Alerts() != tc.wantPushes {
				t.Fatalf("phone: %d shown after %d alerts", len(w.phone.Shown()), w.phone.Alerts())
			}
			if w.balance("m1") != 15000 {
				t.Fatalf("m1 = %d: the inbox must keep the credit single either way", w.balance("m1"))
			}
		})
	}
}

// The API committed the intent but died before its put: the resolver's
// sweep puts it, and the event reaches the merchant.
func TestTheSweepPublishesAnIntentTheAPINeverPut(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{})
	ev7 := pay("pay_7", "m1", inbox.Succeeded, 3000)
	payload, err := ev7.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.pool.Exec(w.ctx, `
		INSERT INTO payments (payment_id, caller_id, client_key, fingerprint, amount, currency, state, merchant_id)
		VALUES ('pay_7', 'u1', 'K1', 'H1', 3000, 'USD', 'SUCCEEDED', 'm1')`); err != nil {
		t.Fatal(err)
	}
	if _, err := w.pool.Exec(w.ctx, `
		INSERT INTO outbox_intents (event_id, payment_id, merchant_id, payload, created_at)
		VALUES ($1, 'pay_7', 'm1', $2, now() - interval '1 minute')`, ev7.EventID, payload); err != nil {
		t.Fatal(err)
	}
	s, err := outbox.NewSweeper(w.pub, w.pool, outbox.SweepConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.Sweep(w.ctx); err != nil || res.Created != 1 || res.Redriven != 1 || res.Marked != 0 {
		t.Fatalf("Sweep = %+v, %v; want the item created and nothing marked before the worker has it", res, err)
	}
	w.relayAll()
	w.work()
	if w.balance("m1") != 15000 || len(w.collect()) != 1 {
		t.Fatalf("m1 = %d; want the swept event credited and notified", w.balance("m1"))
	}
	if res, err := s.Sweep(w.ctx); err != nil || res.Marked != 1 {
		t.Fatalf("Sweep after the worker had it = %+v, %v; want it marked published", res, err)
	}
}
