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
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/outbox"
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

// settle makes a payment of merchant final at the given time of today and
// returns its event.
func (w *world) settle(id, merchant string, amount int64, state ledger.State, at time.Duration) event.Event {
	w.t.Helper()
	ctx := context.Background()
	p := ledger.Payment{ID: id, CallerID: "u1", ClientKey: "K-" + id, Fingerprint: "H", Amount: amount, Currency: "USD",
		MerchantID: merchant, OrderID: id, PaymentMethod: "pm_1", DeadlineAt: time.Now().Add(5 * time.Second)}
	if _, _, err := w.ledger.InsertPending(ctx, p, ""); err != nil {
		w.t.Fatal(err)
	}
	o := ledger.Outcome{State: state, PSPCharge: "ch_" + id}
	if state == ledger.Failed {
		o = ledger.Outcome{State: state, DeclineCode: "card_declined"}
	}
	_, e, moved, err := w.ledger.Settle(ctx, id, o, w.today.Add(at))
	if err != nil || !moved || e == nil {
		w.t.Fatalf("settle %s: moved=%v err=%v", id, moved, err)
	}
	// The database stamps created_at with its own clock at the settle's
	// start, a moment before the function's occurred_at: here, when the
	// test says the payment settled.
	if _, err := w.pool.Exec(ctx, `UPDATE outbox_intents SET created_at = $2 WHERE payment_id = $1`, id, w.today.Add(at).Add(-time.Second)); err != nil {
		w.t.Fatal(err)
	}
	return *e
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
	open, wait, err := r.Keys(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	closes := w.today.Add(24 * time.Hour).Add(recount.DefaultSettle)
	if !wait.Equal(closes) || len(open) != 2 {
		t.Errorf("an open day waits until %s with %v, want %s with both keys", wait, open, closes)
	}
	w.wantTotal("m1", 12000) // nothing recounted yet, but a reader is told
	if due, ok, err := w.sink.Pending(ctx, w.key("m1")); err != nil || !ok || !due.Equal(closes) {
		t.Errorf("m1's recount due %s (%v, %v), want %s", due, ok, err, closes)
	}

	w.now = w.today.Add(25 * time.Hour)
	if open, wait, err := r.Keys(ctx, keys); err != nil || !wait.IsZero() || len(open) != 0 {
		t.Fatalf("Keys after the day: %v open until %s, err %v", open, wait, err)
	}
	w.wantTotal("m1", 15000)
	w.wantTotal("m2", 0) // v2 skips the decline: its key recounted to nothing

	if err := w.sink.Put(ctx, "shardId-2", 7, map[totals.Key]int64{w.key("m1"): 3000}); err != nil {
		t.Fatal(err)
	}
	w.wantTotal("m1", 15000)
	// Recounting again writes the same row.
	if _, _, err := r.Keys(ctx, keys); err != nil {
		t.Fatal(err)
	}
	w.wantTotal("m1", 15000)
}

// The recount counts what the job's version counts: v1 counts the decline.
func TestTheRecountCountsWhatTheJobsVersionCounts(t *testing.T) {
	w := newWorld(t)
	w.storyWithALateCopy()
	w.now = w.today.Add(25 * time.Hour)
	if _, _, err := w.recounter(totals.V1).Keys(context.Background(), []totals.Key{w.key("m2")}); err != nil {
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

// holds records each visibility the function asks SQS for, and passes
// the call on to the real queue.
type holds struct {
	*sqs.Client
	asked []int32
}

func (h *holds) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error) {
	h.asked = append(h.asked, in.VisibilityTimeout)
	return h.Client.ChangeMessageVisibility(ctx, in, opts...)
}

// receive reads queue's visible messages as Lambda's poller hands them.
func receive(t *testing.T, q *sqs.Client, queue testenv.Queue) events.SQSEvent {
	t.Helper()
	out, err := q.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(queue.URL), MaxNumberOfMessages: 10})
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

// The function on a real queue whose own visibility timeout is a second: a
// late copy (as the job sends it) for a day still open is held back past
// that second, for no more than SQS takes (MaxHold, when the day closes
// later than that), and nothing is written; once the day is over it is
// recounted and leaves the queue.
func TestTheFunctionHoldsALateCopyBackUntilItsDayIsOverThenRecounts(t *testing.T) {
	w := newWorld(t)
	w.storyWithALateCopy()
	q := testenv.SQS(t)
	late := testenv.NewQueueWith(t, q, map[string]string{"VisibilityTimeout": "1"})
	ctx := context.Background()
	send, err := totals.RecountQueue(q, late.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := send(ctx, totals.Late{EventID: "pay_7:SUCCEEDED", PaymentID: "pay_7", MerchantID: "m1", Day: w.key("m1").Day,
		Currency: "USD", OccurredAt: w.today.Add(time.Hour + 10*time.Second), Shard: "shardId-1"}); err != nil {
		t.Fatal(err)
	}
	h := &holds{Client: q}
	fn := recount.Function{Recounter: w.recounter(totals.V2), SQS: h, QueueURLs: []string{late.URL}}

	// Five past midnight: the day closes in a day and 11 minutes, more
	// than SQS lets a message be held.
	w.now = w.today.Add(5 * time.Minute)
	ev := receive(t, q, late)
	if len(ev.Records) != 1 {
		t.Fatalf("%d messages, want the late copy", len(ev.Records))
	}
	handle := ev.Records[0].ReceiptHandle
	resp, err := fn.Handle(ctx, ev)
	if err != nil || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("an open day's request answered %+v, %v; want it kept", resp, err)
	}
	if len(h.asked) != 1 || time.Duration(h.asked[0])*time.Second != recount.MaxHold {
		t.Errorf("held for %v s, want MaxHold (%s): SQS refuses more than 12 h from the receive", h.asked, recount.MaxHold)
	}
	time.Sleep(1500 * time.Millisecond) // past the queue's own visibility
	if again := receive(t, q, late); len(again.Records) != 0 {
		t.Fatalf("the held request is visible again after the queue's own second")
	}
	w.wantTotal("m1", 12000)

	// The hold ends (here at once) and the day is over.
	if _, err := q.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(late.URL),
		ReceiptHandle: aws.String(handle), VisibilityTimeout: 0}); err != nil {
		t.Fatal(err)
	}
	w.now = w.today.Add(25 * time.Hour)
	ev = receive(t, q, late)
	resp, err = fn.Handle(ctx, ev)
	if err != nil || len(ev.Records) != 1 || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("%d requests after the day answered %+v, %v; want one, done", len(ev.Records), resp, err)
	}
	w.wantTotal("m1", 15000)
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

