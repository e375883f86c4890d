package story

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
	"github.com/oncepay/oncepay/internal/awsclient"
	"github.com/oncepay/oncepay/internal/awsclient/streamsclient"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/totals"
)

// sameDay is d before t, or, when that is the day before (the story run in
// the first hour after midnight UTC), halfway between t's midnight and t:
// the beat counts one merchant day, and an event of yesterday is not in it.
func sameDay(t time.Time, d time.Duration) time.Time {
	midnight := t.UTC().Truncate(24 * time.Hour)
	if at := t.Add(-d); !at.Before(midnight) {
		return at
	}
	return midnight.Add(t.Sub(midnight) / 2)
}

// StreamCount is what the stream beat ends with.
type StreamCount struct {
	M1, M2        int64 // the sink's totals (m2: -1 when it holds none)
	M1DuringFlush int64 // what a reader of m1 saw between the flush and the replay
	Restores      int   // lost runs the job saw and flushed
}

// StreamJob is the story's fourth beat on its parallel timeline (snapshot
// P5, docs/stream-job.md): the totals job reads the day's events through
// Lambda's tumbling window, played by the harness on a stream of their
// own: the day's earlier payments (m1 at 12,000), a declined payment of 500
// to m2, and ev_7 as the main line's outbox holds it. The job runs v1,
// which counts the declined payment; its run over m2's decline and ev_7
// writes m2 = 500 and m1 = 15,000 and dies before answering; v2 is deployed
// and Lambda hands the same batch with checkpoint c's state again: the flush
// rewrites m1 = 12,000 and deletes m2, the replay brings m1 to 15,000. It
// runs after Play (it reads ev_7's outbox item).
func StreamJob(ctx context.Context, w *World) (StreamCount, error) {
	t, ck := w.Table, &check{}
	pid := PaymentID("u1", "K1")
	eventID := ids.EventID(pid, string(ledger.Succeeded))
	start := w.Clock.Now()
	at := func(s float64) { w.Clock.Set(start.Add(time.Duration(s * float64(time.Second)))) }
	t.Section("the stream job, on its parallel timeline, times from ev_7's commit: merchants' daily totals from the outbox stream (docs/stream-job.md)", start)

	// ev_7 as the outbox holds it: the job reads the same event.
	item, err := w.Dynamo.GetItem(ctx, &dynamodb.GetItemInput{TableName: &w.outboxTable,
		Key: map[string]ddbtypes.AttributeValue{outbox.AttrEventID: &ddbtypes.AttributeValueMemberS{Value: eventID}}, ConsistentRead: aws.Bool(true)})
	if err != nil || item.Item == nil {
		return StreamCount{}, fmt.Errorf("story: ev_7's outbox item: %v", errors.Join(err, errors.New("not found")))
	}
	p, _ := item.Item[outbox.AttrPayload].(*ddbtypes.AttributeValueMemberS)
	if p == nil {
		return StreamCount{}, errors.New("story: ev_7's outbox item has no payload")
	}
	ev7, err := event.Unmarshal([]byte(p.Value))
	if err != nil {
		return StreamCount{}, err
	}
	earlier := event.Event{EventID: "pay_earlier:SUCCEEDED", PaymentID: "pay_earlier", State: event.Succeeded,
		MerchantID: "m1", CallerID: "u0", Amount: 12000, Currency: ev7.Currency, OccurredAt: sameDay(ev7.OccurredAt, time.Hour)}
	declined := event.Event{EventID: "pay_d:FAILED", PaymentID: "pay_d", State: event.Failed,
		MerchantID: "m2", CallerID: "u2", Amount: 500, Currency: ev7.Currency, OccurredAt: sameDay(ev7.OccurredAt, time.Second)}

	stream, err := w.newTable(ctx, outbox.AttrEventID, true)
	if err != nil {
		return StreamCount{}, err
	}
	streamArn, err := w.streamArn(ctx, stream)
	if err != nil {
		return StreamCount{}, err
	}
	sinkName := "t-story-totals-" + randomID(6)
	if _, err := w.Dynamo.CreateTable(ctx, totals.TableSchema(sinkName)); err != nil {
		return StreamCount{}, fmt.Errorf("%w: create the totals table: %v", ErrUnavailable, err)
	}
	w.closers = append(w.closers, func() {
		_, _ = w.Dynamo.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &sinkName})
	})
	sink, err := totals.NewTable(w.Dynamo, sinkName)
	if err != nil {
		return StreamCount{}, err
	}
	recountQ, err := w.newQueue(ctx, "t-story-recount-"+randomID(6), false, 0, 0)
	if err != nil {
		return StreamCount{}, err
	}
	recount, err := totals.RecountQueue(w.SQS, recountQ.url)
	if err != nil {
		return StreamCount{}, err
	}
	var c StreamCount
	c.M1DuringFlush = -1
	m1Key := totals.Key{Merchant: "m1", Day: ev7.OccurredAt.UTC().Format("2006-01-02"), Currency: ev7.Currency}
	m2Key := totals.Key{Merchant: "m2", Day: m1Key.Day, Currency: ev7.Currency}
	read := func(k totals.Key) int64 {
		n, found, err := sink.DayTotal(ctx, k)
		if err != nil || !found {
			return -1
		}
		return n
	}
	job := func(v totals.Version) (*totals.Job, error) {
		return totals.New(totals.Config{Version: v, Sink: sink, Recount: recount, Logger: w.log,
			AfterFlush: func(context.Context, string) { c.M1DuringFlush = read(m1Key); c.Restores++ }})
	}
	v1, err := job(totals.V1)
	if err != nil {
		return c, err
	}
	v2, err := job(totals.V2)
	if err != nil {
		return c, err
	}
	var useV2, crash atomic.Bool
	handler := func(ctx context.Context, ev events.DynamoDBTimeWindowEvent) (events.DynamoDBTimeWindowEventResponse, error) {
		j := v1
		if useV2.Load() {
			j = v2
		}
		resp, err := j.Handle(ctx, ev)
		if err == nil && len(ev.Records) > 0 && crash.CompareAndSwap(true, false) {
			return events.DynamoDBTimeWindowEventResponse{}, errors.New("story: the stream job died after its sink writes")
		}
		return resp, err
	}
	cfg, err := awsclient.Config(ctx)
	if err != nil {
		return c, err
	}
	settings := eventsource.Default().Totals
	poller, err := harness.NewWindowPoller(streamsclient.New(cfg), handler, harness.StreamConfig{StreamArn: streamArn, Settings: settings, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return c, err
	}
	put := func(e event.Event) error {
		b, err := e.Marshal()
		if err != nil {
			return err
		}
		_, err = w.Dynamo.PutItem(ctx, &dynamodb.PutItemInput{TableName: &stream, Item: map[string]ddbtypes.AttributeValue{
			outbox.AttrEventID:    &ddbtypes.AttributeValueMemberS{Value: e.EventID},
			outbox.AttrMerchantID: &ddbtypes.AttributeValueMemberS{Value: e.MerchantID},
			outbox.AttrPayload:    &ddbtypes.AttributeValueMemberS{Value: string(b)},
		}})
		return err
	}

	// The job reads each change about 4 s after its commit (the story's
	// assumption).
	// Checkpoint c: the day's earlier payments counted.
	if err := put(earlier); err != nil {
		return c, err
	}
	if _, err := poller.Drain(ctx); err != nil {
		return c, fmt.Errorf("story: stream job: %w", err)
	}
	t.Add("stream job", "v1 counts the day so far: m1 = 12,000; its state (checkpoint c) goes back to Lambda with the stream position", "m1")
	ck.want(read(m1Key) == 12000, "checkpoint c: m1 = %d, want 12,000", read(m1Key))

	// v1's run over m2's decline and ev_7 writes, then dies.
	at(4)
	crash.Store(true)
	for _, e := range []event.Event{declined, ev7} {
		if err := put(e); err != nil {
			return c, err
		}
	}
	for range 50 {
		if !crash.Load() {
			break
		}
		if _, err := poller.Step(ctx); err != nil {
			return c, fmt.Errorf("story: stream job: %w", err)
		}
	}
	t.Add("stream job", fmt.Sprintf("v1 reads m2's declined payment and ev_7, writes m2 = %s and m1 = %s (absolute, tagged c), dies before answering",
		thousands(read(m2Key)), thousands(read(m1Key))), "pay_d, "+eventID)
	ck.want(!crash.Load() && read(m2Key) == 500 && read(m1Key) == 15000,
		"v1's lost run: crashed %v, m2 = %d, m1 = %d; want it dead after writing 500 and 15,000", !crash.Load(), read(m2Key), read(m1Key))

	// v2 deployed; Lambda hands the batch again with checkpoint c's state.
	at(5.5)
	useV2.Store(true)
	if _, err := poller.Drain(ctx); err != nil {
		return c, fmt.Errorf("story: stream job: %w", err)
	}
	c.M1, c.M2 = read(m1Key), read(m2Key)
	t.Add("stream job", fmt.Sprintf("v2, handed checkpoint c again, sees the sink marked at c: full flush (m1 = %s rewritten, m2 deleted), then the replay skips the decline",
		thousands(c.M1DuringFlush)), "m1, m2")
	m2 := "none"
	if c.M2 >= 0 {
		m2 = thousands(c.M2)
	}
	t.Add("stream job", fmt.Sprintf("the sink holds m1 = %s and m2 = %s: the restored state plus the replay", thousands(c.M1), m2), "m1, m2")
	ck.want(c.Restores == 1 && c.M1DuringFlush == 12000 && c.M1 == 15000 && c.M2 == -1,
		"v2's restore: %d flushes, m1 read %d during it, then m1 = %d, m2 = %d; want one, 12,000, 15,000 and none", c.Restores, c.M1DuringFlush, c.M1, c.M2)
	return c, ck.err()
}
