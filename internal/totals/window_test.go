package totals_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
	"github.com/oncepay/oncepay/internal/totals"
)

// The job on a real outbox stream (DynamoDB Local), fed by the harness's
// tumbling window: the restore is a failed invocation that Lambda hands the
// same batch and the same committed state again.

type outboxTable struct {
	t      *testing.T
	db     *dynamodb.Client
	name   string
	stream string
}

func newOutbox(t *testing.T, db *dynamodb.Client) outboxTable {
	name, stream := testenv.NewOutboxTable(t, db)
	return outboxTable{t: t, db: db, name: name, stream: stream}
}

// put writes e's outbox item as the API's publish does; again bumps the
// re-drive counter as the sweep does, which puts a MODIFY record.
func (o outboxTable) put(e event.Event, redrive int) {
	o.t.Helper()
	b, err := e.Marshal()
	if err != nil {
		o.t.Fatal(err)
	}
	if _, err := o.db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &o.name, Item: map[string]types.AttributeValue{
		outbox.AttrEventID:    &types.AttributeValueMemberS{Value: e.EventID},
		outbox.AttrMerchantID: &types.AttributeValueMemberS{Value: e.MerchantID},
		outbox.AttrPayload:    &types.AttributeValueMemberS{Value: string(b)},
		outbox.AttrRedrive:    &types.AttributeValueMemberN{Value: strconv.Itoa(redrive)},
	}}); err != nil {
		o.t.Fatalf("put %s: %v", e.EventID, err)
	}
}

// killable runs the job as the function; while kill is set, an invocation
// writes what it writes and then dies before answering (the story's crash
// after the sink writes), and it runs the version the deploy says.
type killable struct {
	v1, v2 *totals.Job
	useV2  atomic.Bool
	kill   atomic.Bool
	killed atomic.Int32
}

func (k *killable) handle(ctx context.Context, ev events.DynamoDBTimeWindowEvent) (events.DynamoDBTimeWindowEventResponse, error) {
	j := k.v1
	if k.useV2.Load() {
		j = k.v2
	}
	resp, err := j.Handle(ctx, ev)
	if err == nil && len(ev.Records) > 0 && k.kill.CompareAndSwap(true, false) {
		k.killed.Add(1)
		return events.DynamoDBTimeWindowEventResponse{}, errors.New("Runtime.ExitError: killed after its sink writes")
	}
	return resp, err
}

// recent is the story's events at a time of today: a real stream's records
// arrive now, and an event more than the horizon older than its arrival is
// late.
func recent(t *testing.T, w *world) (evA, evD, ev7 event.Event, at func(time.Duration) time.Time) {
	t.Helper()
	base := time.Now().UTC().Add(-30 * time.Minute).Truncate(time.Second)
	if base.Add(2*time.Minute).Day() != base.Day() {
		base = base.Add(-3 * time.Minute)
	}
	w.day = base.Format("2006-01-02")
	at = func(d time.Duration) time.Time { return base.Add(d) }
	return payment("pay_a", event.Succeeded, "m1", 12000, at(0)),
		payment("pay_d", event.Failed, "m2", 500, at(5*time.Second)),
		payment("pay_7", event.Succeeded, "m1", 3000, at(10*time.Second)), at
}

