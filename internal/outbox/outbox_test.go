package outbox_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	stypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func ev(pid string) event.Event {
	return event.Event{
		EventID: ids.EventID(pid, "SUCCEEDED"), PaymentID: pid, State: "SUCCEEDED", MerchantID: "m1",
		CallerID: "u1", Amount: 3000, Currency: "USD", OccurredAt: time.Unix(1_800_000_000, 0).UTC(),
	}
}

func getItem(t *testing.T, db *dynamodb.Client, table, eventID string) map[string]types.AttributeValue {
	t.Helper()
	out, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: &table, Key: map[string]types.AttributeValue{"event_id": &types.AttributeValueMemberS{Value: eventID}}, ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

// streamRecords reads every record of the table's stream so far.
func streamRecords(t *testing.T, streamArn string) []stypes.Record {
	t.Helper()
	ctx := context.Background()
	ds := testenv.DynamoDBStreams(t)
	d, err := ds.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: &streamArn})
	if err != nil {
		t.Fatal(err)
	}
	var recs []stypes.Record
	for _, sh := range d.StreamDescription.Shards {
		it, err := ds.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{StreamArn: &streamArn, ShardId: sh.ShardId, ShardIteratorType: stypes.ShardIteratorTypeTrimHorizon})
		if err != nil {
			t.Fatal(err)
		}
		for iter := it.ShardIterator; iter != nil; {
			out, err := ds.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Records) == 0 {
				break
			}
			recs = append(recs, out.Records...)
			iter = out.NextShardIterator
		}
	}
	return recs
}

