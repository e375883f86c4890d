package messaging_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncepay/oncepay/cdk/oncepay/eventsource"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/relay"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// breakableSQS fails every send while broken is set: SQS unreachable.
type breakableSQS struct {
	next   relay.SendMessageBatchAPI
	broken atomic.Bool
}

func (b *breakableSQS) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	if b.broken.Load() {
		return nil, errors.New("injected: SQS unreachable")
	}
	return b.next.SendMessageBatch(ctx, in, opts...)
}

// recordIntent writes what the ledger's settle transaction writes for e: the
// payment row and its outbox intent, committed a minute ago (past the
// sweep's grace).
func (w *world) recordIntent(e event.Event) {
	w.t.Helper()
	payload, err := e.Marshal()
	if err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.pool.Exec(w.ctx, `
		INSERT INTO payments (payment_id, caller_id, client_key, fingerprint, amount, currency, state, merchant_id)
		VALUES ($1, $2, $1, 'H1', $3, $4, $5, $6)`, e.PaymentID, e.CallerID, e.Amount, e.Currency, e.State, e.MerchantID); err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.pool.Exec(w.ctx, `
		INSERT INTO outbox_intents (event_id, payment_id, merchant_id, payload, created_at)
		VALUES ($1, $2, $3, $4, now() - interval '1 minute')`, e.EventID, e.PaymentID, e.MerchantID, payload); err != nil {
		w.t.Fatal(err)
	}
}

// sweeper is the resolver's outbox sweep over the world's ledger and table,
// counting into the world's metrics.
func (w *world) sweeper() *outbox.Sweeper {
	w.t.Helper()
	s, err := outbox.NewSweeper(w.pub, w.pool, outbox.SweepConfig{Logger: quiet, Metrics: metrics.New(w.emf, "resolver")})
	if err != nil {
		w.t.Fatal(err)
	}
	return s
}

func (w *world) sweep(s *outbox.Sweeper) outbox.SweepResult {
	w.t.Helper()
	res, err := s.Sweep(w.ctx)
	if err != nil {
		w.t.Fatalf("sweep = %+v, %v", res, err)
	}
	return res
}

// later moves every intent's creation and last re-drive d into the past:
// the sweep measures on the database's clock, which a test cannot wait on.
func (w *world) later(d time.Duration) {
	w.t.Helper()
	if _, err := w.pool.Exec(w.ctx, `
		UPDATE outbox_intents SET created_at = created_at - make_interval(secs => $1),
		                          redriven_at = redriven_at - make_interval(secs => $1)`, d.Seconds()); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) published(eventID string) bool {
	w.t.Helper()
	return w.scalar(`SELECT count(*) FROM outbox_intents WHERE event_id = $1 AND published_at IS NOT NULL`, eventID) == 1
}

