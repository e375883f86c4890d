package trigger_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/localcloud/invoke"
	"github.com/oncepay/oncepay/internal/localcloud/provision"
	"github.com/oncepay/oncepay/internal/localcloud/trigger"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

const region = "us-east-1"

// logicalID is the one resource of typ whose logical id starts with prefix.
func logicalID(t *testing.T, tpl *provision.Template, typ, prefix string) string {
	t.Helper()
	var found []string
	for _, id := range tpl.OfType(typ) {
		if len(id) > len(prefix) && id[:len(prefix)] == prefix {
			found = append(found, id)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s %s*: %v", typ, prefix, found)
	}
	return found[0]
}

// placeholders stands a physical resource for every table and queue of the
// template, so specs resolve without a provisioned local cloud.
func placeholders(tpl *provision.Template) map[string]provision.Physical {
	phys := map[string]provision.Physical{}
	for _, id := range tpl.OfType("AWS::DynamoDB::Table") {
		phys[id] = provision.Physical{Type: "AWS::DynamoDB::Table", Name: id, StreamArn: "arn:stream:" + id}
	}
	for _, id := range tpl.OfType("AWS::SQS::Queue") {
		phys[id] = provision.Physical{Type: "AWS::SQS::Queue", Name: id, Arn: "arn:aws:sqs:us-east-1:123456789012:" + id, URL: "http://q/" + id}
	}
	return phys
}

// The harness's settings come from the template; the CDK builds the
// template from eventsource.Default(). Both must say the same, or the
// local mappings play other numbers than the deployed ones.
func TestTemplateMappingsCarryTheSettingsTheCDKUses(t *testing.T) {
	tpl := testenv.Template(t)
	specs, err := trigger.Mappings(tpl, placeholders(tpl), region)
	if err != nil {
		t.Fatal(err)
	}
	relayFn := logicalID(t, tpl, "AWS::Lambda::Function", "RelayFunction")
	workerFn := logicalID(t, tpl, "AWS::Lambda::Function", "WorkerFunction")
	totalsFn := logicalID(t, tpl, "AWS::Lambda::Function", "TotalsFunction")
	recountFn := logicalID(t, tpl, "AWS::Lambda::Function", "TotalsRecountFunction")
	want := eventsource.Default()
	var sawRelay, sawWorker, sawTotals bool
	recounted := map[string]bool{}
	for _, m := range specs {
		switch m.Function {
		case relayFn:
			sawRelay = true
			if m.Kind != trigger.KindStream || m.Stream != want.Relay {
				t.Errorf("relay mapping %s: %s %+v, eventsource.Default().Relay = %+v", m.ID, m.Kind, m.Stream, want.Relay)
			}
			if m.OnFailureURL != "http://q/"+logicalID(t, tpl, "AWS::SQS::Queue", "RelayFailureQueue") {
				t.Errorf("relay on-failure destination = %q", m.OnFailureURL)
			}
		case totalsFn:
			sawTotals = true
			if m.Kind != trigger.KindStream || m.Stream != want.Totals || m.Stream.TumblingWindow == 0 {
				t.Errorf("totals mapping %s: %s %+v, eventsource.Default().Totals = %+v", m.ID, m.Kind, m.Stream, want.Totals)
			}
			if m.OnFailureURL != "http://q/"+logicalID(t, tpl, "AWS::SQS::Queue", "TotalsFailureQueue") {
				t.Errorf("totals on-failure destination = %q", m.OnFailureURL)
			}
		case workerFn:
			sawWorker = true
			if m.Kind != trigger.KindQueue || m.Queue != want.Worker {
				t.Errorf("worker mapping %s: %s %+v, eventsource.Default().Worker = %+v", m.ID, m.Kind, m.Queue, want.Worker)
			}
		case recountFn:
			recounted[m.QueueURL] = true
			// Six times the recount's one-minute timeout; ten deliveries
			// before the recount DLQ.
			wantQ := eventsource.Queue{BatchSize: 10, ReportBatchItemFailures: true, VisibilityTimeout: 6 * time.Minute, MaxReceiveCount: 10}
			if m.Kind != trigger.KindQueue || m.Queue != wantQ {
				t.Errorf("recount mapping %s: %s %+v, want %+v", m.ID, m.Kind, m.Queue, wantQ)
			}
		}
	}
	var recountQ string // TotalsRecount…, not TotalsRecountDlq…
	for _, id := range tpl.OfType("AWS::SQS::Queue") {
		if strings.HasPrefix(id, "TotalsRecount") && !strings.HasPrefix(id, "TotalsRecountDlq") {
			recountQ = id
		}
	}
	for _, q := range []string{recountQ, logicalID(t, tpl, "AWS::SQS::Queue", "TotalsFailureQueue")} {
		if q == "" || !recounted["http://q/"+q] {
			t.Errorf("no recount mapping on %q: %v", q, recounted)
		}
	}
	if !sawRelay || !sawWorker || !sawTotals || len(specs) != 5 {
		t.Fatalf("mappings = %+v", specs)
	}
}

func TestRatesParseAsEventBridgeWritesThem(t *testing.T) {
	for expr, want := range map[string]time.Duration{"rate(1 minute)": time.Minute, "rate(5 minutes)": 5 * time.Minute, "rate(2 hours)": 2 * time.Hour, "rate(1 day)": 24 * time.Hour} {
		if got, err := trigger.ParseRate(expr); err != nil || got != want {
			t.Errorf("%s = %v, %v", expr, got, err)
		}
	}
	for _, bad := range []string{"rate(1 minutes)", "rate(2 minute)", "rate(0 minutes)", "rate(1 second)", "cron(0 12 * * ? *)", "rate(x minutes)"} {
		if _, err := trigger.ParseRate(bad); err == nil {
			t.Errorf("%s parsed", bad)
		}
	}
}

// recorder is an in-process function that remembers each payload and
// answers as fn says.
type recorder struct {
	mu       sync.Mutex
	payloads [][]byte
	fn       func(call int, payload []byte) ([]byte, error)
}

func (r *recorder) handle(_ context.Context, payload []byte) ([]byte, error) {
	r.mu.Lock()
	r.payloads = append(r.payloads, payload)
	call := len(r.payloads) - 1
	r.mu.Unlock()
	if r.fn == nil {
		return nil, nil
	}
	return r.fn(call, payload)
}

func (r *recorder) calls() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.payloads)
}