func TestPublishPutsTheItemOnceAndARepeatIsSuccess(t *testing.T) {
	db := testenv.DynamoDB(t)
	table, stream := testenv.NewOutboxTable(t, db)
	now := time.Unix(1_900_000_000, 0)
	p, err := outbox.NewPublisher(db, outbox.Config{Table: table, Now: func() time.Time { return now }, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	e := ev("pay_a")
	for range 3 {
		if err := p.Publish(context.Background(), e); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	item := getItem(t, db, table, e.EventID)
	got, err := event.Unmarshal([]byte(item["payload"].(*types.AttributeValueMemberS).Value))
	if err != nil || got != e {
		t.Fatalf("payload = %+v, %v; want %+v", got, err, e)
	}
	if m := item["merchant_id"].(*types.AttributeValueMemberS).Value; m != "m1" {
		t.Errorf("merchant_id = %s", m)
	}
	if exp := item["expires_at"].(*types.AttributeValueMemberN).Value; exp != strconv.FormatInt(now.Add(24*time.Hour).Unix(), 10) {
		t.Errorf("expires_at = %s, want now + 24 h", exp)
	}
	if recs := streamRecords(t, stream); len(recs) != 1 {
		t.Fatalf("stream has %d records, want 1: a repeat's failed condition writes nothing", len(recs))
	}
}

func TestPublishFailsWhenTheTableIsMissing(t *testing.T) {
	db := testenv.DynamoDB(t)
	p, err := outbox.NewPublisher(db, outbox.Config{Table: "t-no-such-" + testenv.RandomID(4), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(context.Background(), ev("pay_a")); err == nil {
		t.Fatal("Publish to a missing table succeeded")
	}
}

func insertIntent(t *testing.T, pool *pgxpool.Pool, e event.Event, age time.Duration) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `
		INSERT INTO payments (payment_id, caller_id, client_key, fingerprint, amount, currency, state, merchant_id)
		VALUES ($1, 'u1', $1, 'H', $2, $3, 'SUCCEEDED', $4)`, e.PaymentID, e.Amount, e.Currency, e.MerchantID); err != nil {
		t.Fatal(err)
	}
	payload, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO outbox_intents (event_id, payment_id, merchant_id, payload, created_at)
		VALUES ($1, $2, $3, $4, now() - make_interval(secs => $5))`,
		e.EventID, e.PaymentID, e.MerchantID, payload, age.Seconds()); err != nil {
		t.Fatal(err)
	}
}

func published(t *testing.T, pool *pgxpool.Pool, eventID string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(), `SELECT published_at IS NOT NULL FROM outbox_intents WHERE event_id = $1`, eventID).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestSweepRePutsOldUnpublishedIntentsAndMarksThemInOneGo(t *testing.T) {
	db := testenv.DynamoDB(t)
	table, stream := testenv.NewOutboxTable(t, db)
	pool, _ := testenv.Ledger(t)
	p, err := outbox.NewPublisher(db, outbox.Config{Table: table, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lost, putByAPI, young := ev("pay_lost"), ev("pay_api"), ev("pay_young")
	insertIntent(t, pool, lost, time.Minute)     // the API crashed before its put
	insertIntent(t, pool, putByAPI, time.Minute) // the API put it (the hot path never marks)
	insertIntent(t, pool, young, time.Second)    // inside the grace period
	if err := p.Publish(ctx, putByAPI); err != nil {
		t.Fatal(err)
	}
	s, err := outbox.NewSweeper(p, pool, outbox.SweepConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res != (outbox.SweepResult{Found: 2, Created: 1, Marked: 2}) {
		t.Fatalf("Sweep = %+v, want found 2, created 1 (the lost one), marked 2", res)
	}
	if getItem(t, db, table, lost.EventID) == nil {
		t.Error("the lost intent's item was not put")
	}
	if !published(t, pool, lost.EventID) || !published(t, pool, putByAPI.EventID) || published(t, pool, young.EventID) {
		t.Error("want the two old intents marked and the young one left alone")
	}
	if recs := streamRecords(t, stream); len(recs) != 2 {
		t.Errorf("stream has %d records, want 2 (the API's put and the sweep's re-put of the lost item)", len(recs))
	}
	if res, err := s.Sweep(ctx); err != nil || res.Found != 0 {
		t.Fatalf("second Sweep = %+v, %v; want nothing left", res, err)
	}
}

func TestSweepWorkIsBoundedByItsLimit(t *testing.T) {
	db := testenv.DynamoDB(t)
	table, _ := testenv.NewOutboxTable(t, db)
	pool, _ := testenv.Ledger(t)
	p, err := outbox.NewPublisher(db, outbox.Config{Table: table, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		insertIntent(t, pool, ev("pay_"+strconv.Itoa(i)), time.Duration(10-i)*time.Minute)
	}
	s, err := outbox.NewSweeper(p, pool, outbox.SweepConfig{Limit: 2, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	counts := []int{}
	for range 4 {
		res, err := s.Sweep(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		counts = append(counts, res.Marked)
	}
	if counts[0] != 2 || counts[1] != 2 || counts[2] != 1 || counts[3] != 0 {
		t.Fatalf("marked per sweep = %v, want [2 2 1 0]", counts)
	}
	if !published(t, pool, ids.EventID("pay_0", "SUCCEEDED")) {
		t.Error("the oldest intent was not among the first swept")
	}
}

func TestSweepLeavesAnIntentWhosePutFailedUnpublished(t *testing.T) {
	db := testenv.DynamoDB(t)
	pool, _ := testenv.Ledger(t)
	p, err := outbox.NewPublisher(db, outbox.Config{Table: "t-no-such-" + testenv.RandomID(4), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	e := ev("pay_x")
	insertIntent(t, pool, e, time.Minute)
	s, err := outbox.NewSweeper(p, pool, outbox.SweepConfig{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Sweep(context.Background())
	if err == nil || res.Failed != 1 || res.Marked != 0 {
		t.Fatalf("Sweep = %+v, %v; want the failure reported and nothing marked", res, err)
	}
	if published(t, pool, e.EventID) {
		t.Fatal("an intent whose put failed was marked published")
	}
}

func TestEventFromIntentRefusesAPayloadNamingAnotherEvent(t *testing.T) {
	e := ev("pay_a")
	payload, _ := e.Marshal()
	if got, err := outbox.EventFromIntent(outbox.Intent{EventID: e.EventID, PaymentID: e.PaymentID, MerchantID: "m1", Payload: payload}); err != nil || got != e {
		t.Fatalf("EventFromIntent = %+v, %v", got, err)
	}
	_, err := outbox.EventFromIntent(outbox.Intent{EventID: "pay_b:SUCCEEDED", PaymentID: "pay_b", MerchantID: "m1", Payload: payload})
	if err == nil {
		t.Fatal("a payload of another event was accepted")
	}
	if _, err := outbox.EventFromIntent(outbox.Intent{EventID: "x", Payload: []byte("{")}); err == nil {
		t.Fatal("a broken payload was accepted")
	}
}
