package story_test

// The failure modes the API claims to handle, each injected in front of the
// real store on the whole path, and each judged by the money and the phone
// after the world has settled: one charge, one credit, m1 = 15,000, one
// notification shown from one alert.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oncepay/oncepay/internal/api"
	"github.com/oncepay/oncepay/internal/event"
	"github.com/oncepay/oncepay/internal/idem"
	"github.com/oncepay/oncepay/internal/ids"
	"github.com/oncepay/oncepay/internal/inbox"
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
	"github.com/oncepay/oncepay/internal/problem"
	"github.com/oncepay/oncepay/internal/testkit/faultnet"
	"github.com/oncepay/oncepay/internal/testkit/story"
)

var errInjected = errors.New("injected: store unavailable")

// theSeedsCount is what every failure below must still end with.
var theSeedsCount = story.Count{Charges: 1, Credits: 1, Balance: 15000, Shown: 1, Alerts: 1}

// faultyLedger fails the API's ledger calls that are switched on. A Settle
// with settleCommits set commits first and then loses its reply.
type faultyLedger struct {
	api.Ledger
	insertDown, settleDown, settleCommits, markUnknownDown atomic.Bool
}

func (l *faultyLedger) InsertPending(ctx context.Context, p ledger.Payment, receiptEmail string) (ledger.Payment, bool, error) {
	if l.insertDown.Load() {
		return ledger.Payment{}, false, errInjected
	}
	return l.Ledger.InsertPending(ctx, p, receiptEmail)
}

func (l *faultyLedger) Settle(ctx context.Context, id string, o ledger.Outcome, now time.Time, hooks ...ledger.Hook) (ledger.Payment, *event.Event, bool, error) {
	switch {
	case l.settleCommits.Load():
		if _, _, _, err := l.Ledger.Settle(ctx, id, o, now, hooks...); err != nil {
			return ledger.Payment{}, nil, false, err
		}
		return ledger.Payment{}, nil, false, errInjected
	case l.settleDown.Load():
		return ledger.Payment{}, nil, false, errInjected
	}
	return l.Ledger.Settle(ctx, id, o, now, hooks...)
}

func (l *faultyLedger) MarkUnknown(ctx context.Context, id string) (ledger.Payment, bool, error) {
	if l.markUnknownDown.Load() {
		return ledger.Payment{}, false, errInjected
	}
	return l.Ledger.MarkUnknown(ctx, id)
}

// downClaims is a key store that can be switched off: every call fails.
type downClaims struct {
	api.Claims
	down atomic.Bool
}

func (c *downClaims) Claim(ctx context.Context, cl idem.Claim) error {
	if c.down.Load() {
		return errInjected
	}
	return c.Claims.Claim(ctx, cl)
}

func (c *downClaims) Takeover(ctx context.Context, scope, readOwner, newOwner, fp string, until, expires time.Time) error {
	if c.down.Load() {
		return errInjected
	}
	return c.Claims.Takeover(ctx, scope, readOwner, newOwner, fp, until, expires)
}

func (c *downClaims) Complete(ctx context.Context, scope, owner string, a *idem.Answer, expires time.Time) error {
	if c.down.Load() {
		return errInjected
	}
	return c.Claims.Complete(ctx, scope, owner, a, expires)
}

func (c *downClaims) Get(ctx context.Context, scope string, now time.Time) (idem.Record, bool, error) {
	if c.down.Load() {
		return idem.Record{}, false, errInjected
	}
	return c.Claims.Get(ctx, scope, now)
}

// failingPublisher is an outbox whose every put fails.
type failingPublisher struct{ puts atomic.Int32 }

func (p *failingPublisher) Publish(context.Context, event.Event) error {
	p.puts.Add(1)
	return errInjected
}

