package inbox_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/harness"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/outbox"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

// pushWorld is a worker and a sweep over a migrated ledger, pushing through
// a real notify.Notifier to a moto topic that a queue (the "phone") watches.
type pushWorld struct {
	world
	snsc    *sns.Client
	topic   string
	phone   *harness.PushQueue
	watch   testenv.Queue
	sweep   *inbox.NotifSweeper
	sweepMF *bytes.Buffer
}

func newPushWorld(t *testing.T) pushWorld {
	t.Helper()
	pool, _ := testenv.Ledger(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO merchant_balances (merchant_id, currency, balance) VALUES ('m1', 'USD', 12000)`); err != nil {
		t.Fatal(err)
	}
	snsc, sqsc := testenv.SNS(t), testenv.SQS(t)
	topic := testenv.NewTopic(t, snsc)
	watch := testenv.NewStandardQueue(t, sqsc)
	testenv.SubscribeQueue(t, snsc, topic, watch.Arn, true)
	n, err := notify.New(snsc, nil, notify.Config{TopicArn: topic, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	emf := &bytes.Buffer{}
	w, err := inbox.New(pool, n, inbox.Config{Logger: quiet, MaxReceiveCount: 5, Metrics: metrics.New(emf, "worker"), RetryAfter: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sweepMF := &bytes.Buffer{}
	sw, err := inbox.NewNotifSweeper(pool, n, inbox.SweepConfig{
		Logger: quiet, Metrics: metrics.New(sweepMF, "resolver"),
		Grace: time.Millisecond, Base: time.Millisecond, Max: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return pushWorld{
		world: world{pool: pool, w: w, emf: emf}, snsc: snsc, topic: topic,
		phone: harness.NewPushQueue(sqsc, watch.URL), watch: watch, sweep: sw, sweepMF: sweepMF,
	}
}

// breakSNS deletes the topic: every publish now fails, as with an expired
// APNs certificate or a KMS key SNS may no longer use, until healSNS.
func (p pushWorld) breakSNS(t *testing.T) {
	t.Helper()
	if _, err := p.snsc.DeleteTopic(context.Background(), &sns.DeleteTopicInput{TopicArn: &p.topic}); err != nil {
		t.Fatal(err)
	}
}

// healSNS creates the topic again under its name (so under the same ARN)
// and subscribes the phone again.
func (p pushWorld) healSNS(t *testing.T) {
	t.Helper()
	name := p.topic[strings.LastIndex(p.topic, ":")+1:]
	out, err := p.snsc.CreateTopic(context.Background(), &sns.CreateTopicInput{Name: &name})
	if err != nil || aws.ToString(out.TopicArn) != p.topic {
		t.Fatalf("recreate topic: %v, %v", out, err)
	}
	testenv.SubscribeQueue(t, p.snsc, p.topic, p.watch.Arn, true)
}

func (p pushWorld) pushes(t *testing.T) []notify.Data {
	t.Helper()
	got, err := p.phone.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// Defect 6: a push that keeps failing must not hold a merchant's credits.
// SNS is broken for good; two events of one merchant arrive in one batch
// (one FIFO group). Both are credited at once and acknowledged, nothing goes
// towards the DLQ; the notifications stay PENDING, owed. Once SNS is back,
// the sweep sends each one exactly once, with the payment as replace id,
// and marks it SENT.
func TestPushOutageNeverHoldsBackCredits(t *testing.T) {
	p := newPushWorld(t)
	ctx := context.Background()
	p.breakSNS(t)
	a1, a2 := payment("pay_a1", "m1", inbox.Succeeded, 3000), payment("pay_a2", "m1", inbox.Succeeded, 2000)
	resp, err := p.w.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{message(t, a1, 1), message(t, a2, 1)}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle = %+v, %v; want both events acknowledged although SNS is down", resp, err)
	}
	if b := p.balance(t, "m1"); b != 17000 {
		t.Fatalf("m1 balance = %d, want 12000 + 3000 + 2000 at once", b)
	}
	for _, name := range []string{"EventsFailed", "EventsDeadLettered"} {
		if got := metrics.Sum(p.emf.Bytes(), name); got != 0 {
			t.Errorf("%s = %v, want 0", name, got)
		}
	}
	if got := metrics.Sum(p.emf.Bytes(), "PushFailed"); got != 2 {
		t.Errorf("PushFailed = %v, want 2", got)
	}
	for _, e := range []event.Event{a1, a2} {
		if s := p.notif(t, e.EventID); s != inbox.NotifPending {
			t.Fatalf("notif %s = %s, want PENDING: still owed", e.EventID, s)
		}
	}

	// The sweep while SNS is still down: nothing sent, the rows kept PENDING
	// with their attempts counted.
	time.Sleep(20 * time.Millisecond)
	if n, err := p.sweep.FinishPending(ctx, 10); err != nil || n != 0 {
		t.Fatalf("FinishPending during the outage = %d, %v; want 0", n, err)
	}
	if n := p.count(t, `SELECT count(*) FROM notif WHERE state = 'PENDING' AND attempts = 2`); n != 2 {
		t.Fatalf("%d rows PENDING with 2 attempts, want 2", n)
	}

	p.healSNS(t)
	time.Sleep(20 * time.Millisecond) // past the backoff
	if n, err := p.sweep.FinishPending(ctx, 10); err != nil || n != 2 {
		t.Fatalf("FinishPending after recovery = %d, %v; want 2", n, err)
	}
	if n, err := p.sweep.FinishPending(ctx, 10); err != nil || n != 0 {
		t.Fatalf("second FinishPending = %d, %v; want nothing left", n, err)
	}
	got := p.pushes(t)
	if len(got) != 2 {
		t.Fatalf("phone got %d pushes, want 2: %+v", len(got), got)
	}
	seen := map[string]notify.Data{}
	for _, d := range got {
		seen[d.EventID] = d
	}
	for _, e := range []event.Event{a1, a2} {
		if d, ok := seen[e.EventID]; !ok || d.ReplaceID != e.PaymentID || d.Amount != e.Amount {
			t.Errorf("push for %s = %+v, want one with replace id %s", e.EventID, d, e.PaymentID)
		}
		if s := p.notif(t, e.EventID); s != inbox.NotifSent {
			t.Errorf("notif %s = %s, want SENT", e.EventID, s)
		}
	}
	if b := p.balance(t, "m1"); b != 17000 {
		t.Fatalf("m1 balance = %d after the sweep, want 17000", b)
	}
}

// A notification that keeps failing past the give-up horizon is kept,
// flagged STUCK and counted for the alarm, never deleted; an operator
// re-arms it and the next sweep sends it.
func TestAPushFailingPastTheHorizonIsFlaggedStuckAndCanBeRearmed(t *testing.T) {
	p := newPushWorld(t)
	ctx := context.Background()
	p.breakSNS(t)
	e := payment("pay_s", "m1", inbox.Succeeded, 500)
	if res, err := p.w.Process(ctx, e); err != nil || !res.PushFailed {
		t.Fatalf("Process = %+v, %v", res, err)
	}
	// The row was armed a day and a minute ago.
	if _, err := p.pool.Exec(ctx, `UPDATE notif SET armed_at = now() - interval '24 hours 1 minute', next_attempt_at = NULL`); err != nil {
		t.Fatal(err)
	}
	if n, err := p.sweep.FinishPending(ctx, 10); err != nil || n != 0 {
		t.Fatalf("FinishPending = %d, %v", n, err)
	}
	if s := p.notif(t, e.EventID); s != inbox.NotifStuck {
		t.Fatalf("notif = %s, want STUCK", s)
	}
	if got := metrics.Sum(p.sweepMF.Bytes(), "NotifStuck"); got != 1 {
		t.Fatalf("NotifStuck gauge = %v, want 1", got)
	}
	p.healSNS(t)
	if n, err := p.sweep.FinishPending(ctx, 10); err != nil || n != 0 || len(p.pushes(t)) != 0 {
		t.Fatalf("FinishPending on a STUCK row = %d, %v; want it left for a human", n, err)
	}
	if n, err := p.sweep.Rearm(ctx); err != nil || n != 1 {
		t.Fatalf("Rearm = %d, %v", n, err)
	}
	if n, err := p.sweep.FinishPending(ctx, 10); err != nil || n != 1 {
		t.Fatalf("FinishPending after Rearm = %d, %v", n, err)
	}
	if got := p.pushes(t); len(got) != 1 || got[0].ReplaceID != "pay_s" || p.notif(t, e.EventID) != inbox.NotifSent {
		t.Fatalf("pushes %+v, notif %s; want one push and SENT", got, p.notif(t, e.EventID))
	}
}

// With the topic fallback off (production) a caller with no enabled device
// cannot be pushed to yet: the event is credited and done, and the
// notification waits for a device, PENDING, not given up: the app may
// register any moment.
func TestAPushWithNoDeviceIsCreditedAndWaitsForOne(t *testing.T) {
	pool, _ := testenv.Ledger(t)
	ctx := context.Background()
	n, err := notify.New(testenv.SNS(t), notify.NewDeviceStore(pool), notify.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	emf := &bytes.Buffer{}
	w, err := inbox.New(pool, n, inbox.Config{Logger: quiet, MaxReceiveCount: 5, Metrics: metrics.New(emf, "worker")})
	if err != nil {
		t.Fatal(err)
	}
	e := payment("pay_u", "m1", inbox.Succeeded, 700)
	if res, err := w.Process(ctx, e); err != nil || res != (inbox.Result{Credited: true, AwaitingDevice: true}) {
		t.Fatalf("Process = %+v, %v; want credited and the push waiting for a device", res, err)
	}
	// A redelivery is a duplicate: no second credit, and the push still waits.
	resp, err := w.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{message(t, e, 2)}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle = %+v, %v", resp, err)
	}
	wd := world{pool: pool}
	if s := wd.notif(t, e.EventID); s != inbox.NotifPending || wd.balance(t, "m1") != 700 {
		t.Fatalf("notif %s, balance %d; want PENDING and the credit once", s, wd.balance(t, "m1"))
	}
	if n := wd.count(t, `SELECT count(*) FROM notif WHERE event_id = $1 AND awaiting_device_since IS NOT NULL AND attempts = 2`, e.EventID); n != 1 {
		t.Fatalf("%d rows marked waiting for a device with both attempts, want 1", n)
	}
	if got := metrics.Sum(emf.Bytes(), "PushUndeliverable"); got != 0 {
		t.Fatalf("PushUndeliverable = %v, want 0", got)
	}
	if got := metrics.Sum(emf.Bytes(), "PushAwaitingDevice"); got != 2 {
		t.Fatalf("PushAwaitingDevice = %v, want 2", got)
	}
}

// The sweep finds a PENDING push with no device to go to (the push failed
// while the topic was down; by the sweep the deployment pushes to devices
// only and the caller has none): it keeps it waiting for one, however often
// it runs, until its device horizon (configurable) has passed; then it
// records it UNDELIVERABLE, counted, final, and a later sweep leaves it.
func TestTheSweepKeepsAPushWithNoDeviceWaitingUntilItsHorizon(t *testing.T) {
	p := newPushWorld(t)
	ctx := context.Background()
	p.breakSNS(t)
	e := payment("pay_su", "m1", inbox.Succeeded, 700)
	if resp, err := p.w.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{message(t, e, 1)}}); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle = %+v, %v", resp, err)
	}
	if s := p.notif(t, e.EventID); s != inbox.NotifPending {
		t.Fatalf("notif %s after the failed push, want PENDING", s)
	}
	devicesOnly, err := notify.New(p.snsc, notify.NewDeviceStore(p.pool), notify.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	emf := &bytes.Buffer{}
	sw, err := inbox.NewNotifSweeper(p.pool, devicesOnly, inbox.SweepConfig{Logger: quiet, Metrics: metrics.New(emf, "worker"),
		Grace: time.Millisecond, Base: time.Millisecond, DeviceHorizon: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // past the grace
	for range 2 {
		if n, err := sw.FinishPending(ctx, 10); err != nil || n != 0 {
			t.Fatalf("FinishPending with no device = %d, %v; want 0", n, err)
		}
		time.Sleep(5 * time.Millisecond) // past the back-off
	}
	if s := p.notif(t, e.EventID); s != inbox.NotifPending {
		t.Fatalf("notif %s within the horizon, want PENDING", s)
	}
	if got := metrics.Sum(emf.Bytes(), "PushAwaitingDevice"); got != 2 {
		t.Fatalf("PushAwaitingDevice = %v, want 2", got)
	}
	// An hour and a minute after the row was written.
	if _, err := p.pool.Exec(ctx, `UPDATE notif SET created_at = now() - interval '61 minutes', next_attempt_at = NULL WHERE event_id = $1`, e.EventID); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := sw.FinishPending(ctx, 10); err != nil {
			t.Fatal(err)
		}
	}
	if s := p.notif(t, e.EventID); s != inbox.NotifUndeliverable {
		t.Fatalf("notif %s past the horizon, want UNDELIVERABLE", s)
	}
	if got := metrics.Sum(emf.Bytes(), "PushUndeliverable"); got != 1 {
		t.Fatalf("PushUndeliverable = %v, want 1", got)
	}
}

// settledRefund runs a payment and its refund through the real ledger and
// returns the events their outbox intents carry: the path a refund's event
// takes to the worker, like a payment's.
func settledRefund(t *testing.T, pool *pgxpool.Pool, pid string, amount int64) (paid, refunded event.Event) {
	t.Helper()
	ctx := context.Background()
	st := ledger.New(pool)
	now := time.Now()
	if _, _, err := st.InsertPending(ctx, ledger.Payment{ID: pid, CallerID: "u1", ClientKey: "K-" + pid, Fingerprint: "F",
		Amount: amount, Currency: "USD", MerchantID: "m1", OrderID: "42", PaymentMethod: "pm_1", DeadlineAt: now.Add(5 * time.Second)}, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, moved, err := st.Settle(ctx, pid, ledger.Outcome{State: ledger.Succeeded, PSPCharge: "pi_1"}, now); err != nil || !moved {
		t.Fatalf("settle payment: %v %v", moved, err)
	}
	if _, _, err := st.InsertRefund(ctx, ledger.Refund{PaymentID: pid, CallerID: "u1", RefundKey: "RK-" + pid, Fingerprint: "RF",
		Amount: amount, Currency: "USD", MerchantID: "m1", PSPCharge: "pi_1", DeadlineAt: now.Add(5 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	r, moved, err := st.SettleRefund(ctx, pid, ledger.RefundOutcome{State: ledger.RefundSucceeded, PSPRefund: "re_1"})
	if err != nil || !moved {
		t.Fatalf("settle refund: %v %v", moved, err)
	}
	intent := func(eventID string) event.Event {
		var in outbox.Intent
		var payload string
		if err := pool.QueryRow(ctx, `SELECT event_id, payment_id, merchant_id, payload::text FROM outbox_intents WHERE event_id = $1`, eventID).
			Scan(&in.EventID, &in.PaymentID, &in.MerchantID, &payload); err != nil {
			t.Fatalf("outbox intent %s: %v", eventID, err)
		}
		in.Payload = []byte(payload)
		e, err := outbox.EventFromIntent(in)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	paid, refunded = intent(pid+":SUCCEEDED"), intent(pid+":REFUNDED")
	if want := ledger.RefundEvent(r); !refunded.OccurredAt.Equal(want.OccurredAt) || refunded.Amount != amount || refunded.State != event.Refunded {
		t.Fatalf("refund intent %+v, want %+v", refunded, want)
	}
	return paid, refunded
}

// Defect 11: a refund reaches the consumer side. The refund's event comes
// out of the same ledger transaction that settled it, through the outbox
// intent; the worker debits the merchant once however often it is
// delivered, and tells the buyer once, with the payment as replace id, so
// the refund's push replaces the payment's on the phone.
func TestRefundDebitsOnceAndNotifies(t *testing.T) {
	p := newPushWorld(t)
	ctx := context.Background()
	paid, refunded := settledRefund(t, p.pool, "pay_r", 3000)
	batch := func(es ...event.Event) {
		t.Helper()
		var ev events.SQSEvent
		for i, e := range es {
			ev.Records = append(ev.Records, message(t, e, i+1))
		}
		if resp, err := p.w.Handle(ctx, ev); err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("Handle = %+v, %v", resp, err)
		}
	}
	batch(paid)
	if b := p.balance(t, "m1"); b != 15000 {
		t.Fatalf("after the credit m1 = %d, want 15000", b)
	}
	batch(refunded)
	batch(refunded, refunded) // redelivered, twice
	if b := p.balance(t, "m1"); b != 12000 {
		t.Fatalf("after the refund m1 = %d, want 12000: back to the start", b)
	}
	if n := p.count(t, `SELECT count(*) FROM debits WHERE event_id = $1 AND cents = 3000`, refunded.EventID); n != 1 {
		t.Fatalf("%d debits, want exactly one", n)
	}
	if s := p.notif(t, refunded.EventID); s != inbox.NotifSent {
		t.Fatalf("refund notif = %s", s)
	}
	got := p.pushes(t)
	if len(got) != 2 || got[0].State != event.Succeeded || got[1].State != event.Refunded {
		t.Fatalf("pushes = %+v, want the payment's then the refund's", got)
	}
	if r := got[1]; r.ReplaceID != "pay_r" || r.EventID != "pay_r:REFUNDED" || r.Title != "Payment refunded" || r.Amount != 3000 {
		t.Fatalf("refund push = %+v, want replace id pay_r", r)
	}
}

// Every notification about a payment shares its replace id, so one sent
// after a later one replaces it on the phone. Two ways it used to happen
// (the issue 13 review reproduced both): the payment's push failed and the
// sweep retried it after the refund's went out; or the refund's event was
// consumed before the payment's (a re-drive, two stream shards). Either way
// the phone's last word was "Payment confirmed" for a refunded payment. A
// PENDING notification with a later one about the same payment is retired
// SUPERSEDED, by the worker and by the sweep, and never sent.
func TestALateNotificationNeverReplacesALaterOneAboutThePayment(t *testing.T) {
	ctx := context.Background()
	handle := func(t *testing.T, p pushWorld, e event.Event) {
		t.Helper()
		resp, err := p.w.Handle(ctx, events.SQSEvent{Records: []events.SQSMessage{message(t, e, 1)}})
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("Handle %s = %+v, %v", e.EventID, resp, err)
		}
	}
	lastShown := func(t *testing.T, p pushWorld) []notify.Data {
		t.Helper()
		got := p.pushes(t)
		if len(got) == 0 || got[len(got)-1].State != event.Refunded {
			t.Fatalf("pushes = %+v: the phone's last word is not the refund", got)
		}
		return got
	}
	t.Run("the payment's push failed and the sweep retries it after the refund's", func(t *testing.T) {
		p := newPushWorld(t)
		paid, refunded := settledRefund(t, p.pool, "pay_l", 3000)
		p.breakSNS(t)
		handle(t, p, paid) // credited; its push fails and stays PENDING
		p.healSNS(t)
		handle(t, p, refunded)
		time.Sleep(5 * time.Millisecond) // past the sweep's grace and back-off
		if _, err := p.sweep.FinishPending(ctx, 10); err != nil {
			t.Fatal(err)
		}
		if got := lastShown(t, p); len(got) != 1 {
			t.Fatalf("pushes = %+v, want only the refund's", got)
		}
		if s := p.notif(t, paid.EventID); s != inbox.NotifSuperseded {
			t.Fatalf("the payment's notification is %s, want SUPERSEDED", s)
		}
		if b := p.balance(t, "m1"); b != 12000 {
			t.Fatalf("m1 = %d, want 12000 (credited, then debited)", b)
		}
	})
	t.Run("the refund's event was consumed before the payment's", func(t *testing.T) {
		p := newPushWorld(t)
		paid, refunded := settledRefund(t, p.pool, "pay_o", 3000)
		handle(t, p, refunded)
		handle(t, p, paid)
		if got := lastShown(t, p); len(got) != 1 {
			t.Fatalf("pushes = %+v, want only the refund's", got)
		}
		if s := p.notif(t, paid.EventID); s != inbox.NotifSuperseded {
			t.Fatalf("the payment's notification is %s, want SUPERSEDED", s)
		}
		if b := p.balance(t, "m1"); b != 12000 {
			t.Fatalf("m1 = %d, want 12000", b)
		}
	})
}