// Issue 13, defect 2: "the relay gives up, the sweep marks it published,
// the event is lost". SQS is unreachable for longer than the stream
// mapping's retries, so the mapping discards the record (its on-failure
// destination gets shard and sequence numbers only). The old sweep found
// the outbox item there and marked the intent published: m1 was never
// credited and the buyer never notified. Now the sweep marks nothing the
// consumer's inbox does not hold and re-drives the event (a new stream
// record, same event id) until it does; re-drives are throttled per intent.
func TestRelayGaveUp_SweepRedrivesUntilConsumed(t *testing.T) {
	t.Parallel()
	var broken *breakableSQS
	w := newWorld(t, options{relaySQS: func(next relay.SendMessageBatchAPI) relay.SendMessageBatchAPI {
		broken = &breakableSQS{next: next}
		return broken
	}})
	ev7 := pay("pay_7", "m1", inbox.Succeeded, 3000)
	w.recordIntent(ev7)
	w.publish(ev7) // the API's put after its commit

	broken.broken.Store(true)
	w.relayAll() // every retry fails; the mapping gives up on the record
	if st := w.stream.Stats(); st.Discarded != 1 {
		t.Fatalf("relay stats = %+v, want the record discarded after the retries", st)
	}
	s := w.sweeper()
	if res := w.sweep(s); res.Marked != 0 || res.Redriven != 1 || w.published(ev7.EventID) {
		t.Fatalf("sweep after the relay gave up = %+v (published %v); want it re-driven, not marked", res, w.published(ev7.EventID))
	}
	w.relayAll() // SQS still down: the re-drive's record is given up on too
	if st := w.stream.Stats(); st.Discarded != 2 {
		t.Fatalf("relay stats = %+v, want the re-drive's record discarded as well", st)
	}
	if res := w.sweep(s); res != (outbox.SweepResult{}) {
		t.Fatalf("sweep right after a re-drive = %+v, want nothing (throttled)", res)
	}

	broken.broken.Store(false) // SQS recovers
	w.later(6 * time.Minute)
	if res := w.sweep(s); res.Redriven != 1 || res.Marked != 0 {
		t.Fatalf("sweep after SQS recovered = %+v, want one re-drive", res)
	}
	w.relayAll()
	w.work()
	if b, n := w.balance("m1"), w.scalar(`SELECT count(*) FROM credits`); b != 15000 || n != 1 {
		t.Fatalf("m1 = %d with %d credits, want 12000 -> 15000, credited once", b, n)
	}
	if got := w.collect(); len(got) != 1 || got[0].ReplaceID != "pay_7" || w.notifState(ev7.EventID) != inbox.NotifSent {
		t.Fatalf("pushes = %+v, want one for pay_7, SENT", got)
	}
	if res := w.sweep(s); res != (outbox.SweepResult{Marked: 1}) || !w.published(ev7.EventID) {
		t.Fatalf("sweep after the worker had it = %+v, want it marked published", res)
	}
	w.later(2 * time.Hour)
	if res := w.sweep(s); res != (outbox.SweepResult{}) {
		t.Fatalf("a later sweep = %+v, want nothing", res)
	}
	if got := w.emf.sum(outbox.MetricRedriven); got != 2 {
		t.Fatalf("%s = %v, want 2", outbox.MetricRedriven, got)
	}
	if n := w.scalar(`SELECT redrives FROM outbox_intents WHERE event_id = $1`, ev7.EventID); n != 2 {
		t.Fatalf("the intent records %d re-drives, want 2", n)
	}
}

// An intent the consumer has processed is marked by the next sweep and
// never re-driven, however old it gets.
func TestAConsumedIntentIsMarkedAndNeverRedriven(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{})
	ev7 := pay("pay_7", "m1", inbox.Succeeded, 3000)
	w.recordIntent(ev7)
	w.publish(ev7)
	w.relayAll()
	w.work()
	records := w.stream.Stats().Records
	s := w.sweeper()
	if res := w.sweep(s); res != (outbox.SweepResult{Marked: 1}) || !w.published(ev7.EventID) {
		t.Fatalf("sweep = %+v, want the consumed intent marked and nothing re-driven", res)
	}
	w.later(24 * time.Hour)
	if res := w.sweep(s); res != (outbox.SweepResult{}) {
		t.Fatalf("a day later: sweep = %+v, want nothing", res)
	}
	w.relayAll()
	if st := w.stream.Stats(); st.Records != records {
		t.Fatalf("the stream carried %d more records, want none", st.Records-records)
	}
	if w.balance("m1") != 15000 || len(w.collect()) != 1 || w.emf.sum(outbox.MetricRedriven) != 0 {
		t.Fatal("want one credit, one push and no re-drive")
	}
}

