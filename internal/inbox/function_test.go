package inbox_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// The worker function has two triggers: an SQS batch credits and pushes;
// the schedule's tick finishes the push a failed send left PENDING, once.
// Anything else is refused, so a miswired trigger is an error, not a no-op.
func TestTheWorkerFunctionCreditsOnABatchAndFinishesFailedPushesOnItsSchedule(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, func(c *inbox.Config) { c.RetryAfter = time.Millisecond })
	sw, err := inbox.NewNotifSweeper(w.pool, w.pusher, inbox.SweepConfig{Logger: quiet, Grace: time.Millisecond, Base: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	fn := inbox.Function{Worker: w.w, Sweeper: sw}
	e := payment("pay_fn", "m1", "SUCCEEDED", 3000)
	m := message(t, e, 1)
	m.EventSource = "aws:sqs"
	batch, _ := json.Marshal(events.SQSEvent{Records: []events.SQSMessage{m}})

	w.pusher.failures = 1 // the worker's own push fails
	out, err := fn.Invoke(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if r := out.(events.SQSEventResponse); len(r.BatchItemFailures) != 0 {
		t.Fatalf("a failed push failed the message: %+v", r)
	}
	if b := w.balance(t, "m1"); b != 15000 || w.notif(t, e.EventID) != "PENDING" || w.pusher.count() != 0 {
		t.Fatalf("after the batch: m1 = %d, notif %s, %d pushes", b, w.notif(t, e.EventID), w.pusher.count())
	}

	time.Sleep(5 * time.Millisecond) // past the grace and backoff, on the database's clock
	tick := json.RawMessage(`{"version":"0","id":"t1","detail-type":"Scheduled Event","source":"aws.events","detail":{}}`)
	out, err = fn.Invoke(ctx, tick)
	if err != nil {
		t.Fatal(err)
	}
	if r := out.(inbox.SweepReport); r.Finished != 1 || w.pusher.count() != 1 || w.notif(t, e.EventID) != "SENT" {
		t.Fatalf("after the tick: %+v, %d pushes, notif %s", r, w.pusher.count(), w.notif(t, e.EventID))
	}
	if out, err = fn.Invoke(ctx, tick); err != nil || out.(inbox.SweepReport).Finished != 0 || w.pusher.count() != 1 {
		t.Fatalf("a second tick: %+v %v, %d pushes", out, err, w.pusher.count())
	}
	if b := w.balance(t, "m1"); b != 15000 {
		t.Fatalf("m1 = %d after the ticks", b)
	}

	for _, bad := range []string{`{}`, `{"source":"aws.s3"}`, `{"Records":[{"eventSource":"aws:dynamodb"}]}`, `[`} {
		if _, err := fn.Invoke(ctx, json.RawMessage(bad)); err == nil {
			t.Errorf("%s was accepted", bad)
		}
	}
	if _, err := (inbox.Function{Worker: w.w}).Invoke(ctx, tick); err == nil {
		t.Error("a tick reached a worker without a sweeper and nothing said so")
	}
}

// A tick runs every sweep it has, the channels' too: one that fails (its
// ledger gone) fails the tick, so EventBridge's retry and the worker's
// error alarm see it, while the others still finish their rows.
func TestATickReportsTheFailureOfAnExtraSweep(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, func(c *inbox.Config) { c.RetryAfter = time.Millisecond })
	sw, err := inbox.NewNotifSweeper(w.pool, w.pusher, inbox.SweepConfig{Logger: quiet, Grace: time.Millisecond, Base: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	gone, _ := testenv.Ledger(t)
	extra, err := inbox.NewNotifSweeper(gone, w.pusher, inbox.SweepConfig{Channel: "email", Repeats: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	gone.Close()
	fn := inbox.Function{Worker: w.w, Sweeper: sw, Extra: []*inbox.NotifSweeper{extra}}
	tick := json.RawMessage(`{"version":"0","id":"t1","detail-type":"Scheduled Event","source":"aws.events","detail":{}}`)
	if _, err := fn.Invoke(ctx, tick); err == nil {
		t.Fatal("a tick whose email sweep failed answered success")
	}
}
