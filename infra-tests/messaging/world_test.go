// Package messaging_test runs the story's messaging beats
// (docs/mechanism.md#seed-part-6, docs/mechanism.md#seed-part-7) on the local
// cloud: outbox table and stream in DynamoDB Local, the events FIFO queue,
// its DLQ and the push topic in moto, the ledger in PostgreSQL, and the
// harness playing Lambda's event-source mappings between them. Every test
// builds its own world (tables, queues, topic, database) so tests run in
// parallel and never meet.
package messaging_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/relay"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
	"github.com/oncepay/oncepay/internal/testkit/worldtest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// syncBuffer collects EMF lines written from several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) sum(name string) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return metrics.Sum(b.buf.Bytes(), name)
}

// options shape a world.
type options struct {
	settings eventsource.Settings
	relay    func(harness.StreamHandler) harness.StreamHandler         // wraps the relay's handler
	relaySQS func(relay.SendMessageBatchAPI) relay.SendMessageBatchAPI // wraps the relay's SQS client
	worker   func(*inbox.Config)
	handler  func(harness.QueueHandler) harness.QueueHandler // wraps the worker's handler
	queue    func(*harness.QueueConfig)
	// api, when set, is the payment world the path runs behind: its ledger
	// database and the stream of its outbox table, which its API handler
	// publishes to, instead of a database and a table of the world's own.
	api *worldtest.World
}

type world struct {
	t      testing.TB
	ctx    context.Context
	pool   *pgxpool.Pool
	db     *dynamodb.Client
	sqs    *sqs.Client
	sns    *sns.Client
	table  string
	queue  testenv.Queue
	topic  string
	watch  testenv.Queue // subscribed to the topic: every push lands here
	emf    *syncBuffer
	pub    *outbox.Publisher
	worker *inbox.Worker
	stream *harness.StreamPoller
	poller *harness.QueuePoller
	pushes *harness.PushQueue
	phone  *harness.Phone
}