// The PSP charged and the settle transaction failed: before its commit (the
// ledger went away) or after it (the commit's reply was lost). The buyer
// hears 202 "processing" with the resolve Location, never "failed"; the row
// the resolver finds (PENDING past its deadline, or SUCCEEDED with its
// outbox intent) is settled and published; a retry hears SUCCEEDED.
func TestSettleFailsAfterTheCharge_TheBuyerHearsProcessingAndIsCreditedOnce(t *testing.T) {
	t.Parallel()
	for _, committed := range []bool{false, true} {
		name := map[bool]string{false: "before its commit", true: "after its commit"}[committed]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fl := &faultyLedger{}
			w := newWorld(t, story.Options{WrapLedger: func(l api.Ledger) api.Ledger { fl.Ledger = l; return fl }})
			fl.settleDown.Store(!committed)
			fl.settleCommits.Store(committed)
			r := w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now())
			expectStatus(t, r, http.StatusAccepted)
			if loc := r.Headers.Get("Location"); loc != "/payments/K1/resolve" {
				t.Fatalf("Location %q", loc)
			}
			if n := len(w.Charges("")); n != 1 {
				t.Fatalf("%d charges, want the one whose settle failed", n)
			}
			fl.settleDown.Store(false)
			fl.settleCommits.Store(false)
			w.Clock.Advance(w.Timing.Deadline + w.Timing.Margin + time.Second)
			expectCount(t, w, theSeedsCount)
			retry := w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now())
			expectStatus(t, retry, http.StatusCreated)
			if stateOf(t, retry) != "SUCCEEDED" {
				t.Fatalf("retry: %s", retry.Body)
			}
			expectCount(t, w, theSeedsCount)
		})
	}
}

// The PSP's reply was lost and recording UNKNOWN failed too: the row stays
// PENDING. The resolver's sweep of stale PENDING rows replays the derived
// key, the PSP answers with the saved charge, and the payment settles once.
func TestMarkUnknownFails_TheResolverSettlesThePendingRowOnce(t *testing.T) {
	t.Parallel()
	fl := &faultyLedger{}
	w := newWorld(t, story.Options{WrapLedger: func(l api.Ledger) api.Ledger { fl.Ledger = l; return fl }})
	if err := w.Sim.AddFault(pspsim.Fault{Match: pspsim.Match{IdempotencyKey: ids.ChargeKey(pid7)}, Kind: pspsim.FaultLoseReply, Times: 1}); err != nil {
		t.Fatal(err)
	}
	fl.markUnknownDown.Store(true)
	expectStatus(t, w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now()), http.StatusAccepted)
	var state string
	if err := w.Pool.QueryRow(ctx, `SELECT state FROM payments WHERE payment_id = $1`, pid7).Scan(&state); err != nil || state != "PENDING" {
		t.Fatalf("row state %q (%v), want PENDING", state, err)
	}
	fl.markUnknownDown.Store(false)
	w.Clock.Advance(w.Timing.Deadline + w.Timing.Margin + time.Second)
	expectCount(t, w, theSeedsCount)
	expectStatus(t, w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now()), http.StatusCreated)
}

// The API's outbox put failed: the answer is still 201 (the ledger holds
// the payment and its intent), and the sweep puts the item, so the merchant
// is credited and the buyer notified once.
func TestOutboxPutFails_TheSweepPublishesTheEventOnce(t *testing.T) {
	t.Parallel()
	fp := &failingPublisher{}
	w := newWorld(t, story.Options{WrapPublisher: func(api.Publisher) api.Publisher { return fp }})
	expectStatus(t, w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now()), http.StatusCreated)
	if fp.puts.Load() != 1 {
		t.Fatalf("%d outbox puts tried, want 1", fp.puts.Load())
	}
	if b, _ := w.Balance(ctx, "m1"); b != 12000 {
		t.Fatalf("m1 = %d before the sweep", b)
	}
	expectCount(t, w, theSeedsCount)
}

