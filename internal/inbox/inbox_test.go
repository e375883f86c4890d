package inbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/metrics"
	"github.com/oncepay/oncepay/internal/notify"
	"github.com/oncepay/oncepay/internal/testkit/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// pusher records pushes; the first failures calls fail.
type pusher struct {
	mu       sync.Mutex
	pushes   []notify.Push
	failures int
}

func (p *pusher) Send(_ context.Context, push notify.Push) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failures > 0 {
		p.failures--
		return errors.New("SNS unavailable")
	}
	p.pushes = append(p.pushes, push)
	return nil
}

func (p *pusher) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pushes)
}

func payment(pid, merchant, state string, amount int64) event.Event {
	return event.Event{
		EventID: ids.EventID(pid, state), PaymentID: pid, State: state, MerchantID: merchant,
		CallerID: "u1", Amount: amount, Currency: "USD", OccurredAt: time.Unix(1_800_000_000, 0).UTC(),
	}
}

func message(t testing.TB, e event.Event, receives int) events.SQSMessage {
	t.Helper()
	b, err := e.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return events.SQSMessage{
		MessageId: "msg-" + e.EventID, Body: string(b),
		Attributes: map[string]string{"MessageGroupId": e.MerchantID, "ApproximateReceiveCount": strconv.Itoa(receives)},
	}
}

type world struct {
	pool   *pgxpool.Pool
	pusher *pusher
	w      *inbox.Worker
	emf    *bytes.Buffer
}

