package recount_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/recount"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
	"github.com/oncepay/oncepay/internal/totals"
)

// world is a ledger (PostgreSQL) and the stream job's sink (DynamoDB
// Local): the recount reads one and writes the other.
type world struct {
	t      *testing.T
	pool   *pgxpool.Pool
	ledger *ledger.Store
	sink   *totals.Table
	today  time.Time // midnight UTC of the day the payments settle
	now    time.Time // the recounter's clock
}

func newWorld(t *testing.T) *world {
	t.Helper()
	pool, _ := testenv.Ledger(t)
	db := testenv.DynamoDB(t)
	name := "t-totals-" + testenv.RandomID(6)
	if _, err := db.CreateTable(context.Background(), totals.TableSchema(name)); err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	t.Cleanup(func() { _, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name}) })
	sink, err := totals.NewTable(db, name)
	if err != nil {
		t.Fatal(err)
	}
	// The payments settle today, at times of the test's choosing.
	today := time.Now().UTC().Truncate(24 * time.Hour)
	return &world{t: t, pool: pool, ledger: ledger.New(pool), sink: sink, today: today, now: today.Add(12 * time.Hour)}
}

func (w *world) recounter(v totals.Version) *recount.Recounter {
	w.t.Helper()
	r, err := recount.New(recount.Config{Version: v, Ledger: w.ledger, Sink: w.sink, Now: func() time.Time { return w.now }})
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

// settle makes a payment of merchant final at the given time of today.
func (w *world) settle(id, merchant string, amount int64, state ledger.State, at time.Duration) {
	w.t.Helper()
	ctx := context.Background()
	p := ledger.Payment{ID: id, CallerID: "u1", ClientKey: "K-" + id, Fingerprint: "H", Amount: amount, Currency: "USD",
		MerchantID: merchant, OrderID: id, PaymentMethod: "pm_1", DeadlineAt: time.Now().Add(5 * time.Second)}
	if _, _, err := w.ledger.InsertPending(ctx, p); err != nil {
		w.t.Fatal(err)
	}
	o := ledger.Outcome{State: state, PSPCharge: "ch_" + id}
	if state == ledger.Failed {
		o = ledger.Outcome{State: state, DeclineCode: "card_declined"}
	}
	if _, _, moved, err := w.ledger.Settle(ctx, id, o, w.today.Add(at)); err != nil || !moved {
		w.t.Fatalf("settle %s: moved=%v err=%v", id, moved, err)
	}
	// The database stamps created_at with its own clock at the settle's
	// start, a moment before the function's occurred_at: here, when the
	// test says the payment settled.
	if _, err := w.pool.Exec(ctx, `UPDATE outbox_intents SET created_at = $2 WHERE payment_id = $1`, id, w.today.Add(at).Add(-time.Second)); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) key(merchant string) totals.Key {
	return totals.Key{Merchant: merchant, Day: w.today.Format("2006-01-02"), Currency: "USD"}
}

func (w *world) total(merchant string) (int64, bool) {
	w.t.Helper()
	n, found, err := w.sink.DayTotal(context.Background(), w.key(merchant))
	if err != nil {
		w.t.Fatal(err)
	}
	return n, found
}

func (w *world) wantTotal(merchant string, want int64) {
	w.t.Helper()
	if got, found := w.total(merchant); !found || got != want {
		w.t.Errorf("%s's total = %d (found %v), want %d", merchant, got, found, want)
	}
}

// The story's ledger for m1 and m2 today, and a sink that missed pay_7:
// the copy came later than the horizon and went to the recount queue.
func (w *world) storyWithALateCopy() {
	w.t.Helper()
	w.settle("pay_a", "m1", 12000, ledger.Succeeded, time.Hour)
	w.settle("pay_d", "m2", 500, ledger.Failed, time.Hour+5*time.Second)
	w.settle("pay_7", "m1", 3000, ledger.Succeeded, time.Hour+10*time.Second)
	if err := w.sink.Put(context.Background(), "shardId-1", 0, map[totals.Key]int64{w.key("m1"): 12000}); err != nil {
		w.t.Fatal(err)
	}
}

// A late copy's day is recounted from the ledger only once the day is over
// (until then its events may still be coming), and the recount's total
// then stands whatever the stream's partials do afterwards: a lagging
// shard that still counts pay_7 does not count it twice.
func TestALateCopysDayIsRecountedFromTheLedgerOnceItIsOver(t *testing.T) {
	w := newWorld(t)
	w.storyWithALateCopy()
	r := w.recounter(totals.V2)
	ctx := context.Background()
	keys := []totals.Key{w.key("m1"), w.key("m2")}

	w.now = w.today.Add(23 * time.Hour)
	wait, err := r.Keys(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	if want := w.today.Add(24 * time.Hour).Add(recount.DefaultSettle); !wait.Equal(want) {
		t.Errorf("an open day waits until %s, want %s", wait, want)
	}
	w.wantTotal("m1", 12000) // nothing recounted yet

	w.now = w.today.Add(25 * time.Hour)
	if wait, err := r.Keys(ctx, keys); err != nil || !wait.IsZero() {
		t.Fatalf("Keys after the day: wait %s, err %v", wait, err)
	}
	w.wantTotal("m1", 15000)
	w.wantTotal("m2", 0) // v2 skips the decline: its key recounted to nothing

	if err := w.sink.Put(ctx, "shardId-2", 7, map[totals.Key]int64{w.key("m1"): 3000}); err != nil {
		t.Fatal(err)
	}
	w.wantTotal("m1", 15000)
	// Recounting again writes the same row.
	if _, err := r.Keys(ctx, keys); err != nil {
		t.Fatal(err)
	}
	w.wantTotal("m1", 15000)
}

// The recount counts what the job's version counts: v1 counts the decline.
func TestTheRecountCountsWhatTheJobsVersionCounts(t *testing.T) {
	w := newWorld(t)
	w.storyWithALateCopy()
	w.now = w.today.Add(25 * time.Hour)
	if _, err := w.recounter(totals.V1).Keys(context.Background(), []totals.Key{w.key("m2")}); err != nil {
		t.Fatal(err)
	}
	w.wantTotal("m2", 500)
}

// A discarded batch names its arrival times, not its keys: the ledger turns
// them into every key with an event from the first arrival minus the
// horizon to the last, and no other.
func TestABatchsArrivalTimesNameTheKeysItMayHaveChanged(t *testing.T) {
	w := newWorld(t)
	w.settle("pay_old", "m3", 100, ledger.Succeeded, time.Hour)
	w.settle("pay_a", "m1", 12000, ledger.Succeeded, 5*time.Hour)
	w.settle("pay_7", "m2", 3000, ledger.Succeeded, 6*time.Hour)
	r := w.recounter(totals.V2)
	from, to := r.BatchRange(w.today.Add(7*time.Hour), w.today.Add(7*time.Hour+time.Minute))
	keys, err := r.Range(context.Background(), from, to)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0] != w.key("m1") || keys[1] != w.key("m2") {
		t.Errorf("keys %v, want m1's and m2's (m3's event is more than the horizon before the batch)", keys)
	}
}

// The function on real queues: a late copy (as the job sends it) and the
// totals mapping's on-failure record (as Lambda writes it). While the day
// is open, both are held back, invisible until it ends, and nothing is
// written; once it is over, both are recounted and leave the queue.
func TestTheFunctionHoldsRequestsBackUntilTheirDayIsOverThenRecounts(t *testing.T) {
	w := newWorld(t)
	w.storyWithALateCopy()
	q := testenv.SQS(t)
	late, failures := testenv.NewStandardQueue(t, q), testenv.NewStandardQueue(t, q)
	ctx := context.Background()
	send, err := totals.RecountQueue(q, late.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := send(ctx, totals.Late{EventID: "pay_7:SUCCEEDED", PaymentID: "pay_7", MerchantID: "m1", Day: w.key("m1").Day,
		Currency: "USD", OccurredAt: w.today.Add(time.Hour + 10*time.Second), Shard: "shardId-1"}); err != nil {
		t.Fatal(err)
	}
	var f harness.StreamFailure
	f.RequestContext.Condition = "RetryAttemptsExhausted"
	f.BatchInfo.ShardID, f.BatchInfo.BatchSize = "shardId-1", 2
	f.BatchInfo.ApproximateArrivalOfFirstRecord = w.today.Add(time.Hour + 5*time.Second).Format(time.RFC3339Nano)
	f.BatchInfo.ApproximateArrivalOfLastRecord = w.today.Add(time.Hour + 10*time.Second).Format(time.RFC3339Nano)
	if err := harness.SQSDestination(q, failures.URL)(ctx, f); err != nil {
		t.Fatal(err)
	}
	fn := recount.Function{Recounter: w.recounter(totals.V2), SQS: q, QueueURLs: []string{late.URL, failures.URL}}
	receive := func(queue testenv.Queue) events.SQSEvent {
		t.Helper()
		out, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(queue.URL), MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		var ev events.SQSEvent
		for _, m := range out.Messages {
			ev.Records = append(ev.Records, events.SQSMessage{MessageId: *m.MessageId, ReceiptHandle: *m.ReceiptHandle,
				Body: *m.Body, EventSourceARN: queue.Arn})
		}
		return ev
	}
	w.now = w.today.Add(23 * time.Hour)
	held := map[string]string{} // queue URL -> the held message's receipt handle
	for _, queue := range []testenv.Queue{late, failures} {
		ev := receive(queue)
		if len(ev.Records) != 1 {
			t.Fatalf("%s holds %d messages, want 1", queue, len(ev.Records))
		}
		held[queue.URL] = ev.Records[0].ReceiptHandle
		resp, err := fn.Handle(ctx, ev)
		if err != nil || len(resp.BatchItemFailures) != 1 {
			t.Fatalf("%s: an open day's request answered %+v, %v; want it failed (kept)", queue, resp, err)
		}
		// Held back: a receive now finds nothing, though the
		// queue's own visibility timeout is 30 s.
		if again := receive(queue); len(again.Records) != 0 {
			t.Errorf("%s: the held request is visible again at once", queue)
		}
	}
	w.wantTotal("m1", 12000)

	// The day is over; the messages come back (made visible here, as the
	// end of their hold would).
	for url, handle := range held {
		if _, err := q.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(url),
			ReceiptHandle: aws.String(handle), VisibilityTimeout: 0}); err != nil {
			t.Fatal(err)
		}
	}
	w.now = w.today.Add(25 * time.Hour)
	for _, queue := range []testenv.Queue{late, failures} {
		ev := receive(queue)
		resp, err := fn.Handle(ctx, ev)
		if err != nil || len(ev.Records) != 1 || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("%s: %d requests after the day answered %+v, %v; want one, done", queue, len(ev.Records), resp, err)
		}
	}
	w.wantTotal("m1", 15000)
	w.wantTotal("m2", 0)
}

