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
	"github.com/oncepay/oncepay/internal/ledger"
	"github.com/oncepay/oncepay/internal/localcloud/pspsim"
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

func (l *faultyLedger) InsertPending(ctx context.Context, p ledger.Payment) (ledger.Payment, bool, error) {
	if l.insertDown.Load() {
		return ledger.Payment{}, false, errInjected
	}
	return l.Ledger.InsertPending(ctx, p)
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
// charged, credited and notified once; a repeat while it is still down is
// answered from the ledger row; after it recovers the repeat is answered
// again without a second charge.
func TestKeyStoreDown_TheDurableGuardAloneChargesCreditsAndNotifiesOnce(t *testing.T) {
	t.Parallel()
	dc := &downClaims{}
	w := newWorld(t, story.Options{WrapClaims: func(c api.Claims) api.Claims { dc.Claims = c; return dc }})
	dc.down.Store(true)
	expectStatus(t, w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now()), http.StatusCreated)
	again := w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now())
	expectStatus(t, again, http.StatusCreated)
	if again.Headers.Get("Idempotent-Replayed") != "true" {
		t.Fatal("the repeat while the key store is down is not marked replayed")
	}
	if n := w.EMF.Sum("KeyStoreDegraded"); n < 2 {
		t.Fatalf("KeyStoreDegraded counted %v times, want one per request", n)
	}
	expectCount(t, w, theSeedsCount)
	dc.down.Store(false)
	w.Clock.Advance(time.Minute)
	expectStatus(t, w.Pay(ctx, "u1", "K1", story.Body, w.Clock.Now()), http.StatusCreated)
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