// The key store is down: the durable guard alone decides. The payment is
// charged, credited and notified once (its notification SENT, one push of
// its amount on the phone); a repeat while it is still down is answered
// from the ledger row; after it recovers the repeat is answered again
// without a second charge, not degraded, and the key store holds the
// answer every later retry hears.
func TestKeyStoreDown_TheDurableGuardAloneChargesCreditsAndNotifiesOnce(t *testing.T) {
	t.Parallel()
	dc := &downClaims{}
	w := newWorld(t, story.Options{WrapClaims: func(c api.Claims) api.Claims { dc.Claims = c; return dc }})
	dc.down.Store(true)
	first := w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now())
	expectStatus(t, first, http.StatusCreated)
	again := w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now())
	expectStatus(t, again, http.StatusCreated)
	if again.Headers.Get("Idempotent-Replayed") != "true" {
		t.Fatal("the repeat while the key store is down is not marked replayed")
	}
	degraded := w.EMF.Sum("KeyStoreDegraded")
	if degraded < 2 {
		t.Fatalf("KeyStoreDegraded counted %v times, want one per request", degraded)
	}
	c := expectCount(t, w, theSeedsCount)
	expectNotified(t, w, ids.EventID(pid7, "SUCCEEDED"), 3000)
	if got := chargeOf(t, first); got != c.ChargeID {
		t.Fatalf("answered charge %q, the PSP holds %q", got, c.ChargeID)
	}

	// Recovery: the key store is used again.
	dc.down.Store(false)
	w.Clock.Advance(time.Minute)
	after := w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now())
	expectStatus(t, after, http.StatusCreated)
	if got := chargeOf(t, after); got != c.ChargeID {
		t.Fatalf("after recovery the repeat answered charge %q, the PSP holds %q", got, c.ChargeID)
	}
	if n := w.EMF.Sum("KeyStoreDegraded"); n != degraded {
		t.Fatalf("KeyStoreDegraded %v after recovery, %v before: the request after recovery still ran degraded", n, degraded)
	}
	rec, found, err := w.Claims.Get(ctx, ids.Scope("u1", "K1"), w.Clock.Now())
	if err != nil || !found || rec.State != idem.Completed || rec.Answer == nil || rec.Answer.Status != http.StatusCreated {
		t.Fatalf("after recovery the key record is %+v (found %v, %v), want COMPLETED with the 201", rec, found, err)
	}
	if got := chargeOf(t, api.Response{Status: rec.Answer.Status, Body: rec.Answer.Body}); got != c.ChargeID {
		t.Fatalf("the key record answers charge %q, the PSP holds %q", got, c.ChargeID)
	}
	expectCount(t, w, theSeedsCount)
}

// The ledger is down: nothing runs (no PSP call without a durable intent),
// the answer is 503, and nothing is credited or pushed. After it recovers,
// the retry (past any claim's lease) pays once, is credited once and
// notified once.
func TestLedgerDown_NothingRunsAndTheRetryAfterRecoveryPaysOnce(t *testing.T) {
	t.Parallel()
	fl := &faultyLedger{}
	w := newWorld(t, story.Options{WrapLedger: func(l api.Ledger) api.Ledger { fl.Ledger = l; return fl }})
	fl.insertDown.Store(true)
	expectStatus(t, w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now()), http.StatusServiceUnavailable)
	settle(t, w)
	c, err := w.Count(ctx, "m1")
	if err != nil {
		t.Fatal(err)
	}
	if c.Charges != 0 || c.Credits != 0 || c.Balance != 12000 || c.Alerts != 0 {
		t.Fatalf("while the ledger was down: %+v", c)
	}
	fl.insertDown.Store(false)
	w.Clock.Advance(w.Timing.Deadline + w.Timing.Margin + time.Second)
	expectStatus(t, w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now()), http.StatusCreated)
	expectCount(t, w, theSeedsCount)
	expectNotified(t, w, ids.EventID(pid7, "SUCCEEDED"), 3000)
}

