package harness_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type streamWorld struct {
	db     *dynamodb.Client
	table  string
	stream string
}

func newStreamWorld(t *testing.T) streamWorld {
	db := testenv.DynamoDB(t)
	table, stream := testenv.NewOutboxTable(t, db)
	return streamWorld{db: db, table: table, stream: stream}
}

func (w streamWorld) put(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := w.db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &w.table, Item: map[string]types.AttributeValue{
			"event_id": &types.AttributeValueMemberS{Value: id},
			"n":        &types.AttributeValueMemberN{Value: "7"},
			"tags":     &types.AttributeValueMemberSS{Value: []string{"a", "b"}},
		}}); err != nil {
			t.Fatal(err)
		}
	}
}

// recorder is a stream handler that remembers every batch by item id and
// answers as fn says.
type recorder struct {
	mu      sync.Mutex
	batches [][]string
	fn      func(call int, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error)
}

func key(r events.DynamoDBEventRecord) string {
	if v, ok := r.Change.Keys["event_id"]; ok {
		return v.String()
	}
	return ""
}

func (h *recorder) handle(_ context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	h.mu.Lock()
	var ids []string
	for _, r := range ev.Records {
		ids = append(ids, key(r))
	}
	h.batches = append(h.batches, ids)
	call := len(h.batches) - 1
	h.mu.Unlock()
	if h.fn == nil {
		return events.DynamoDBEventResponse{}, nil
	}
	return h.fn(call, ev)
}

func settings(mod func(*eventsource.Stream)) eventsource.Stream {
	s := eventsource.DefaultStream()
	mod(&s)
	return s
}