// streamKeys are the event ids of a recorded stream batch.
func streamKeys(t *testing.T, payload []byte) []string {
	t.Helper()
	var ev events.DynamoDBEvent
	if err := json.Unmarshal(payload, &ev); err != nil {
		t.Fatalf("stream payload: %v", err)
	}
	var ids []string
	for _, r := range ev.Records {
		ids = append(ids, r.Change.Keys["event_id"].String())
	}
	return ids
}

// relayWorld is the template's relay mapping over an outbox table and an
// on-failure queue of the test's own.
type relayWorld struct {
	db      *dynamodb.Client
	sqs     *sqs.Client
	table   string
	failure testenv.Queue
	spec    trigger.MappingSpec
}

func newRelayWorld(t *testing.T) relayWorld {
	tpl := testenv.Template(t)
	db := testenv.DynamoDB(t)
	table, stream := testenv.NewOutboxTable(t, db)
	q := testenv.SQS(t)
	failure := testenv.NewStandardQueue(t, q)
	phys := placeholders(tpl)
	phys[logicalID(t, tpl, "AWS::DynamoDB::Table", "DataOutboxTable")] = provision.Physical{Type: "AWS::DynamoDB::Table", Name: table, StreamArn: stream}
	phys[logicalID(t, tpl, "AWS::SQS::Queue", "RelayFailureQueue")] = provision.Physical{Type: "AWS::SQS::Queue", Arn: failure.Arn, URL: failure.URL}
	specs, err := trigger.Mappings(tpl, phys, region)
	if err != nil {
		t.Fatal(err)
	}
	relayFn := logicalID(t, tpl, "AWS::Lambda::Function", "RelayFunction")
	for _, s := range specs {
		if s.Function == relayFn {
			return relayWorld{db: db, sqs: q, table: table, failure: failure, spec: s}
		}
	}
	t.Fatal("no relay mapping in the template")
	return relayWorld{}
}