func TestOnTheHarnessWindowAFailedRunIsRestoredAndFlushed(t *testing.T) {
	w := newWorld(t)
	evA, evD, ev7, at := recent(t, w)
	out := newOutbox(t, w.db)
	k := &killable{v1: w.job(totals.Config{Version: totals.V1}), v2: w.job(totals.Config{Version: totals.V2})}
	settings := eventsource.Default().Totals
	settings.TumblingWindow = 2 * time.Second
	p, err := harness.NewWindowPoller(testenv.DynamoDBStreams(t), k.handle, harness.StreamConfig{StreamArn: out.stream, Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	drain := func() {
		t.Helper()
		if _, err := p.Drain(ctx); err != nil {
			t.Fatal(err)
		}
	}
	out.put(evA, 0)
	drain()
	w.wantTotal("m1", 12000)

	k.kill.Store(true)
	out.put(evD, 0)
	out.put(ev7, 0)
	// The first run (v1) writes m2 = 500 and m1 = 15,000 and dies; the
	// deploy of v2 lands before Lambda's retry.
	for k.killed.Load() == 0 {
		if _, err := p.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w.wantTotal("m2", 500)
	k.useV2.Store(true)
	drain()
	w.wantTotal("m1", 15000)
	w.wantNoTotal("m2")
	st := p.Stats()
	if st.FunctionErrors != 1 || st.Retries != 1 || st.Discarded != 0 {
		t.Errorf("stats %+v, want the one failed run retried", st)
	}

	// The window closes (its end passes); in the next window, with a fresh
	// state, a re-drive of ev_7 (a MODIFY) is not counted again.
	time.Sleep(settings.TumblingWindow)
	drain()
	if p.Stats().WindowsClosed == 0 {
		t.Fatalf("no window closed: %+v", p.Stats())
	}
	out.put(ev7, 1)
	out.put(payment("pay_h", event.Succeeded, "m1", 5, at(time.Minute)), 0)
	drain()
	w.wantTotal("m1", 15005)
	w.wantNoTotal("m2")
}

// The give-up path: a batch that fails past every retry (here v1 writes
// and then the invocation fails each time) is discarded by Lambda to the
// on-failure destination, and the shard goes on from the last committed
// state. That state never counted the batch, so the next run finds the
// sink's mark at its own checkpoint and flushes: what the failing runs
// wrote (m2 = 500, m1 = 15,000) is taken back, and the sink holds exactly
// what the state counted. The batch is not gone: the on-failure record
// names its shard and sequence range for the recount, and the ledger still
// holds the payments (docs/stream-job.md#recount).
func TestOnTheHarnessWindowADiscardedBatchIsTakenBackAndNamedForTheRecount(t *testing.T) {
	w := newWorld(t)
	evA, evD, ev7, at := recent(t, w)
	out := newOutbox(t, w.db)
	v1 := w.job(totals.Config{Version: totals.V1})
	var failing atomic.Bool
	handle := func(ctx context.Context, ev events.DynamoDBTimeWindowEvent) (events.DynamoDBTimeWindowEventResponse, error) {
		resp, err := v1.Handle(ctx, ev)
		if err == nil && len(ev.Records) > 0 && failing.Load() {
			return events.DynamoDBTimeWindowEventResponse{}, errors.New("the recount queue is down")
		}
		return resp, err
	}
	settings := eventsource.Default().Totals
	settings.TumblingWindow = 15 * time.Minute
	settings.MaxRetryAttempts = 2
	var discarded []harness.StreamFailure
	p, err := harness.NewWindowPoller(testenv.DynamoDBStreams(t), handle, harness.StreamConfig{StreamArn: out.stream, Settings: settings,
		OnFailure: func(_ context.Context, f harness.StreamFailure) error { discarded = append(discarded, f); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	drain := func() {
		t.Helper()
		if _, err := p.Drain(ctx); err != nil {
			t.Fatal(err)
		}
	}
	out.put(evA, 0)
	drain()
	w.wantTotal("m1", 12000)

	failing.Store(true)
	out.put(evD, 0)
	out.put(ev7, 0)
	for p.Stats().Discarded == 0 {
		if _, err := p.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w.wantTotal("m2", 500) // the failing runs' writes, until the next run
	if len(discarded) != 1 || discarded[0].BatchInfo.BatchSize != 2 || discarded[0].BatchInfo.StartSequenceNumber == "" ||
		discarded[0].RequestContext.Condition != "RetryAttemptsExhausted" {
		t.Fatalf("on-failure records %+v, want the one batch of two, exhausted", discarded)
	}

	failing.Store(false)
	out.put(payment("pay_n", event.Succeeded, "m1", 5, at(20*time.Second)), 0)
	drain()
	w.wantTotal("m1", 12005)
	w.wantNoTotal("m2")
}