// A message that is neither request stays in the queue (its age alarms),
// and the batch's other messages are handled.
func TestAnUnreadableRequestIsKeptAndTheOthersHandled(t *testing.T) {
	w := newWorld(t)
	w.storyWithALateCopy()
	w.now = w.today.Add(25 * time.Hour)
	fn := recount.Function{Recounter: w.recounter(totals.V2)}
	late, _ := json.Marshal(totals.Late{EventID: "pay_7:SUCCEEDED", MerchantID: "m1", Day: w.key("m1").Day, Currency: "USD"})
	resp, err := fn.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "1", Body: `{"hello":"world"}`},
		{MessageId: "2", Body: `not json`},
		{MessageId: "3", Body: fmt.Sprintf(`{"event_id":"x","merchant_id":"m1","day":%q,"currency":"usd"}`, w.key("m1").Day)},
		{MessageId: "4", Body: fmt.Sprintf(`{"from":%q,"to":%q}`, w.today.Add(2*time.Hour).Format(time.RFC3339), w.today.Format(time.RFC3339))},
		{MessageId: "5", Body: string(late)},
		// An operator's span: m2's day too.
		{MessageId: "6", Body: fmt.Sprintf(`{"from":%q,"to":%q}`, w.today.Format(time.RFC3339), w.today.Add(2*time.Hour).Format(time.RFC3339))},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, f := range resp.BatchItemFailures {
		kept = append(kept, f.ItemIdentifier)
	}
	if fmt.Sprint(kept) != "[1 2 3 4]" {
		t.Errorf("kept %v, want the four unreadable ones (a lower-case currency, a span that ends before it starts)", kept)
	}
	w.wantTotal("m1", 15000)
	w.wantTotal("m2", 0)
}