func newWorld(t testing.TB, o options) *world {
	t.Helper()
	if o.settings == (eventsource.Settings{}) {
		o.settings = eventsource.Default()
	}
	w := &world{t: t, ctx: context.Background(), emf: &syncBuffer{}, phone: harness.NewPhone()}
	w.db, w.sqs, w.sns = testenv.DynamoDB(t), testenv.SQS(t), testenv.SNS(t)
	var streamArn string
	var err error
	if o.api != nil {
		w.pool, w.table, streamArn, w.pub = o.api.Pool, o.api.OutboxTable, o.api.OutboxStream, o.api.Outbox
	} else {
		w.pool, _ = testenv.Ledger(t)
		w.table, streamArn = testenv.NewOutboxTable(t, w.db)
		if w.pub, err = outbox.NewPublisher(w.db, outbox.Config{Table: w.table, Logger: quiet}); err != nil {
			t.Fatal(err)
		}
	}
	// Seed m1's balance as the story has it before the tap.
	if _, err := w.pool.Exec(w.ctx, `INSERT INTO merchant_balances (merchant_id, currency, balance) VALUES ('m1', 'USD', 12000)`); err != nil {
		t.Fatal(err)
	}
	w.queue = testenv.NewFIFOQueue(t, w.sqs, o.settings.Worker.VisibilityTimeout, o.settings.Worker.MaxReceiveCount)
	w.topic = testenv.NewTopic(t, w.sns)
	w.watch = testenv.NewStandardQueue(t, w.sqs)
	testenv.SubscribeQueue(t, w.sns, w.topic, w.watch.Arn, true)
	w.pushes = harness.NewPushQueue(w.sqs, w.watch.URL)

	var relaySQS relay.SendMessageBatchAPI = w.sqs
	if o.relaySQS != nil {
		relaySQS = o.relaySQS(relaySQS)
	}
	r, err := relay.New(relaySQS, relay.Config{QueueURL: w.queue.URL, Logger: quiet, Metrics: metrics.New(w.emf, "relay")})
	if err != nil {
		t.Fatal(err)
	}
	var handler harness.StreamHandler = r.Handle
	if o.relay != nil {
		handler = o.relay(handler)
	}
	if w.stream, err = harness.NewStreamPoller(testenv.DynamoDBStreams(t), handler, harness.StreamConfig{
		StreamArn: streamArn, Settings: o.settings.Relay, Logger: quiet,
	}); err != nil {
		t.Fatal(err)
	}
	m := metrics.New(w.emf, "worker")
	n, err := notify.New(w.sns, nil, notify.Config{TopicArn: w.topic, Logger: quiet, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	cfg := inbox.Config{MaxReceiveCount: o.settings.Worker.MaxReceiveCount, Logger: quiet, Metrics: m}
	if o.worker != nil {
		o.worker(&cfg)
	}
	if w.worker, err = inbox.New(w.pool, n, cfg); err != nil {
		t.Fatal(err)
	}
	qc := harness.QueueConfig{QueueURL: w.queue.URL, QueueArn: w.queue.Arn, Settings: o.settings.Worker, Logger: quiet}
	if o.queue != nil {
		o.queue(&qc)
	}
	var work harness.QueueHandler = w.worker.Handle
	if o.handler != nil {
		work = o.handler(work)
	}
	if w.poller, err = harness.NewQueuePoller(w.sqs, work, qc); err != nil {
		t.Fatal(err)
	}
	return w
}

// pay returns the event of a payment that reached state.
func pay(pid, merchant, state string, amount int64) event.Event {
	return event.Event{
		EventID: ids.EventID(pid, state), PaymentID: pid, State: state, MerchantID: merchant,
		CallerID: "u1", Amount: amount, Currency: "USD", OccurredAt: time.Unix(1_800_000_000, 0).UTC(),
	}
}

// publish puts events into the outbox, as the API does after its commit.
func (w *world) publish(evs ...event.Event) {
	w.t.Helper()
	for _, e := range evs {
		if err := w.pub.Publish(w.ctx, e); err != nil {
			w.t.Fatal(err)
		}
	}
}

// relayAll runs the stream mapping until it has nothing to deliver.
func (w *world) relayAll() {
	w.t.Helper()
	if _, err := w.stream.Drain(w.ctx); err != nil {
		w.t.Fatal(err)
	}
}

// work runs the queue mapping until a receive comes back empty.
func (w *world) work() {
	w.t.Helper()
	if _, err := w.poller.Drain(w.ctx); err != nil {
		w.t.Fatal(err)
	}
}

// redeliver lets the visibility timeout of every message left in flight run
// out, then works the queue again.
func (w *world) redeliver() {
	w.t.Helper()
	if _, err := w.poller.Expire(w.ctx); err != nil {
		w.t.Fatal(err)
	}
	w.work()
}

// collect moves the pushes the topic delivered so far onto the phone and
// returns them.
func (w *world) collect() []notify.Data {
	w.t.Helper()
	got, err := w.pushes.Collect(w.ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	w.phone.Receive(got...)
	return got
}

func (w *world) balance(merchant string) int64 {
	w.t.Helper()
	var b int64
	if err := w.pool.QueryRow(w.ctx, `SELECT COALESCE((SELECT balance FROM merchant_balances WHERE merchant_id = $1 AND currency = 'USD'), 0)`, merchant).Scan(&b); err != nil {
		w.t.Fatal(err)
	}
	return b
}

func (w *world) scalar(query string, args ...any) int {
	w.t.Helper()
	var n int
	if err := w.pool.QueryRow(w.ctx, query, args...).Scan(&n); err != nil {
		w.t.Fatal(err)
	}
	return n
}

func (w *world) notifState(eventID string) string {
	w.t.Helper()
	var s string
	if err := w.pool.QueryRow(w.ctx, `SELECT state FROM notif WHERE event_id = $1`, eventID).Scan(&s); err != nil {
		w.t.Fatal(err)
	}
	return s
}

// creditOrder returns the event ids credited to merchant, in commit order.
func (w *world) creditOrder(merchant string) []string {
	w.t.Helper()
	rows, err := w.pool.Query(w.ctx, `SELECT event_id FROM credits WHERE merchant_id = $1 ORDER BY credit_id`, merchant)
	if err != nil {
		w.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			w.t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

// waitFor polls cond until it holds or 10 s pass.
func (w *world) waitFor(what string, cond func() bool) {
	w.t.Helper()
	// A liveness wait, not a measure: generous, so a loaded machine (CI
	// runs packages side by side) cannot fail a condition that holds.
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			w.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