// The ledger is unreachable for every function at once (the world's
// faultnet proxy: connections refused, statements failing before they
// reach the server): the tap is answered 503, never "VOID" or "failed",
// nothing is charged, credited or pushed while every hop runs. After it
// recovers, the retry (past the claim's lease) pays once, the merchant is
// credited once and the phone shows one notification from one alert.
func TestLedgerOutage_NothingRunsAndAfterRecoveryTheRetryPaysCreditsAndNotifiesOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, story.Options{FaultNet: true})
	if err := w.Net.Down(1 << 20); err != nil {
		t.Fatal(err)
	}
	tap := w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now())
	expectStatus(t, tap, http.StatusServiceUnavailable)
	if pt := problemType(t, tap); pt != problem.TypeLedgerUnavailable && pt != problem.TypeLedgerUnconfirmed {
		t.Fatalf("the tap in the outage answered %s", tap.Body)
	}
	// "Did it go through?" cannot be answered VOID without the ledger.
	expectStatus(t, w.Resolve(ctx, "u1", "K1"), http.StatusServiceUnavailable)
	hopsWhileDown(t, w)
	expectNothingYet(t, w, "while the ledger was down", 0)
	if fired := w.Net.Up(); fired == 0 {
		t.Fatal("the outage failed no ledger call")
	}
	w.Clock.Advance(w.Timing.Deadline + w.Timing.Margin + time.Second)
	retry := w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now())
	expectStatus(t, retry, http.StatusCreated)
	c := expectCount(t, w, theSeedsCount)
	if got := chargeOf(t, retry); got != c.ChargeID {
		t.Fatalf("the retry answered charge %q, the PSP holds %q", got, c.ChargeID)
	}
	expectNotified(t, w, ids.EventID(pid7, "SUCCEEDED"), 3000)
}

// The ledger goes down after the payment settled, with its event in
// flight: the worker's credit, the notification sweep, the resolver and
// its outbox sweep all fail while it lasts, and nothing is credited or
// pushed. After it recovers the event is credited once and the buyer
// notified once; the answer given before the outage still holds.
func TestLedgerOutageWithTheEventInFlight_AfterRecoveryItIsCreditedAndNotifiedOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t, story.Options{FaultNet: true})
	paid := w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now())
	expectStatus(t, paid, http.StatusCreated)
	if err := w.Net.Down(1 << 20); err != nil {
		t.Fatal(err)
	}
	for range 2 { // a redelivery in the outage fails the same way
		hopsWhileDown(t, w)
		if _, err := w.Queue.Expire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(w.Charges("")); n != 1 {
		t.Fatalf("%d charges", n)
	}
	expectNothingYet(t, w, "while the ledger was down with the event in flight", 1)
	if fired := w.Net.Up(); fired == 0 {
		t.Fatal("the outage failed no ledger call")
	}
	c := expectCount(t, w, theSeedsCount)
	if got := chargeOf(t, paid); got != c.ChargeID {
		t.Fatalf("answered charge %q, the PSP holds %q", got, c.ChargeID)
	}
	expectNotified(t, w, ids.EventID(pid7, "SUCCEEDED"), 3000)
	expectStatus(t, w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now()), http.StatusCreated)
	expectCount(t, w, theSeedsCount)
}