func (w relayWorld) put(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := w.db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: &w.table, Item: map[string]ddbtypes.AttributeValue{
			"event_id": &ddbtypes.AttributeValueMemberS{Value: id},
		}}); err != nil {
			t.Fatal(err)
		}
	}
}

// run plays the mapping over inv until the test ends.
func (w relayWorld) run(t *testing.T, inv invoke.Invoker) *trigger.Mapping {
	t.Helper()
	m, err := trigger.NewMapping(w.spec, trigger.Clients{Streams: testenv.DynamoDBStreams(t), Queues: w.sqs, Send: w.sqs}, inv,
		trigger.MappingOptions{Region: region, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return m
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRelayMappingPlaysOutboxPutsThroughTheInvokerInOneBatch(t *testing.T) {
	w := newRelayWorld(t)
	w.put(t, "pay_1:SUCCEEDED", "pay_2:SUCCEEDED", "pay_3:FAILED")
	relay := &recorder{}
	w.run(t, invoke.Func{w.spec.Function: relay.handle})
	eventually(t, 15*time.Second, "three records reach the relay", func() bool {
		n := 0
		for _, p := range relay.calls() {
			n += len(streamKeys(t, p))
		}
		return n >= 3
	})
	calls := relay.calls()
	// BatchSize 100 and no batching window: puts already on the stream go
	// in one invocation, in stream order.
	if got := streamKeys(t, calls[0]); len(calls) != 1 || !slices.Equal(got, []string{"pay_1:SUCCEEDED", "pay_2:SUCCEEDED", "pay_3:FAILED"}) {
		t.Fatalf("%d invocations, first %v", len(calls), got)
	}
	var ev events.DynamoDBEvent
	_ = json.Unmarshal(calls[0], &ev)
	if r := ev.Records[0]; r.EventSource != "aws:dynamodb" || r.EventName != "INSERT" || r.AWSRegion != region || r.Change.SequenceNumber == "" {
		t.Fatalf("record as sent = %+v", r)
	}
}

// A record the relay can never send fails its batch: bisect isolates it,
// the template's MaximumRetryAttempts retries run, and its on-failure
// record lands in the mapping's on-failure queue; the healthy record is
// relayed once.
func TestRelayMappingFunctionErrorRetriesBisectsAndSendsTheFailureRecordToTheOnFailureQueue(t *testing.T) {
	w := newRelayWorld(t)
	w.put(t, "pay_ok:SUCCEEDED", "pay_poison:SUCCEEDED")
	relay := &recorder{fn: func(_ int, payload []byte) ([]byte, error) {
		if slices.Contains(streamKeys(t, payload), "pay_poison:SUCCEEDED") {
			return nil, errors.New("relay: send: poison")
		}
		return nil, nil
	}}
	m := w.run(t, invoke.Func{w.spec.Function: relay.handle})
	var failures []sqstypes.Message
	eventually(t, 30*time.Second, "an on-failure record", func() bool {
		failures = append(failures, testenv.Messages(t, w.sqs, w.failure.URL)...)
		return len(failures) > 0
	})
	var f harness.StreamFailure
	if err := json.Unmarshal([]byte(aws.ToString(failures[0].Body)), &f); err != nil {
		t.Fatal(err)
	}
	retries := w.spec.Stream.MaxRetryAttempts
	if len(failures) != 1 || f.RequestContext.Condition != "RetryAttemptsExhausted" || f.BatchInfo.BatchSize != 1 ||
		f.RequestContext.ApproximateInvokeCount != retries+1 || f.RequestContext.FunctionArn != w.spec.FunctionArn {
		t.Fatalf("%d failure records, first %+v", len(failures), f)
	}
	ok, poison := 0, 0
	for _, p := range relay.calls() {
		keys := streamKeys(t, p)
		if len(keys) == 1 && keys[0] == "pay_ok:SUCCEEDED" {
			ok++
		}
		if len(keys) == 1 && keys[0] == "pay_poison:SUCCEEDED" {
			poison++
		}
	}
	st := m.Status().Stats.(trigger.StreamStats)
	if ok != 1 || poison != retries+1 || st.Bisections != 1 || st.Discarded != 1 {
		t.Fatalf("healthy record relayed alone %d times, poison alone %d times (want 1 and %d); stats %+v", ok, poison, retries+1, st)
	}
}

// A throttled invocation never ran: Lambda retries it without counting an
// attempt, so more throttles than MaximumRetryAttempts lose nothing.
func TestRelayMappingThrottleDoesNotConsumeARetry(t *testing.T) {
	w := newRelayWorld(t)
	w.put(t, "pay_busy:SUCCEEDED")
	throttles := w.spec.Stream.MaxRetryAttempts + 2
	var mu sync.Mutex
	seen := 0
	relay := &recorder{}
	inv := invokerFunc(func(ctx context.Context, fn string, payload []byte) ([]byte, error) {
		mu.Lock()
		seen++
		n := seen
		mu.Unlock()
		if n <= throttles {
			return nil, invoke.ErrThrottled
		}
		return relay.handle(ctx, payload)
	})
	m := w.run(t, inv)
	eventually(t, 30*time.Second, "the record reaches the relay after the throttles", func() bool { return len(relay.calls()) > 0 })
	st := m.Status().Stats.(trigger.StreamStats)
	if got := streamKeys(t, relay.calls()[0]); !slices.Equal(got, []string{"pay_busy:SUCCEEDED"}) || st.Throttles != throttles || st.Discarded != 0 || st.Retries != 0 {
		t.Fatalf("relayed %v; stats %+v", got, st)
	}
	if f := testenv.Messages(t, w.sqs, w.failure.URL); len(f) != 0 {
		t.Fatalf("on-failure queue holds %d records", len(f))
	}
}

type invokerFunc func(ctx context.Context, fn string, payload []byte) ([]byte, error)

func (f invokerFunc) Invoke(ctx context.Context, fn string, payload []byte) ([]byte, error) {
	return f(ctx, fn, payload)
}

// The worker mapping as the template declares it, over an events queue of
// the test's own: a throttled batch is retried in place, so it reaches the
// worker on its first receive (no receive spent, none nearer the DLQ), and
// the worker's partial batch failure keeps only the reported message.
func TestWorkerMappingThrottleIsRetriedInPlaceAndAPartialFailureKeepsOnlyTheReportedMessage(t *testing.T) {
	tpl := testenv.Template(t)
	q := testenv.SQS(t)
	eventsQ := testenv.NewFIFOQueue(t, q, 30*time.Second, 5)
	phys := placeholders(tpl)
	phys[logicalID(t, tpl, "AWS::SQS::Queue", "DataEventsQueue")] = provision.Physical{Type: "AWS::SQS::Queue", Arn: eventsQ.Arn, URL: eventsQ.URL}
	specs, err := trigger.Mappings(tpl, phys, region)
	if err != nil {
		t.Fatal(err)
	}
	workerFn := logicalID(t, tpl, "AWS::Lambda::Function", "WorkerFunction")
	var spec trigger.MappingSpec
	for _, s := range specs {
		if s.Function == workerFn {
			spec = s
		}
	}
	for _, body := range []string{"keep", "fail"} {
		if _, err := q.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(eventsQ.URL), MessageBody: aws.String(body),
			MessageGroupId: aws.String("m1"), MessageDeduplicationId: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	var calls atomic.Int32
	var mu sync.Mutex
	var got []events.SQSMessage
	inv := invokerFunc(func(_ context.Context, fn string, payload []byte) ([]byte, error) {
		if calls.Add(1) <= 3 {
			return nil, invoke.ErrThrottled
		}
		var ev events.SQSEvent
		if err := json.Unmarshal(payload, &ev); err != nil {
			return nil, err
		}
		mu.Lock()
		got = append(got, ev.Records...)
		mu.Unlock()
		var resp events.SQSEventResponse
		for _, r := range ev.Records {
			if r.Body == "fail" {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: r.MessageId})
			}
		}
		return json.Marshal(resp)
	})
	m, err := trigger.NewMapping(spec, trigger.Clients{Queues: q, Send: q}, inv, trigger.MappingOptions{Region: region, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	eventually(t, 10*time.Second, "the batch reaches the worker after the throttles", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 2
	})
	eventually(t, 5*time.Second, "the kept message deleted", func() bool { return m.Status().Stats.(trigger.QueueStats).Deleted == 1 })
	cancel()
	<-done
	st := m.Status().Stats.(trigger.QueueStats)
	for _, r := range got {
		if r.Attributes["ApproximateReceiveCount"] != "1" || r.EventSourceARN != eventsQ.Arn {
			t.Errorf("%s delivered with receive count %s from %s", r.Body, r.Attributes["ApproximateReceiveCount"], r.EventSourceARN)
		}
	}
	if st.Throttles != 3 || st.Invocations != 1 || st.ItemFailures != 1 || st.FunctionErrors != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A stop that comes while the worker runs lets the invocation finish and
// still deletes what it processed: the restarted stack must not get the
// message again after its visibility timeout.
func TestWorkerMappingStoppedMidInvocationStillDeletesWhatTheWorkerProcessed(t *testing.T) {
	tpl := testenv.Template(t)
	q := testenv.SQS(t)
	eventsQ := testenv.NewFIFOQueue(t, q, 2*time.Second, 5)
	phys := placeholders(tpl)
	phys[logicalID(t, tpl, "AWS::SQS::Queue", "DataEventsQueue")] = provision.Physical{Type: "AWS::SQS::Queue", Arn: eventsQ.Arn, URL: eventsQ.URL}
	specs, err := trigger.Mappings(tpl, phys, region)
	if err != nil {
		t.Fatal(err)
	}
	spec := specs[len(specs)-1]
	if spec.Kind != trigger.KindQueue {
		t.Fatalf("last mapping = %+v", spec)
	}
	if _, err := q.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(eventsQ.URL), MessageBody: aws.String("e1"),
		MessageGroupId: aws.String("m1"), MessageDeduplicationId: aws.String("e1")}); err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	inv := invokerFunc(func(context.Context, string, []byte) ([]byte, error) {
		once.Do(func() { close(started) })
		<-release
		return nil, nil
	})
	m, err := trigger.NewMapping(spec, trigger.Clients{Queues: q, Send: q}, inv, trigger.MappingOptions{Region: region, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.Run(ctx) }()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker was never invoked")
	}
	cancel()
	close(release)
	<-done
	time.Sleep(2500 * time.Millisecond) // past the visibility timeout: an undeleted message is back
	if left := testenv.Messages(t, q, eventsQ.URL); len(left) != 0 {
		t.Fatalf("%d processed messages came back after the stop", len(left))
	}
}

// A batch over Lambda's invocation limit is a failed batch (retried, split,
// discarded per the mapping), never one that "did not run" and is retried
// in place forever.
func TestABatchOverTheInvocationLimitFailsAsABatch(t *testing.T) {
	inv := invokerFunc(func(context.Context, string, []byte) ([]byte, error) {
		return nil, invoke.ErrPayloadTooLarge
	})
	_, serr := trigger.StreamHandler(inv, "RelayFunction")(context.Background(), events.DynamoDBEvent{})
	_, qerr := trigger.QueueHandler(inv, "WorkerFunction")(context.Background(), events.SQSEvent{})
	for _, err := range []error{serr, qerr} {
		var fe *invoke.FunctionError
		if !errors.As(err, &fe) || errors.Is(err, harness.ErrNotInvoked) || fe.Type != "RequestEntityTooLargeException" {
			t.Errorf("err = %v, want a RequestEntityTooLargeException function error", err)
		}
	}
}