func TestStreamRecordsArriveAsLambdaSendsThem(t *testing.T) {
	w := newStreamWorld(t)
	w.put(t, "e1")
	if _, err := w.db.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: &w.table,
		Key: map[string]types.AttributeValue{"event_id": &types.AttributeValueMemberS{Value: "e1"}}}); err != nil {
		t.Fatal(err)
	}
	var got events.DynamoDBEvent
	p, err := harness.NewStreamPoller(testenv.DynamoDBStreams(t), func(_ context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		got.Records = append(got.Records, ev.Records...)
		return events.DynamoDBEventResponse{}, nil
	}, harness.StreamConfig{StreamArn: w.stream, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(got.Records) != 2 || got.Records[0].EventName != "INSERT" || got.Records[1].EventName != "REMOVE" {
		t.Fatalf("records = %+v, want INSERT then REMOVE", got.Records)
	}
	r := got.Records[0]
	if r.EventSource != "aws:dynamodb" || r.EventSourceArn != w.stream || r.Change.SequenceNumber == "" ||
		r.Change.NewImage["n"].Number() != "7" || !slices.Equal(r.Change.NewImage["tags"].StringSet(), []string{"a", "b"}) {
		t.Fatalf("INSERT record = %+v", r)
	}
}

func TestStreamPartialFailureRetriesFromTheFailedRecord(t *testing.T) {
	w := newStreamWorld(t)
	w.put(t, "e0", "e1", "e2", "e3", "e4")
	h := &recorder{fn: func(call int, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		if call == 0 {
			return events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{
				{ItemIdentifier: ev.Records[3].Change.SequenceNumber}, {ItemIdentifier: ev.Records[2].Change.SequenceNumber},
			}}, nil
		}
		return events.DynamoDBEventResponse{}, nil
	}}
	p, err := harness.NewStreamPoller(testenv.DynamoDBStreams(t), h.handle, harness.StreamConfig{
		StreamArn: w.stream, Logger: quiet,
		Settings: settings(func(s *eventsource.Stream) { s.ReportBatchItemFailures = true }),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"e0", "e1", "e2", "e3", "e4"}, {"e2", "e3", "e4"}}
	if fmt.Sprint(h.batches) != fmt.Sprint(want) {
		t.Fatalf("batches = %v, want %v (retry from the lowest reported record)", h.batches, want)
	}
	// Acked counts each record once: e0 and e1 at the partial failure, the
	// rest at the retry (Records counts e2-e4 twice).
	if s := p.Stats(); s.PartialFailures != 1 || s.Retries != 1 || s.Discarded != 0 || s.Acked != 5 || s.Records != 8 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestStreamItemFailureNotInTheBatchFailsTheWholeBatch(t *testing.T) {
	w := newStreamWorld(t)
	w.put(t, "e0", "e1")
	h := &recorder{fn: func(call int, _ events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		if call == 0 {
			return events.DynamoDBEventResponse{BatchItemFailures: []events.DynamoDBBatchItemFailure{{ItemIdentifier: ""}}}, nil
		}
		return events.DynamoDBEventResponse{}, nil
	}}
	p, err := harness.NewStreamPoller(testenv.DynamoDBStreams(t), h.handle, harness.StreamConfig{
		StreamArn: w.stream, Logger: quiet,
		Settings: settings(func(s *eventsource.Stream) { s.ReportBatchItemFailures = true }),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(h.batches) != 2 || len(h.batches[1]) != 2 || p.Stats().FunctionErrors != 1 {
		t.Fatalf("batches = %v, stats %+v; want the whole batch retried", h.batches, p.Stats())
	}
}

func TestStreamBisectIsolatesAPoisonRecordAndDiscardsOnlyIt(t *testing.T) {
	w := newStreamWorld(t)
	ids := []string{"e0", "e1", "e2", "e3", "e4", "poison", "e6", "e7"}
	w.put(t, ids...)
	var delivered []string
	h := &recorder{fn: func(_ int, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		for _, r := range ev.Records {
			if key(r) == "poison" {
				return events.DynamoDBEventResponse{}, errors.New("cannot handle poison")
			}
		}
		for _, r := range ev.Records {
			delivered = append(delivered, key(r))
		}
		return events.DynamoDBEventResponse{}, nil
	}}
	var failures []harness.StreamFailure
	p, err := harness.NewStreamPoller(testenv.DynamoDBStreams(t), h.handle, harness.StreamConfig{
		StreamArn: w.stream, Logger: quiet,
		Settings: settings(func(s *eventsource.Stream) {
			s.BisectOnError, s.MaxRetryAttempts, s.ReportBatchItemFailures = true, 2, true
		}),
		OnFailure: func(_ context.Context, f harness.StreamFailure) error { failures = append(failures, f); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(failures) != 1 || failures[0].BatchInfo.BatchSize != 1 || failures[0].RequestContext.Condition != "RetryAttemptsExhausted" {
		t.Fatalf("on-failure records = %+v, want one, of the poison record alone", failures)
	}
	if failures[0].RequestContext.ApproximateInvokeCount != 3 {
		t.Errorf("approximateInvokeCount = %d, want 3 (1 + 2 retries)", failures[0].RequestContext.ApproximateInvokeCount)
	}
	if want := []string{"e0", "e1", "e2", "e3", "e4", "e6", "e7"}; !slices.Equal(delivered, want) {
		t.Fatalf("delivered %v, want every other record once, in order: %v", delivered, want)
	}
	// Acked leaves out the discarded record, however the batches split.
	if s := p.Stats(); s.Discarded != 1 || s.Bisections == 0 || s.Acked != len(ids)-1 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestStreamRetriesExhaustedGoToAnSQSDestination(t *testing.T) {
	w := newStreamWorld(t)
	w.put(t, "e0", "e1", "e2")
	client := testenv.SQS(t)
	dest := testenv.NewStandardQueue(t, client)
	h := &recorder{fn: func(int, events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		return events.DynamoDBEventResponse{}, errors.New("down")
	}}
	p, err := harness.NewStreamPoller(testenv.DynamoDBStreams(t), h.handle, harness.StreamConfig{
		StreamArn: w.stream, Logger: quiet, FunctionArn: "arn:aws:lambda:us-east-1:000000000000:function:relay",
		Settings:  settings(func(s *eventsource.Stream) { s.MaxRetryAttempts = 2 }),
		OnFailure: harness.SQSDestination(client, dest.URL),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(h.batches) != 3 {
		t.Fatalf("%d invocations, want 3 (1 + MaxRetryAttempts 2)", len(h.batches))
	}
	msgs := testenv.Messages(t, client, dest.URL)
	if len(msgs) != 1 {
		t.Fatalf("destination holds %d records, want 1", len(msgs))
	}
	var f harness.StreamFailure
	if err := json.Unmarshal([]byte(aws.ToString(msgs[0].Body)), &f); err != nil {
		t.Fatal(err)
	}
	if f.BatchInfo.BatchSize != 3 || f.BatchInfo.StreamArn != w.stream || f.RequestContext.ApproximateInvokeCount != 3 ||
		f.RequestContext.FunctionArn != "arn:aws:lambda:us-east-1:000000000000:function:relay" || f.ResponseContext.FunctionError != "Unhandled" {
		t.Fatalf("on-failure record = %+v", f)
	}
	// The shard moved on: a new record is delivered, the discarded ones are not.
	h.fn = nil
	w.put(t, "e3")
	if _, err := p.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if last := h.batches[len(h.batches)-1]; !slices.Equal(last, []string{"e3"}) {
		t.Fatalf("after the discard the handler got %v, want [e3]", last)
	}
}

func TestStreamLatestSkipsWhatWasThereAndBatchSizeIsHonoured(t *testing.T) {
	w := newStreamWorld(t)
	w.put(t, "old")
	h := &recorder{}
	p, err := harness.NewStreamPoller(testenv.DynamoDBStreams(t), h.handle, harness.StreamConfig{
		StreamArn: w.stream, Logger: quiet,
		Settings: settings(func(s *eventsource.Stream) { s.StartingPosition, s.BatchSize = eventsource.Latest, 2 }),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.put(t, "n1", "n2", "n3")
	if _, err := p.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := [][]string{{"n1", "n2"}, {"n3"}}; fmt.Sprint(h.batches) != fmt.Sprint(want) {
		t.Fatalf("batches = %v, want %v", h.batches, want)
	}
}