// outboxWithEvents puts e's outbox items as the API publishes them and
// returns the stream and its one shard's first and last sequence numbers.
func outboxWithEvents(t *testing.T, evs ...event.Event) (stream, shard, first, last string) {
	t.Helper()
	ctx := context.Background()
	db := testenv.DynamoDB(t)
	table, stream := testenv.NewOutboxTable(t, db)
	pub, err := outbox.NewPublisher(db, outbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if err := pub.Publish(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	streams := testenv.DynamoDBStreams(t)
	d, err := streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: aws.String(stream)})
	if err != nil || len(d.StreamDescription.Shards) != 1 {
		t.Fatalf("describe %s: %v", stream, err)
	}
	shard = aws.ToString(d.StreamDescription.Shards[0].ShardId)
	it, err := streams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: aws.String(stream), ShardId: aws.String(shard),
		ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon})
	if err != nil {
		t.Fatal(err)
	}
	out, err := streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: it.ShardIterator})
	if err != nil || len(out.Records) != len(evs) {
		t.Fatalf("%d records (%v), want %d", len(out.Records), err, len(evs))
	}
	return stream, shard, aws.ToString(out.Records[0].Dynamodb.SequenceNumber), aws.ToString(out.Records[len(evs)-1].Dynamodb.SequenceNumber)
}

// failureRecord is Lambda's on-failure record of a batch, as the local
// cloud's mapping writes it; its arrival times are the caller's.
func failureRecord(stream, shard, first, last string, arrivedFirst, arrivedLast time.Time) string {
	var f harness.StreamFailure
	f.RequestContext.Condition = "RetryAttemptsExhausted"
	f.BatchInfo.StreamArn, f.BatchInfo.ShardID, f.BatchInfo.BatchSize = stream, shard, 2
	f.BatchInfo.StartSequenceNumber, f.BatchInfo.EndSequenceNumber = first, last
	f.BatchInfo.ApproximateArrivalOfFirstRecord = arrivedFirst.Format(time.RFC3339Nano)
	f.BatchInfo.ApproximateArrivalOfLastRecord = arrivedLast.Format(time.RFC3339Nano)
	b, _ := json.Marshal(f)
	return string(b)
}