func newWorld(t testing.TB, mod func(*inbox.Config)) world {
	t.Helper()
	pool, _ := testenv.Ledger(t)
	if _, err := pool.Exec(context.Background(), `INSERT INTO merchant_balances (merchant_id, currency, balance) VALUES ('m1', 'USD', 12000)`); err != nil {
		t.Fatal(err)
	}
	p := &pusher{}
	emf := &bytes.Buffer{}
	cfg := inbox.Config{Logger: quiet, MaxReceiveCount: 5, Metrics: metrics.New(emf, "worker")}
	if mod != nil {
		mod(&cfg)
	}
	w, err := inbox.New(pool, p, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return world{pool: pool, pusher: p, w: w, emf: emf}
}

func (w world) balance(t testing.TB, merchant string) int64 {
	t.Helper()
	var b int64
	err := w.pool.QueryRow(context.Background(), `SELECT COALESCE((SELECT balance FROM merchant_balances WHERE merchant_id = $1 AND currency = 'USD'), 0)`, merchant).Scan(&b)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (w world) count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := w.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (w world) notif(t testing.TB, eventID string) string {
	t.Helper()
	var s string
	if err := w.pool.QueryRow(context.Background(), `SELECT state FROM notif WHERE event_id = $1 AND channel = 'push'`, eventID).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestFirstDeliveryCreditsRecordsAndPushesAndARepeatDoesNothing(t *testing.T) {
	w := newWorld(t, nil)
	ctx := context.Background()
	e := payment("pay_7", "m1", inbox.Succeeded, 3000)
	res, err := w.w.Process(ctx, e)
	if err != nil || res != (inbox.Result{Credited: true, Pushed: true}) {
		t.Fatalf("first Process = %+v, %v", res, err)
	}
	res, err = w.w.Process(ctx, e)
	if err != nil || res != (inbox.Result{Duplicate: true}) {
		t.Fatalf("repeat Process = %+v, %v; want a duplicate that pushes nothing", res, err)
	}
	if b := w.balance(t, "m1"); b != 15000 {
		t.Fatalf("m1 balance = %d, want 15000", b)
	}
	if n := w.count(t, `SELECT count(*) FROM credits WHERE event_id = $1`, e.EventID); n != 1 {
		t.Fatalf("%d credits", n)
	}
	if s := w.notif(t, e.EventID); s != inbox.NotifSent {
		t.Fatalf("notif state %s", s)
	}
	if n := w.pusher.count(); n != 1 || w.pusher.pushes[0].ReplaceID != "pay_7" {
		t.Fatalf("pushes = %+v", w.pusher.pushes)
	}
}

func TestAFailedPaymentIsNotifiedButNotCredited(t *testing.T) {
	w := newWorld(t, nil)
	e := payment("pay_9", "m1", inbox.Failed, 3000)
	if _, err := w.w.Process(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	if b, n := w.balance(t, "m1"), w.count(t, `SELECT count(*) FROM credits`); b != 12000 || n != 0 {
		t.Fatalf("balance %d with %d credits; a declined payment credits nothing", b, n)
	}
	if s := w.notif(t, e.EventID); s != inbox.NotifSent || w.pusher.count() != 1 || w.pusher.pushes[0].State != inbox.Failed {
		t.Fatalf("notif %s, pushes %+v", s, w.pusher.pushes)
	}
}

// A reconciliation's REVERSED event (a charge the buyer was told did not
// happen, refunded) moves no merchant money, none having been credited, and
// tells the buyer once with the payment's replace id.
func TestAReversedChargeIsNotifiedOnceAndMovesNoMoney(t *testing.T) {
	w := newWorld(t, nil)
	e := payment("pay_rev", "m1", event.Reversed, 3000)
	for range 2 {
		if _, err := w.w.Process(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	if b, c, d := w.balance(t, "m1"), w.count(t, `SELECT count(*) FROM credits`), w.count(t, `SELECT count(*) FROM debits`); b != 12000 || c != 0 || d != 0 {
		t.Fatalf("balance %d, %d credits, %d debits: a reversal moves no merchant money", b, c, d)
	}
	if s := w.notif(t, e.EventID); s != inbox.NotifSent || w.pusher.count() != 1 || w.pusher.pushes[0].ReplaceID != "pay_rev" {
		t.Fatalf("notif %s, pushes %+v, want one push replacing the payment's", s, w.pusher.pushes)
	}
	if c := notify.FromEvent(e).Content(); c.Title != "Charge returned" {
		t.Fatalf("push title %q", c.Title)
	}
}

func TestAFailedPushLeavesTheIntentPendingAndTheRedeliveryFinishesIt(t *testing.T) {
	w := newWorld(t, nil)
	w.pusher.failures = 1
	ctx := context.Background()
	e := payment("pay_7", "m1", inbox.Succeeded, 3000)
	res, err := w.w.Process(ctx, e)
	if err != nil || res != (inbox.Result{Credited: true, PushFailed: true}) {
		t.Fatalf("Process = %+v, %v; want the event done and the push failed", res, err)
	}
	if s := w.notif(t, e.EventID); s != inbox.NotifPending || w.balance(t, "m1") != 15000 {
		t.Fatalf("after a failed push: notif %s, balance %d; want PENDING and the credit committed", s, w.balance(t, "m1"))
	}
	// A redelivery (a crash elsewhere, at-least-once) still finishes it.
	res, err = w.w.Process(ctx, e)
	if err != nil || res != (inbox.Result{Duplicate: true, Pushed: true}) {
		t.Fatalf("redelivery = %+v, %v; want a duplicate that still pushes", res, err)
	}
	if s := w.notif(t, e.EventID); s != inbox.NotifSent || w.balance(t, "m1") != 15000 {
		t.Fatalf("notif %s, balance %d", s, w.balance(t, "m1"))
	}
}

func TestHandleKeepsGroupOrderAndHoldsBackTheRestOfAFailedGroup(t *testing.T) {
	a1, a2, a3 := payment("pay_a1", "mA", inbox.Succeeded, 100), payment("pay_a2", "mA", inbox.Succeeded, 200), payment("pay_a3", "mA", inbox.Succeeded, 300)
	b1, b2 := payment("pay_b1", "mB", inbox.Succeeded, 10), payment("pay_b2", "mB", inbox.Succeeded, 20)
	w := newWorld(t, func(c *inbox.Config) {
		c.Hooks.BeforeEvent = func(_ context.Context, e event.Event) error {
			if e.EventID == a2.EventID {
				return errors.New("injected failure")
			}
			return nil
		}
	})
	var ev events.SQSEvent
	for _, e := range []event.Event{a1, b1, a2, b2, a3} {
		ev.Records = append(ev.Records, message(t, e, 1))
	}
	resp, err := w.w.Handle(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, f := range resp.BatchItemFailures {
		failed = append(failed, f.ItemIdentifier)
	}
	if want := fmt.Sprint([]string{"msg-" + a2.EventID, "msg-" + a3.EventID}); fmt.Sprint(failed) != want {
		t.Fatalf("failures = %v, want %s", failed, want)
	}
	if w.balance(t, "mA") != 100 || w.balance(t, "mB") != 30 {
		t.Fatalf("balances mA %d mB %d; want a1 only and both of mB", w.balance(t, "mA"), w.balance(t, "mB"))
	}
	if n := w.count(t, `SELECT count(*) FROM processed WHERE event_id = $1`, a3.EventID); n != 0 {
		t.Fatal("a3 was processed ahead of a2")
	}
}

func TestPoisonIsReportedAndCountedAsDeadLetteredOnItsLastDelivery(t *testing.T) {
	w := newWorld(t, nil)
	good := payment("pay_g", "m1", inbox.Succeeded, 1)
	poison := events.SQSMessage{MessageId: "poison", Body: "not an event", Attributes: map[string]string{"MessageGroupId": "m1", "ApproximateReceiveCount": "4"}}
	resp, err := w.w.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{poison, message(t, good, 4)}})
	if err != nil || len(resp.BatchItemFailures) != 2 {
		t.Fatalf("Handle = %+v, %v; want the poison and the event held behind it failed", resp, err)
	}
	if metrics.Sum(w.emf.Bytes(), "EventsDeadLettered") != 0 || metrics.Sum(w.emf.Bytes(), "EventsFailed") != 1 {
		t.Fatalf("metrics after delivery 4: %s", w.emf.String())
	}
	poison.Attributes["ApproximateReceiveCount"] = "5"
	if _, err := w.w.Handle(context.Background(), events.SQSEvent{Records: []events.SQSMessage{poison, message(t, good, 5)}}); err != nil {
		t.Fatal(err)
	}
	if got := metrics.Sum(w.emf.Bytes(), "EventsDeadLettered"); got != 2 {
		t.Fatalf("EventsDeadLettered = %v, want 2 (the poison and the event held behind it)", got)
	}
}

func TestAnEventTheLedgerRefusesIsPoison(t *testing.T) {
	w := newWorld(t, nil)
	_, err := w.w.Process(context.Background(), payment("pay_z", "m1", inbox.Succeeded, 0))
	if !errors.Is(err, inbox.ErrPoison) {
		t.Fatalf("err = %v, want ErrPoison for a zero credit", err)
	}
	if _, err := w.w.Process(context.Background(), payment("pay_zr", "m1", inbox.Refunded, 0)); !errors.Is(err, inbox.ErrPoison) {
		t.Fatalf("err = %v, want ErrPoison for a zero debit", err)
	}
	if _, err := w.w.Process(context.Background(), payment("pay_r", "m1", "CHARGEBACK", 5)); !errors.Is(err, inbox.ErrPoison) {
		t.Fatalf("err = %v, want ErrPoison for an unknown state", err)
	}
	if n := w.count(t, `SELECT count(*) FROM processed`); n != 0 {
		t.Fatalf("%d inbox rows committed for refused events", n)
	}
}

// BenchmarkWorkerTransaction measures one event's deliveries, interleaved in
// one loop so that load on the machine hits all three alike:
//   - floor: one autocommitted insert into the inbox table, the least any
//     guarded write costs;
//   - first: the first delivery: the inbox transaction (inbox row, credit,
//     balance upsert, notif intent), the push (a no-op here) and the SENT
//     update;
//   - duplicate: a redelivery of the same, already notified event (the
//     inbox insert that finds the row, and the notif read).
//
// ns/op is the three together; the metrics give each one and the ratios.
func BenchmarkWorkerTransaction(b *testing.B) {
	w := newWorld(b, nil)
	ctx := context.Background()
	var floor, first, dup time.Duration
	for i := range b.N {
		e := payment(fmt.Sprintf("pay_%d", i), "m1", inbox.Succeeded, 1)
		t0 := time.Now()
		if _, err := w.pool.Exec(ctx, `INSERT INTO processed (event_id) VALUES ($1) ON CONFLICT (event_id) DO NOTHING`, "floor_"+e.EventID); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if res, err := w.w.Process(ctx, e); err != nil || !res.Credited {
			b.Fatal(res, err)
		}
		t2 := time.Now()
		if res, err := w.w.Process(ctx, e); err != nil || !res.Duplicate {
			b.Fatal(res, err)
		}
		t3 := time.Now()
		floor, first, dup = floor+t1.Sub(t0), first+t2.Sub(t1), dup+t3.Sub(t2)
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(per(floor), "floor-ms/op")
	b.ReportMetric(per(first), "first-ms/op")
	b.ReportMetric(per(dup), "duplicate-ms/op")
	b.ReportMetric(float64(first)/float64(floor), "first/floor")
	b.ReportMetric(float64(dup)/float64(floor), "duplicate/floor")
}

// Across Regions (Config.Adopt) a SUCCEEDED event for a payment the ledger
// has no row of — a failed Region's copy of a payment its last lag lost —
// writes the row (SUCCEEDED, with its charge, key and fingerprint) and its
// two journal entries in the credit's transaction, counted; a repeat, a
// payment the ledger holds, a FAILED event and a worker without Adopt
// write no row.
func TestAFailedRegionsCopyOfALostPaymentIsAdopted(t *testing.T) {
	ctx := context.Background()
	lost := func(pid string) event.Event {
		e := payment(pid, "m1", inbox.Succeeded, 3000)
		e.ClientKey, e.Fingerprint, e.PSPCharge = "K-"+pid, "fp-"+pid, "pi_"+pid
		return e
	}
	w := newWorld(t, func(c *inbox.Config) { c.Adopt = true })
	e := lost("pay_lost")
	for range 2 { // the second delivery is a repeat
		if _, err := w.w.Process(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	var state, key, fp, charge string
	if err := w.pool.QueryRow(ctx, `SELECT state, client_key, fingerprint, psp_charge FROM payments WHERE payment_id = 'pay_lost'`).Scan(&state, &key, &fp, &charge); err != nil {
		t.Fatalf("no adopted row: %v", err)
	}
	if state != "SUCCEEDED" || key != e.ClientKey || fp != e.Fingerprint || charge != e.PSPCharge {
		t.Errorf("adopted row %s %s %s %s", state, key, fp, charge)
	}
	if n := w.count(t, `SELECT count(*) FROM journal_entries WHERE payment_id = 'pay_lost'`); n != 2 {
		t.Errorf("%d journal entries, want the charge's two", n)
	}
	if n := w.count(t, `SELECT COALESCE(sum(amount), 0) FROM journal_entries WHERE payment_id = 'pay_lost'`); n != 0 {
		t.Errorf("journal sums to %d, want 0 (double entry)", n)
	}
	if b := w.balance(t, "m1"); b != 15000 {
		t.Errorf("m1 = %d, want 15000 (one credit)", b)
	}
	if n := metrics.Sum(w.emf.Bytes(), "PaymentAdopted"); n != 1 {
		t.Errorf("PaymentAdopted = %v, want 1", n)
	}

	// A payment the ledger holds SUCCEEDED keeps its row and is credited
	// once (the home's own event, or this copy: the same id); a FAILED
	// event adopts nothing. (A held row in another state:
	// TestALeftoverCopyIsCreditedOnlyWhatTheHomeRowBacks.)
	if _, err := w.pool.Exec(ctx, `INSERT INTO payments (payment_id, caller_id, client_key, fingerprint, amount, currency, state, psp_charge, merchant_id)
		VALUES ('pay_held', 'u1', 'K-pay_held', 'fp-pay_held', 3000, 'USD', 'SUCCEEDED', 'pi_pay_held', 'm1')`); err != nil {
		t.Fatal(err)
	}
	failed := lost("pay_declined")
	failed.State, failed.EventID = inbox.Failed, ids.EventID("pay_declined", inbox.Failed)
	for _, ev := range []event.Event{lost("pay_held"), lost("pay_held"), failed} {
		if _, err := w.w.Process(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if n := w.count(t, `SELECT count(*) FROM payments WHERE payment_id = 'pay_held' AND state = 'SUCCEEDED'`); n != 1 {
		t.Errorf("the held row changed")
	}
	if n := w.count(t, `SELECT count(*) FROM journal_entries WHERE payment_id = 'pay_held'`); n != 0 {
		t.Errorf("the held row got %d journal entries from the copy", n)
	}
	if b := w.balance(t, "m1"); b != 18000 {
		t.Errorf("m1 = %d, want 18000 (the held payment credited once)", b)
	}
	if n := w.count(t, `SELECT count(*) FROM payments WHERE payment_id = 'pay_declined'`); n != 0 {
		t.Errorf("a FAILED event wrote a row")
	}
	if n := metrics.Sum(w.emf.Bytes(), "PaymentAdopted"); n != 1 {
		t.Errorf("PaymentAdopted = %v, want still 1", n)
	}

	// One Region: no adoption.
	one := newWorld(t, nil)
	if _, err := one.w.Process(ctx, lost("pay_other")); err != nil {
		t.Fatal(err)
	}
	if n := one.count(t, `SELECT count(*) FROM payments`); n != 0 {
		t.Errorf("a worker without Adopt wrote %d rows", n)
	}
}

// homeRow writes the home ledger's row of pid in state, as the home Region
// holds it when R1's leftover SUCCEEDED copy arrives: FAILED with its
// decline, VOID (voided before any request ran), or still PENDING or
// UNKNOWN (its resolver has not settled it yet).
func (w world) homeRow(t testing.TB, pid, state string, amount int64) {
	t.Helper()
	var err error
	if state == "VOID" {
		_, err = w.pool.Exec(context.Background(), `INSERT INTO payments (payment_id, caller_id, client_key, state) VALUES ($1, 'u1', 'K-' || $1, 'VOID')`, pid)
	} else {
		_, err = w.pool.Exec(context.Background(), `
			INSERT INTO payments (payment_id, caller_id, client_key, fingerprint, amount, currency, state, merchant_id, decline_code)
			VALUES ($1, 'u1', 'K-' || $1, 'fp-' || $1, $2, 'USD', $3, 'm1', CASE WHEN $3 = 'FAILED' THEN 'generic_decline' END)`, pid, amount, state)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// leftover is R1's SUCCEEDED copy of pid, as its relay sends it once R1 is
// back: the payment's key, fingerprint and charge with it.
func leftover(pid string) event.Event {
	e := payment(pid, "m1", inbox.Succeeded, 3000)
	e.ClientKey, e.Fingerprint, e.PSPCharge = "K-"+pid, "fp-"+pid, "pi_"+pid
	return e
}

// R1's leftover SUCCEEDED copy of a payment the home ledger holds FAILED or
// VOID (or with other money) is money the PSP took that the ledger says it
// did not: not credited, not notified (a "payment confirmed" would replace
// the decline the buyer saw), the row untouched, and counted for the
// reconciliation to refund. The copy is recorded, so a redelivery is a
// repeat; each is delivered twice.
func TestALeftoverCopyIsCreditedOnlyWhatTheHomeRowBacks(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, func(c *inbox.Config) { c.Adopt = true })
	w.homeRow(t, "pay_f", "FAILED", 3000)
	w.homeRow(t, "pay_v", "VOID", 0)
	w.homeRow(t, "pay_m", "UNKNOWN", 5000) // the copy says 3000
	for _, pid := range []string{"pay_f", "pay_v", "pay_m"} {
		for range 2 {
			if _, err := w.w.Process(ctx, leftover(pid)); err != nil {
				t.Fatalf("%s: %v", pid, err)
			}
		}
		if n := w.count(t, `SELECT count(*) FROM processed WHERE event_id = $1`, ids.EventID(pid, inbox.Succeeded)); n != 1 {
			t.Errorf("%s: the copy was not recorded (%d inbox rows): its redeliveries would go on", pid, n)
		}
	}
	if b := w.balance(t, "m1"); b != 12000 {
		t.Errorf("m1 = %d, want 12000: credited a charge the ledger says was not taken", b)
	}
	if n := w.count(t, `SELECT count(*) FROM credits`); n != 0 {
		t.Errorf("%d credits, want none", n)
	}
	if n := w.count(t, `SELECT count(*) FROM journal_entries`); n != 0 {
		t.Errorf("%d journal entries, want none", n)
	}
	if n := w.count(t, `SELECT count(*) FROM payments WHERE (payment_id, state) IN (('pay_f', 'FAILED'), ('pay_v', 'VOID'), ('pay_m', 'UNKNOWN'))`); n != 3 {
		t.Errorf("the home rows changed: %d of 3 as they were", n)
	}
	if n := w.count(t, `SELECT count(*) FROM notif`); n != 0 || w.pusher.count() != 0 {
		t.Errorf("%d notification rows and %d pushes, want none", n, w.pusher.count())
	}
	if n := metrics.Sum(w.emf.Bytes(), "AdoptionRefused"); n != 3 {
		t.Errorf("AdoptionRefused = %v, want 3", n)
	}
}

// R1's leftover SUCCEEDED copy of a payment the home ledger holds PENDING
// or UNKNOWN settles the row from the copy: SUCCEEDED with its charge and
// the charge's journal, one credit, one notification. The home's own
// SUCCEEDED event (its resolver would have settled the row to the same
// charge) has the copy's id: a repeat, nothing twice.
func TestALeftoverCopyOfAPaymentTheHomeHoldsOpenSettlesIt(t *testing.T) {
	ctx := context.Background()
	for _, state := range []string{"UNKNOWN", "PENDING"} {
		t.Run(state, func(t *testing.T) {
			w := newWorld(t, func(c *inbox.Config) { c.Adopt = true })
			pid := "pay_" + strings.ToLower(state)
			w.homeRow(t, pid, state, 3000)
			e := leftover(pid)
			res, err := w.w.Process(ctx, e)
			if err != nil || !res.Credited || !res.Pushed {
				t.Fatalf("the copy: %+v %v", res, err)
			}
			own := payment(pid, "m1", inbox.Succeeded, 3000) // the home's own event, later
			own.PSPCharge = e.PSPCharge
			if res, err := w.w.Process(ctx, own); err != nil || !res.Duplicate {
				t.Fatalf("the home's own event: %+v %v", res, err)
			}
			var rowState, charge string
			if err := w.pool.QueryRow(ctx, `SELECT state, COALESCE(psp_charge, '') FROM payments WHERE payment_id = $1`, pid).Scan(&rowState, &charge); err != nil {
				t.Fatal(err)
			}
			if rowState != "SUCCEEDED" || charge != e.PSPCharge {
				t.Errorf("the home row: %s with %q, want SUCCEEDED with %q", rowState, charge, e.PSPCharge)
			}
			if n := w.count(t, `SELECT count(*) FROM journal_entries WHERE payment_id = $1 AND posting = 'charge'`, pid); n != 2 {
				t.Errorf("%d journal entries, want the charge's two", n)
			}
			if n := w.count(t, `SELECT COALESCE(sum(amount), 0) FROM journal_entries WHERE payment_id = $1`, pid); n != 0 {
				t.Errorf("journal sums to %d, want 0", n)
			}
			if b := w.balance(t, "m1"); b != 15000 {
				t.Errorf("m1 = %d, want 15000 (one credit)", b)
			}
			if n := w.count(t, `SELECT count(*) FROM notif WHERE event_id = $1`, e.EventID); n != 1 || w.pusher.count() != 1 {
				t.Errorf("%d notification rows and %d pushes, want one each", n, w.pusher.count())
			}
			if n := metrics.Sum(w.emf.Bytes(), "PaymentSettledByCopy"); n != 1 {
				t.Errorf("PaymentSettledByCopy = %v, want 1", n)
			}
		})
	}
}