// A re-drive can still reach an event the consumer has just processed (the
// sweep read the intent a moment before the worker committed). The relay
// sends it again and the worker's inbox stops it: no second credit, no
// second push.
func TestARedriveOfAnEventAlreadyConsumedChangesNothing(t *testing.T) {
	t.Parallel()
	w := newWorld(t, options{})
	ev7 := pay("pay_7", "m1", inbox.Succeeded, 3000)
	w.recordIntent(ev7)
	w.publish(ev7)
	w.relayAll()
	w.work()
	if created, err := w.pub.Redrive(w.ctx, ev7); err != nil || created {
		t.Fatalf("Redrive = %v, %v", created, err)
	}
	w.relayRedrive(t, ev7)
	creditedAndNotifiedOnce(t, w)
	if got := w.emf.sum("EventsDuplicate"); got < 1 {
		t.Fatalf("the inbox caught %v duplicates, want at least 1", got)
	}
}

// The worker cannot apply ev7 (its ledger refuses, say) until the message
// has been received maxReceiveCount times and SQS has moved it to the events
// DLQ. The intent is still not consumed, so once the worker is fixed the
// sweep's next re-drive brings the event back: m1 is credited once and
// notified once, with no operator redriving the DLQ.
func TestADeadLetteredEventIsRedrivenOnceTheWorkerRecovers(t *testing.T) {
	t.Parallel()
	var broken atomic.Bool
	w := newWorld(t, options{handler: func(next harness.QueueHandler) harness.QueueHandler {
		return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
			if broken.Load() {
				return events.SQSEventResponse{}, errors.New("injected: the worker's ledger is down")
			}
			return next(ctx, ev)
		}
	}})
	ev7 := pay("pay_7", "m1", inbox.Succeeded, 3000)
	w.recordIntent(ev7)
	w.publish(ev7)
	broken.Store(true)
	w.relayAll()
	for range eventsource.Default().Worker.MaxReceiveCount + 1 {
		w.redeliver()
	}
	if dead := testenv.Messages(t, w.sqs, w.queue.DLQ.URL); len(dead) != 1 || dead[0].Attributes["MessageDeduplicationId"] != ev7.EventID {
		t.Fatalf("the events DLQ holds %d messages, want ev7", len(dead))
	}
	s := w.sweeper()
	w.sweep(s) // the first re-drive, while the worker is still down
	w.relayAll()
	for range eventsource.Default().Worker.MaxReceiveCount + 1 {
		w.redeliver()
	}
	if w.balance("m1") != 12000 || w.published(ev7.EventID) {
		t.Fatal("the event was applied or marked while the worker was down")
	}

	broken.Store(false)
	w.later(6 * time.Minute)
	if res := w.sweep(s); res.Redriven != 1 {
		t.Fatalf("sweep after the worker recovered = %+v, want a re-drive", res)
	}
	w.relayRedrive(t, ev7)
	creditedAndNotifiedOnce(t, w)
	if res := w.sweep(s); res.Marked != 1 || !w.published(ev7.EventID) {
		t.Fatalf("sweep = %+v, want the intent marked once the inbox holds it", res)
	}
}

// relayRedrive plays a re-drive's new stream record: the relay sends it,
// once, and the worker takes the delivery. A copy the queue dropped inside
// its dedup window (moto remembers a dead-lettered message's id, and AWS
// keeps any id 5 minutes; a real re-drive comes after that) is handed over
// as it arrives after the window.
func (w *world) relayRedrive(t *testing.T, e event.Event) {
	t.Helper()
	sent, received := w.emf.sum("RelaySent"), w.poller.Stats().Received
	w.relayAll()
	if got := w.emf.sum("RelaySent"); got != sent+1 {
		t.Fatalf("the relay sent %v messages for the re-drive, want 1", got-sent)
	}
	w.work()
	if w.poller.Stats().Received == received {
		w.redeliverAfterDelete(e)
	}
}

// creditedAndNotifiedOnce checks the story's count for m1: one credit of
// 3,000 and one push.
func creditedAndNotifiedOnce(t *testing.T, w *world) {
	t.Helper()
	if b, n := w.balance("m1"), w.scalar(`SELECT count(*) FROM credits`); b != 15000 || n != 1 {
		t.Fatalf("m1 = %d with %d credits, want 15000 with 1", b, n)
	}
	if got := w.collect(); len(got) != 1 {
		t.Fatalf("%d pushes, want 1", len(got))
	}
}