// The PENDING insert committed and its reply was lost, and the API's
// re-ask (the same insert-if-absent) was lost too: the tap must not hear
// "nothing was run" (a client that believes it pays again under a new
// key), only "not confirmed, retry with the same key". The row is there;
// the resolver settles it once, and the retry hears SUCCEEDED.
func TestPendingInsertCommittedButUnconfirmed_TheTapIsNeverToldNothingRan(t *testing.T) {
	t.Parallel()
	w := newWorld(t, story.Options{FaultNet: true})
	for range 2 {
		if err := w.Net.Arm(faultnet.Rule{Statement: "INSERT INTO payments"}); err != nil {
			t.Fatal(err)
		}
	}
	tap := w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now())
	expectStatus(t, tap, http.StatusServiceUnavailable)
	if pt := problemType(t, tap); pt != problem.TypeLedgerUnconfirmed {
		t.Fatalf("the tap whose PENDING insert committed answered %s: it may say nothing ran only when nothing did", tap.Body)
	}
	if f := w.Net.Fired()["INSERT INTO payments"]; f != 2 {
		t.Fatalf("lost replies %v, want the insert's and the re-ask's", w.Net.Fired())
	}
	if n, err := w.Int(ctx, `SELECT count(*) FROM payments WHERE payment_id = $1 AND state = 'PENDING'`, pid7); err != nil || n != 1 {
		t.Fatalf("%d PENDING rows (%v), want the one that committed", n, err)
	}
	w.Clock.Advance(w.Timing.Deadline + w.Timing.Margin + time.Second)
	c := expectCount(t, w, theSeedsCount)
	retry := w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now())
	expectStatus(t, retry, http.StatusCreated)
	if got := chargeOf(t, retry); got != c.ChargeID {
		t.Fatalf("the retry answered charge %q, the PSP holds %q", got, c.ChargeID)
	}
	expectNotified(t, w, ids.EventID(pid7, "SUCCEEDED"), 3000)
	expectCount(t, w, theSeedsCount)
}

// hopsWhileDown runs every hop once in a ledger outage. A hop that fails
// on the ledger is what Lambda retries; only a failure elsewhere (the
// queue, the stream) stops the test.
func hopsWhileDown(t *testing.T, w *story.World) {
	t.Helper()
	rr, err := w.Resolver()
	if err != nil {
		t.Fatal(err)
	}
	_, _ = rr.Run(ctx)
	_, _ = w.Sim.FlushWebhooks(ctx) // refused 503: the PSP delivers again
	if _, err := w.Stream.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Queue.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	_, _ = w.Notifs.FinishPending(ctx, inbox.SweepLimit)
}

// expectNothingYet: charges PSP charges so far (a charge made before the
// durable intent would collapse into the retry's under the derived key, so
// only a count taken now shows it), no credit, m1 untouched, no push on the
// phone.
func expectNothingYet(t *testing.T, w *story.World, when string, charges int) {
	t.Helper()
	if _, err := w.AwaitPushes(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	c, err := w.Count(ctx, "m1")
	if err != nil {
		t.Fatal(err)
	}
	if c.Charges != charges || c.Credits != 0 || c.Balance != 12000 || c.Alerts != 0 {
		t.Fatalf("%s: %+v", when, c)
	}
}

// expectNotified: the event's notification is SENT and the phone got it
// with the payment's amount.
func expectNotified(t *testing.T, w *story.World, eventID string, amount int64) {
	t.Helper()
	var state string
	if err := w.Pool.QueryRow(ctx, `SELECT state FROM notif WHERE event_id = $1`, eventID).Scan(&state); err != nil || state != "SENT" {
		t.Fatalf("notification of %s: %q (%v), want SENT", eventID, state, err)
	}
	n := 0
	for _, d := range w.PushLog() {
		if d.EventID == eventID {
			n++
			if d.Amount != amount {
				t.Fatalf("the push for %s says %d, want %d", eventID, d.Amount, amount)
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d pushes for %s, want 1", n, eventID)
	}
}

func chargeOf(t *testing.T, r api.Response) string {
	t.Helper()
	var b struct {
		Charge string `json:"psp_charge"`
	}
	if err := json.Unmarshal(r.Body, &b); err != nil || b.Charge == "" {
		t.Fatalf("body %s: no psp_charge (%v)", r.Body, err)
	}
	return b.Charge
}

func problemType(t *testing.T, r api.Response) string {
	t.Helper()
	var b struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(r.Body, &b); err != nil {
		t.Fatalf("body %s: %v", r.Body, err)
	}
	return b.Type
}

func stateOf(t *testing.T, r api.Response) string {
	t.Helper()
	var b struct {
		State string `json:"state"`
	}
	if err := json.Unmarshal(r.Body, &b); err != nil {
		t.Fatalf("body %s: %v", r.Body, err)
	}
	return b.State
}