// A discarded batch is read back from the stream at once, so its keys are
// exact whatever its events' times: here one event occurred hours before
// the arrival times the record gives, where a range from them would never
// look. Its days are still open, and the stream keeps records only 24
// hours: the open keys go on as a request of their own, marked pending,
// and the failure record leaves its queue. Once the day is over that
// request recounts both merchants.
func TestADiscardedBatchIsReadBackFromTheStreamAndItsOpenKeysSentOn(t *testing.T) {
	w := newWorld(t)
	w.settle("pay_a", "m1", 12000, ledger.Succeeded, time.Hour)
	e7 := w.settle("pay_7", "m1", 3000, ledger.Succeeded, time.Hour+10*time.Second)
	eOld := w.settle("pay_old", "m3", 100, ledger.Succeeded, 2*time.Minute)
	stream, shard, first, last := outboxWithEvents(t, e7, eOld)
	q := testenv.SQS(t)
	late, failures := testenv.NewStandardQueue(t, q), testenv.NewStandardQueue(t, q)
	ctx := context.Background()
	if _, err := q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(failures.URL),
		MessageBody: aws.String(failureRecord(stream, shard, first, last, w.today.Add(20*time.Hour), w.today.Add(20*time.Hour)))}); err != nil {
		t.Fatal(err)
	}
	fn := recount.Function{Recounter: w.recounter(totals.V2), SQS: q, Streams: testenv.DynamoDBStreams(t),
		QueueURLs: []string{late.URL, failures.URL}, RecountQueueURL: late.URL}

	w.now = w.today.Add(23 * time.Hour)
	ev := receive(t, q, failures)
	resp, err := fn.Handle(ctx, ev)
	if err != nil || len(ev.Records) != 1 || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("the failure record (%d) answered %+v, %v; want it taken", len(ev.Records), resp, err)
	}
	for _, m := range []string{"m1", "m3"} {
		if _, ok, err := w.sink.Pending(ctx, w.key(m)); err != nil || !ok {
			t.Errorf("%s not marked pending (%v)", m, err)
		}
	}
	sent := receive(t, q, late)
	if len(sent.Records) != 1 {
		t.Fatalf("%d requests sent on, want one", len(sent.Records))
	}
	var keys struct{ Keys []string }
	if err := json.Unmarshal([]byte(sent.Records[0].Body), &keys); err != nil || len(keys.Keys) != 2 {
		t.Fatalf("sent on %s (%v), want both keys", sent.Records[0].Body, err)
	}

	w.now = w.today.Add(25 * time.Hour)
	if resp, err := fn.Handle(ctx, sent); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("the keys request after the day answered %+v, %v", resp, err)
	}
	w.wantTotal("m1", 15000)
	w.wantTotal("m3", 100)
}

// A batch the stream no longer holds (its 24 hours passed, or its stream
// is gone) falls back to its arrival times: every key with an event from
// the first arrival minus the horizon to the last.
func TestABatchTheStreamNoLongerHoldsFallsBackToItsArrivalTimes(t *testing.T) {
	w := newWorld(t)
	w.settle("pay_a", "m1", 12000, ledger.Succeeded, time.Hour)
	w.settle("pay_far", "m3", 100, ledger.Succeeded, 20*time.Hour)
	gone := "arn:aws:dynamodb:ddblocal:000000000000:table/t-gone/stream/2026-01-01T00:00:00.000"
	w.now = w.today.Add(25 * time.Hour)
	fn := recount.Function{Recounter: w.recounter(totals.V2), Streams: testenv.DynamoDBStreams(t)}
	body := failureRecord(gone, "shardId-00000001-x", "000000000000000000001", "000000000000000000002", w.today.Add(2*time.Hour), w.today.Add(2*time.Hour))
	resp, err := fn.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "1", Body: body}}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("answered %+v, %v", resp, err)
	}
	w.wantTotal("m1", 12000)
	if n, found := w.total("m3"); found {
		t.Errorf("m3 recounted to %d: its event is outside the batch's arrival times", n)
	}
}
